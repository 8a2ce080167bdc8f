package handler

import (
	"context"
	"strings"

	"google.golang.org/grpc/mem"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
)

// Receive answers hold up to 1000 messages. Decoded by proto, each message became a
// ReceivedMessage, a Record, a header slice and a struct and a copy per header, only
// to be turned into a Pub/Sub message at once; profiles of a StreamingPull run put a
// quarter of the gateway's CPU there. When the handler has the storage connection,
// Receive answers are decoded straight from the wire into deliveries (receiveReply):
// one copy of the answer, values and header values viewed in it, the ack ids of the
// whole answer in one string, the headers in one slice, the reserved header keys not
// copied at all.
//
// The copy of the answer is a fresh heap slice for Pull and push: their deliveries
// live on in the Pub/Sub answer gRPC marshals after the handler returns, or in a push
// request body, with no hook to say when they are done. A StreamingPull stream that
// encodes its own responses (streamwire.go) asks for a pooled copy instead (a
// grpcx.BufferPool buffer, not zeroed): it is done with the deliveries once their
// response is encoded, before the Send, and frees the copy then (receiveReply.free).
// A fresh 1 MiB copy per answer cost about a tenth of the gateway's CPU in allocation,
// clearing and page faults.

// receive leases messages from storage-core: over conn, decoded by receiveReply;
// without it (tests with a fake QueueServiceClient), through queues. The deliveries
// are the caller's to keep.
func (h *Subscriber) receive(ctx context.Context, req *storagev1.ReceiveRequest) ([]delivery, error) {
	r, err := h.receiveReply(ctx, req, false)
	if err != nil {
		return nil, err
	}
	return r.msgs, nil
}

// receiveReply is receive, with the deliveries' values and header values views of a
// pooled buffer when pooled is set and the answer came over the storage connection:
// the caller then calls r.free once nothing reads the deliveries any more (their ack
// ids stay valid; they are not in the buffer). On error nothing needs freeing.
func (h *Subscriber) receiveReply(ctx context.Context, req *storagev1.ReceiveRequest, pooled bool) (*receiveReply, error) {
	if h.storageConn != nil {
		r := &receiveReply{pooled: pooled}
		if err := h.storageConn.Invoke(ctx, storagev1.QueueService_Receive_FullMethodName, req, r); err != nil {
			r.free()
			return nil, err
		}
		return r, nil
	}
	resp, err := h.queues.Receive(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]delivery, len(resp.GetMessages()))
	for i, m := range resp.GetMessages() {
		out[i] = fromProto(m)
	}
	return &receiveReply{msgs: out, nextBytes: resp.GetNextBytes()}, nil
}

// receiveReply is a ReceiveResponse decoded into deliveries (grpcx.BufferUnmarshaler)
// by storagewire.DecodeReceiveResponse, which fails where proto.Unmarshal fails.
type receiveReply struct {
	msgs []delivery
	// nextBytes is the answer's next_bytes: with exact_max_bytes, the size of the
	// first available message when it alone did not fit (then msgs is empty).
	nextBytes int64
	// pooled asks UnmarshalBuffers to copy the answer into its pool; buf is that copy
	// (nil: none, or a heap copy), freed by free.
	pooled bool
	buf    mem.Buffer
	// dec decodes the answer; empty outside decode.
	dec replyDecoder
}

var _ grpcx.BufferUnmarshaler = (*receiveReply)(nil)

// free returns the pooled copy of the answer, if any, to its pool: after it, the
// deliveries' values and header values must not be read. It may be called again.
func (r *receiveReply) free() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
}

// UnmarshalBuffers implements grpcx.BufferUnmarshaler: the answer is copied once (into
// pool when r.pooled, kept in r.buf), and the deliveries' values and header values are
// views of that copy.
func (r *receiveReply) UnmarshalBuffers(data mem.BufferSlice, pool mem.BufferPool) error {
	r.free()
	var b []byte
	if r.pooled && pool != nil {
		r.buf = data.MaterializeToBuffer(pool)
		b = r.buf.ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	err := r.decode(b)
	if err != nil {
		r.free()
		r.msgs = nil
	}
	return err
}

// decode decodes the answer b into r.msgs and r.nextBytes.
func (r *receiveReply) decode(b []byte) error {
	r.nextBytes = 0
	// Count the messages first, so msgs is allocated once.
	n, err := storagewire.CountReceivedMessages(b)
	if err != nil {
		return err
	}
	// Messages published through Pub/Sub carry two headers (id and publish time).
	// The decoder lives in r, which is on the heap already, so that passing it as a
	// storagewire.ReceiveVisitor allocates nothing more.
	r.dec = replyDecoder{msgs: make([]delivery, 0, n), acks: make([][]byte, 0, n), hdrs: make([]storedHeader, 0, 2*n), hend: make([]int, 0, n)}
	defer func() { r.dec = replyDecoder{} }()
	next, err := storagewire.DecodeReceiveResponse(b, &r.dec)
	if err != nil {
		return err
	}
	r.msgs, r.nextBytes = r.dec.finish(), next
	return nil
}

// replyDecoder collects the deliveries of one answer: their ack ids (views of the
// answer) and headers (in one slice, hend[i] the end of msgs[i]'s) are put in place
// by finish.
type replyDecoder struct {
	msgs []delivery
	acks [][]byte
	hdrs []storedHeader
	hend []int
}

// finish gives each delivery its ack id, a substring of one string holding those of
// the whole answer, and its headers, a sub-slice of one slice (nil when none).
func (dec *replyDecoder) finish() []delivery {
	total := 0
	for _, a := range dec.acks {
		total += len(a)
	}
	var sb strings.Builder
	sb.Grow(total)
	for _, a := range dec.acks {
		sb.Write(a)
	}
	all := sb.String()
	off, h0 := 0, 0
	for i := range dec.msgs {
		d := &dec.msgs[i]
		d.ackID = all[off : off+len(dec.acks[i])]
		off += len(dec.acks[i])
		if h1 := dec.hend[i]; h1 > h0 {
			d.headers = dec.hdrs[h0:h1:h1]
			h0 = h1
		}
	}
	return dec.msgs
}

// Header implements storagewire.ReceiveVisitor: a header of the next delivery.
func (dec *replyDecoder) Header(key, value []byte) {
	dec.hdrs = append(dec.hdrs, storedHeader{key: headerKey(key), value: value})
}

// Message implements storagewire.ReceiveVisitor: a delivery, its headers the ones
// just passed to Header.
func (dec *replyDecoder) Message(m storagewire.MessageView) {
	dec.msgs = append(dec.msgs, delivery{attempt: m.DeliveryAttempt, sourceSeq: m.SourceSequence, ts: m.Record.TimestampMs, value: m.Record.Value})
	dec.acks = append(dec.acks, m.AckID)
	dec.hend = append(dec.hend, len(dec.hdrs))
}

// headerKey is the header key k as a string: the reserved keys every Pub/Sub message
// carries without a copy, others copied.
func headerKey(k []byte) string {
	switch string(k) {
	case hdrMessageID:
		return hdrMessageID
	case hdrPublishTime:
		return hdrPublishTime
	case hdrOrderingKey:
		return hdrOrderingKey
	}
	return string(k)
}
