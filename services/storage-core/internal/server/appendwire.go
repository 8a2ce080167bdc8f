package server

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
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

// UnmarshalBuffers implements grpcx.BufferUnmarshaler. storagewire.DecodeAppendStreamRequest
// decodes the shape gateways send (id, then channels of channel and batches, each at
// most once); anything else (unknown or repeated fields, bad UTF-8) is left to
// proto.Unmarshal, which copies the bytes and reports the errors it always reports.
func (a *appendRequest) UnmarshalBuffers(data mem.BufferSlice, pool mem.BufferPool) error {
	a.buf, a.pool = pool.Get(data.Len()), pool
	b := *a.buf
	data.CopyTo(b)
	if !storagewire.DecodeAppendStreamRequest(b, &a.req) {
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
