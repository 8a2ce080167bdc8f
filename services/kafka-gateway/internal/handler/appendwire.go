package handler

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// appendWire sends an AppendStreamRequest through grpcx.Codec without copying its
// batches into the marshalled message: the encoding is the small framing around each
// field, in one buffer, interleaved with the batches themselves by reference. The
// batches are the Kafka request's own bytes (kmsg views of the request body), which
// are never modified or reused after the request is read, so gRPC may write them
// after SendMsg returns.
type appendWire struct {
	m *storagev1.AppendStreamRequest
}

// AppendStreamRequest is the wrapped message.
func (w appendWire) AppendStreamRequest() *storagev1.AppendStreamRequest { return w.m }

// MarshalBuffers implements grpcx.BufferMarshaler: the bytes proto.Marshal produces
// for the message (field order, zero values omitted), in pieces.
func (w appendWire) MarshalBuffers(mem.BufferPool) (mem.BufferSlice, error) {
	m := w.m
	for _, cb := range m.Channels {
		if !utf8.ValidString(cb.Channel) {
			return nil, errInvalidUTF8 // as proto.Marshal
		}
	}
	// Framing: id (tag + varint), then per channel its tag and length, the channel
	// name field, and the batches field's tag and length.
	n := 0
	if m.Id != 0 {
		n += 1 + protowire.SizeVarint(m.Id)
	}
	for _, cb := range m.Channels {
		n += 1 + protowire.SizeVarint(uint64(channelBatchesSize(cb))) + 1 + protowire.SizeBytes(len(cb.Channel)) + 1 + protowire.SizeVarint(uint64(len(cb.Batches)))
	}
	frame := make([]byte, 0, n)
	out := make(mem.BufferSlice, 0, 2*len(m.Channels)+1)
	if m.Id != 0 {
		frame = protowire.AppendTag(frame, 1, protowire.VarintType)
		frame = protowire.AppendVarint(frame, m.Id)
	}
	start := 0
	for _, cb := range m.Channels {
		frame = protowire.AppendTag(frame, 2, protowire.BytesType)
		frame = protowire.AppendVarint(frame, uint64(channelBatchesSize(cb)))
		if cb.Channel != "" {
			frame = protowire.AppendTag(frame, 1, protowire.BytesType)
			frame = protowire.AppendString(frame, cb.Channel)
		}
		if len(cb.Batches) == 0 {
			continue
		}
		frame = protowire.AppendTag(frame, 2, protowire.BytesType)
		frame = protowire.AppendVarint(frame, uint64(len(cb.Batches)))
		out = append(out, mem.SliceBuffer(frame[start:len(frame):len(frame)]), mem.SliceBuffer(cb.Batches))
		start = len(frame)
	}
	if start < len(frame) {
		out = append(out, mem.SliceBuffer(frame[start:]))
	}
	return out, nil
}

// errInvalidUTF8 is the marshal error for a channel name proto.Marshal would refuse.
var errInvalidUTF8 = errors.New("append request: channel name is not valid UTF-8")

// channelBatchesSize is the encoded size of cb's fields.
func channelBatchesSize(cb *storagev1.ChannelBatches) int {
	n := 0
	if cb.Channel != "" {
		n += 1 + protowire.SizeBytes(len(cb.Channel))
	}
	if len(cb.Batches) > 0 {
		n += 1 + protowire.SizeBytes(len(cb.Batches))
	}
	return n
}
