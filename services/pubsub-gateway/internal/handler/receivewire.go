package handler

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
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

// receiveReply is a ReceiveResponse decoded into deliveries (grpcx.BufferUnmarshaler).
// Fields the gateway does not use are skipped, as are fields of an unexpected wire
// type (proto keeps those as unknown fields).
type receiveReply struct {
	msgs []delivery
	// nextBytes is the answer's next_bytes: with exact_max_bytes, the size of the
	// first available message when it alone did not fit (then msgs is empty).
	nextBytes int64
	// pooled asks UnmarshalBuffers to copy the answer into its pool; buf is that copy
	// (nil: none, or a heap copy), freed by free.
	pooled bool
	buf    mem.Buffer
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

// errBadUTF8 is proto's refusal of a string field that is not UTF-8.
var errBadUTF8 = errors.New("receive answer: string field contains invalid UTF-8")

// errFieldNumber is proto's refusal of a field number above protowire.MaxValidNumber.
var errFieldNumber = errors.New("receive answer: invalid field number")

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
	n := 0
	for rest := b; len(rest) > 0; {
		num, typ, _, next, err := nextField(rest)
		if err != nil {
			return err
		}
		if num == 1 && typ == protowire.BytesType {
			n++
		}
		rest = next
	}
	// Messages published through Pub/Sub carry two headers (id and publish time).
	dec := replyDecoder{msgs: make([]delivery, 0, n), acks: make([][]byte, 0, n), hdrs: make([]storedHeader, 0, 2*n), hend: make([]int, 0, n)}
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			if err := dec.delivery(v); err != nil {
				return err
			}
		case num == 2 && typ == protowire.VarintType:
			r.nextBytes = int64(varint(v))
		}
		b = rest
	}
	r.msgs = dec.finish()
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

// nextField reads the field at the start of the message b: its number, wire type and
// value (of a bytes field its contents, of a varint its bytes, decode with varint;
// else nil), and the rest of b. It refuses what proto.Unmarshal refuses: a truncated
// or malformed field, a field number above protowire.MaxValidNumber.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, v, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	if num > protowire.MaxValidNumber {
		// ConsumeTag takes field numbers up to MaxInt32; proto refuses those above
		// 2^29-1.
		return 0, 0, nil, nil, errFieldNumber
	}
	b = b[n:]
	switch typ {
	case protowire.BytesType:
		v, n = protowire.ConsumeBytes(b)
	case protowire.VarintType:
		_, n = protowire.ConsumeVarint(b)
		if n > 0 {
			v = b[:n]
		}
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	return num, typ, v, b[n:], nil
}

func varint(v []byte) uint64 {
	x, _ := protowire.ConsumeVarint(v)
	return x
}

// delivery decodes a ReceivedMessage (queue.proto): ack_id 1, record 2, source 3
// (checked only), source_sequence 4, delivery_attempt 5.
func (dec *replyDecoder) delivery(b []byte) error {
	var d delivery
	var ack []byte
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return errBadUTF8
			}
			ack = v
		case num == 2 && typ == protowire.BytesType:
			if err := dec.record(&d, v); err != nil {
				return err
			}
		case num == 3 && typ == protowire.BytesType:
			// source: unused, but a string, so proto refuses it when not UTF-8.
			if !utf8.Valid(v) {
				return errBadUTF8
			}
		case num == 4 && typ == protowire.VarintType:
			d.sourceSeq = int64(varint(v))
		case num == 5 && typ == protowire.VarintType:
			d.attempt = int32(varint(v))
		}
	}
	dec.msgs = append(dec.msgs, d)
	dec.acks = append(dec.acks, ack)
	dec.hend = append(dec.hend, len(dec.hdrs))
	return nil
}

// record decodes a Record (storage.proto) into d and dec.hdrs: timestamp_ms 2,
// value 4, headers 5 (key 1, value 2). A record sent twice in one message merges, as
// proto merges it: the later one's scalars win, headers add up.
func (dec *replyDecoder) record(d *delivery, b []byte) error {
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case num == 2 && typ == protowire.VarintType:
			d.ts = int64(varint(v))
		case num == 4 && typ == protowire.BytesType:
			d.value = v[:len(v):len(v)]
		case num == 5 && typ == protowire.BytesType:
			h, err := header(v)
			if err != nil {
				return err
			}
			dec.hdrs = append(dec.hdrs, h)
		}
	}
	return nil
}

// header decodes a Header (storage.proto): key 1, value 2.
func header(b []byte) (storedHeader, error) {
	var h storedHeader
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return storedHeader{}, err
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return storedHeader{}, errBadUTF8
			}
			h.key = headerKey(v)
		case num == 2 && typ == protowire.BytesType:
			h.value = v[:len(v):len(v)]
		}
	}
	return h, nil
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
