package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// A Receive answer holds up to 1000 messages. Built as a ReceiveResponse, each message
// cost three to four small allocations (the message, its record, its headers) and then
// proto's generic marshal; profiles of a StreamingPull run put about a fifth of
// storage-core's CPU there. Served over gRPC, Receive hands its deliveries to
// receiveDirect, which answers with a receiveWire: the same bytes proto.Marshal would
// write, encoded straight from the deliveries (storagewire.ReceiveResponseBuffers).

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

// receiveWire is a ReceiveResponse of these deliveries, marshalled by
// storagewire.ReceiveResponseBuffers straight from them.
type receiveWire []queue.Delivery

// MarshalBuffers implements grpcx.BufferMarshaler. Errors: storagewire.ErrInvalidUTF8
// for a header key (or ack id, source) proto.Marshal would refuse.
func (w receiveWire) MarshalBuffers(pool mem.BufferPool) (mem.BufferSlice, error) {
	return storagewire.ReceiveResponseBuffers(len(w), func(i int) storagewire.ReceivedMessage[store.Header] {
		d := &w[i]
		r := &d.Record
		return storagewire.ReceivedMessage[store.Header]{
			AckID: d.AckID,
			Record: storagewire.Record[store.Header]{
				Sequence: channel.OffsetToSequence(r.Offset), TimestampMs: r.Timestamp, Key: r.Key, Value: r.Value, Headers: r.Headers,
				ProducerID: r.ProducerID, ProducerEpoch: int32(r.ProducerEpoch), Transactional: r.Transactional, Control: r.Control,
			},
			Source: d.Source, SourceSequence: d.SourceSeq, DeliveryAttempt: d.Attempt,
		}
	}, 0, pool)
}

var _ grpcx.BufferMarshaler = receiveWire(nil)
