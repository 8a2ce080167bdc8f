package server

import (
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// appendRequest is an AppendStreamRequest received through grpcx.Codec without
// copying its batches: the message is copied once out of the transport's frames into
// one buffer from the pool, which the request owns, and each channel's Batches is a
// view into it (the store rewrites base offsets in place, so the buffer must be
// writable and ours alone). release returns the buffer once the batches are written;
// nothing may use Batches after that.
type appendRequest struct {
	req  storagev1.AppendStreamRequest
	buf  *[]byte
	pool mem.BufferPool
}

// UnmarshalBuffers implements grpcx.BufferUnmarshaler. The fields are decoded by hand
// for the shape gateways send (id, then channels of channel and batches, each at most
// once); anything else (unknown or repeated fields, bad UTF-8) is left to
// proto.Unmarshal, which copies the bytes and reports the errors it always reports.
func (a *appendRequest) UnmarshalBuffers(data mem.BufferSlice, pool mem.BufferPool) error {
	a.buf, a.pool = pool.Get(data.Len()), pool
	b := *a.buf
	data.CopyTo(b)
	if !decodeAppendStreamRequest(b, &a.req) {
		a.req.Reset()
		err := proto.Unmarshal(b, &a.req) // copies what it keeps
		pool.Put(a.buf)
		a.buf = nil
		return err
	}
	return nil
}

// release returns the buffer holding the batches to the pool.
func (a *appendRequest) release() {
	if a.buf == nil {
		return
	}
	for _, cb := range a.req.Channels {
		cb.Batches = nil
	}
	a.pool.Put(a.buf)
	a.buf = nil
}

// decodeAppendStreamRequest decodes b into m with Batches aliasing b. It reports false
// for any input outside the plain shape (the caller then uses proto.Unmarshal).
func decodeAppendStreamRequest(b []byte, m *storagev1.AppendStreamRequest) bool {
	seenID := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType && !seenID:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			m.Id, seenID = v, true
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			cb := &storagev1.ChannelBatches{}
			if !decodeChannelBatches(v, cb) {
				return false
			}
			m.Channels = append(m.Channels, cb)
			b = b[n:]
		default:
			return false
		}
	}
	return true
}

func decodeChannelBatches(b []byte, cb *storagev1.ChannelBatches) bool {
	seenChannel, seenBatches := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && !seenChannel:
			if !utf8.Valid(v) {
				return false
			}
			cb.Channel, seenChannel = string(v), true
		case num == 2 && !seenBatches:
			cb.Batches, seenBatches = v[:len(v):len(v)], true
		default:
			return false
		}
	}
	return true
}
