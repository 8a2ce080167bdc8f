package server

import (
	"context"
	"errors"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// A Receive answer holds up to 1000 messages. Built as a ReceiveResponse, each message
// cost three to four small allocations (the message, its record, its headers) and then
// proto's generic marshal; profiles of a StreamingPull run put about a fifth of
// storage-core's CPU there. Served over gRPC, Receive hands its deliveries to
// receiveDirect, which answers with a receiveWire: the same bytes proto.Marshal would
// write (field order, proto3 zero omission, optional key and value present when
// non-nil), encoded straight from the deliveries.

// receiveHolder takes the deliveries of one Receive call served over gRPC.
type receiveHolder struct {
	ds  []queue.Delivery
	set bool
}

type receiveHolderKey struct{}

// receiveDirect is the unary interceptor that answers QueueService.Receive with a
// receiveWire; other methods pass through.
func receiveDirect(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod != storagev1.QueueService_Receive_FullMethodName {
		return handler(ctx, req)
	}
	h := &receiveHolder{}
	resp, err := handler(context.WithValue(ctx, receiveHolderKey{}, h), req)
	if err != nil || !h.set {
		return resp, err
	}
	return receiveWire(h.ds), nil
}

// holdDeliveries passes ds to the receiveDirect of the call ctx belongs to and
// reports whether there is one (else the caller builds a ReceiveResponse).
func holdDeliveries(ctx context.Context, ds []queue.Delivery) bool {
	h, ok := ctx.Value(receiveHolderKey{}).(*receiveHolder)
	if ok {
		h.ds, h.set = ds, true
	}
	return ok
}

// receiveWire is a ReceiveResponse of these deliveries, marshalled by hand.
type receiveWire []queue.Delivery

// Field numbers of ReceiveResponse, ReceivedMessage, Record and Header (queue.proto,
// storage.proto).
const (
	fReceiveMessages = 1

	fMsgAckID    = 1
	fMsgRecord   = 2
	fMsgSource   = 3
	fMsgSourceSq = 4
	fMsgAttempt  = 5

	fRecSequence      = 1
	fRecTimestamp     = 2
	fRecKey           = 3
	fRecValue         = 4
	fRecHeaders       = 5
	fRecProducerID    = 6
	fRecProducerEpoch = 7
	fRecTransactional = 8
	fRecControl       = 9

	fHdrKey   = 1
	fHdrValue = 2
)

// errHeaderUTF8 is proto.Marshal's refusal of a header key (a proto3 string) that is
// not UTF-8, kept so such an answer fails as it did when proto encoded it.
var errHeaderUTF8 = errors.New("string field contains invalid UTF-8 (header key)")

// MarshalBuffers implements grpcx.BufferMarshaler.
func (w receiveWire) MarshalBuffers(pool mem.BufferPool) (mem.BufferSlice, error) {
	size := 0
	// sizes[i]: the encoded size of delivery i and of its record, computed once for
	// the total and the length prefixes.
	sizes := make([][2]int, len(w))
	for i := range w {
		for _, h := range w[i].Record.Headers {
			if !utf8.ValidString(h.Key) {
				return nil, errHeaderUTF8
			}
		}
		rs := recordSize(&w[i].Record)
		n := deliverySize(&w[i], rs)
		sizes[i] = [2]int{n, rs}
		size += 1 + protowire.SizeVarint(uint64(n)) + n
	}
	if size == 0 {
		return nil, nil
	}
	var b []byte
	var bp *[]byte
	if mem.IsBelowBufferPoolingThreshold(size) {
		b = make([]byte, 0, size)
	} else {
		bp = pool.Get(size)
		b = (*bp)[:0]
	}
	for i := range w {
		d := &w[i]
		b = protowire.AppendTag(b, fReceiveMessages, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i][0]))
		b = appendDelivery(b, d, sizes[i][1])
	}
	if bp == nil {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, pool)}, nil
}

// bytesField is the size of a length-delimited field with a one-byte tag.
func bytesField(n int) int { return 1 + protowire.SizeBytes(n) }

// varintField is the size of a varint field with a one-byte tag, 0 when v is zero.
func varintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// deliverySize is the encoded size of d, whose record encodes to recordSize bytes.
func deliverySize(d *queue.Delivery, recordSize int) int {
	n := 0
	if d.AckID != "" {
		n += bytesField(len(d.AckID))
	}
	n += bytesField(recordSize)
	if d.Source != "" {
		n += bytesField(len(d.Source))
	}
	n += varintField(uint64(d.SourceSeq))
	n += varintField(uint64(int64(d.Attempt)))
	return n
}

func recordSize(r *store.Record) int {
	n := varintField(uint64(r.Offset+1)) + varintField(uint64(r.Timestamp))
	if r.Key != nil {
		n += bytesField(len(r.Key))
	}
	if r.Value != nil {
		n += bytesField(len(r.Value))
	}
	for _, h := range r.Headers {
		n += bytesField(headerSize(h))
	}
	n += varintField(uint64(r.ProducerID)) + varintField(uint64(int64(r.ProducerEpoch)))
	if r.Transactional {
		n += 2
	}
	if r.Control {
		n += 2
	}
	return n
}

func headerSize(h store.Header) int {
	n := 0
	if h.Key != "" {
		n += bytesField(len(h.Key))
	}
	if len(h.Value) > 0 {
		n += bytesField(len(h.Value))
	}
	return n
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(protowire.AppendTag(b, num, protowire.VarintType), 1)
}

// appendDelivery appends d, whose record encodes to recordSize bytes.
func appendDelivery(b []byte, d *queue.Delivery, recordSize int) []byte {
	b = appendStringField(b, fMsgAckID, d.AckID)
	r := &d.Record
	b = protowire.AppendTag(b, fMsgRecord, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(recordSize))
	b = appendVarintField(b, fRecSequence, uint64(r.Offset+1))
	b = appendVarintField(b, fRecTimestamp, uint64(r.Timestamp))
	if r.Key != nil {
		b = appendBytesField(b, fRecKey, r.Key)
	}
	if r.Value != nil {
		b = appendBytesField(b, fRecValue, r.Value)
	}
	for _, h := range r.Headers {
		b = protowire.AppendTag(b, fRecHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		b = appendStringField(b, fHdrKey, h.Key)
		if len(h.Value) > 0 {
			b = appendBytesField(b, fHdrValue, h.Value)
		}
	}
	b = appendVarintField(b, fRecProducerID, uint64(r.ProducerID))
	b = appendVarintField(b, fRecProducerEpoch, uint64(int64(r.ProducerEpoch)))
	b = appendBoolField(b, fRecTransactional, r.Transactional)
	b = appendBoolField(b, fRecControl, r.Control)
	b = appendStringField(b, fMsgSource, d.Source)
	b = appendVarintField(b, fMsgSourceSq, uint64(d.SourceSeq))
	return appendVarintField(b, fMsgAttempt, uint64(int64(d.Attempt)))
}

var _ grpcx.BufferMarshaler = receiveWire(nil)
