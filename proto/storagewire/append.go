package storagewire

import (
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// AppendStreamRequestBuffers is m encoded as proto.Marshal encodes it, in pieces: the
// framing (id, channel names, tags and lengths) in one buffer, interleaved with each
// channel's Batches by reference, never copied. The batches must not change until the
// pieces are written (for gRPC: ever, since the transport writes after SendMsg
// returns). Errors: ErrInvalidUTF8 when a channel name is not UTF-8.
func AppendStreamRequestBuffers(m *storagev1.AppendStreamRequest) (mem.BufferSlice, error) {
	for _, cb := range m.Channels {
		if !utf8.ValidString(cb.Channel) {
			return nil, ErrInvalidUTF8
		}
	}
	// Framing: id (tag + varint), then per channel its tag and length, the channel
	// name field, the batches field's tag and length, and the two flags.
	n := varintField(m.Id)
	for _, cb := range m.Channels {
		n += 1 + protowire.SizeVarint(uint64(channelBatchesSize(cb))) + 1 + protowire.SizeBytes(len(cb.Channel)) + 1 + protowire.SizeVarint(uint64(len(cb.Batches))) + 2*boolField
	}
	frame := make([]byte, 0, n)
	out := make(mem.BufferSlice, 0, 2*len(m.Channels)+1)
	frame = appendVarintField(frame, fAppendID, m.Id)
	start := 0
	for _, cb := range m.Channels {
		frame = protowire.AppendTag(frame, fAppendChannels, protowire.BytesType)
		frame = protowire.AppendVarint(frame, uint64(channelBatchesSize(cb)))
		frame = appendStringField(frame, fBatchesChannel, cb.Channel)
		if len(cb.Batches) > 0 {
			frame = protowire.AppendTag(frame, fBatchesBatches, protowire.BytesType)
			frame = protowire.AppendVarint(frame, uint64(len(cb.Batches)))
			out = append(out, mem.SliceBuffer(frame[start:len(frame):len(frame)]), mem.SliceBuffer(cb.Batches))
			start = len(frame)
		}
		frame = appendBoolField(frame, fBatchesSingleBatch, cb.SingleBatch)
		frame = appendBoolField(frame, fBatchesValidateOnly, cb.ValidateOnly)
	}
	if start < len(frame) {
		out = append(out, mem.SliceBuffer(frame[start:]))
	}
	return out, nil
}

// channelBatchesSize is the encoded size of cb's fields.
func channelBatchesSize(cb *storagev1.ChannelBatches) int {
	n := stringField(cb.Channel)
	if len(cb.Batches) > 0 {
		n += bytesField(len(cb.Batches))
	}
	if cb.SingleBatch {
		n += boolField
	}
	if cb.ValidateOnly {
		n += boolField
	}
	return n
}

// boolField is the size of a true bool field with a one-byte tag.
const boolField = 2

// DecodeAppendStreamRequest decodes b into m with each channel's Batches a view of b
// (its capacity capped at the field, so an append cannot run into the next one). It
// handles the shape AppendStreamRequestBuffers writes: id at most once, channels of a
// channel name and batches, each at most once. For anything else (an unknown or
// repeated field, a wrong wire type, bad UTF-8, truncation) it reports false and m is
// partly filled: the caller resets m and leaves the input to proto.Unmarshal, which
// copies what it keeps and reports the errors it always reports.
func DecodeAppendStreamRequest(b []byte, m *storagev1.AppendStreamRequest) bool {
	seenID := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == fAppendID && typ == protowire.VarintType && !seenID:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			m.Id, seenID = v, true
			b = b[n:]
		case num == fAppendChannels && typ == protowire.BytesType:
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
	seenChannel, seenBatches, seenSingle, seenValidate := false, false, false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ == protowire.VarintType {
			// The flags: written only when true, as 1, each at most once.
			if len(b) == 0 || b[0] != 1 {
				return false
			}
			b = b[1:]
			switch {
			case num == fBatchesSingleBatch && !seenSingle:
				cb.SingleBatch, seenSingle = true, true
			case num == fBatchesValidateOnly && !seenValidate:
				cb.ValidateOnly, seenValidate = true, true
			default:
				return false
			}
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == fBatchesChannel && !seenChannel:
			if !utf8.Valid(v) {
				return false
			}
			cb.Channel, seenChannel = string(v), true
		case num == fBatchesBatches && !seenBatches:
			cb.Batches, seenBatches = v[:len(v):len(v)], true
		default:
			return false
		}
	}
	return true
}
