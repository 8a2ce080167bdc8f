package handler

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
)

// StreamingPull responses are encoded by the stream itself, straight from the
// deliveries, into one grpcx.BufferPool buffer handed to gRPC by reference
// (grpcx.BufferMarshaler): building a ReceivedMessage, a PubsubMessage and a Timestamp
// per delivery (with a string per message id) only for proto to size and marshal them
// again cost about a sixth of the gateway's CPU. The bytes are those proto.Marshal
// gives for the StreamingPullResponse that delivery.received builds, with
// deterministic map order (attributes sorted by key): streamwire_test.go checks them
// byte for byte. A delivery whose message names a schema (its attributes may be
// rewritten by showDeletedSchema) is built and marshalled by proto as before. Strings
// are valid UTF-8: walkHeaders makes them so.
//
// This needs grpcx's codec on the server (Deps.EncodeStreams); without it, streams send
// proto messages.

// wireResponse is an encoded StreamingPullResponse (grpcx.BufferMarshaler). Its buffer
// is held until free; each MarshalBuffers hands gRPC a reference of its own.
type wireResponse struct {
	buf mem.Buffer
}

var _ grpcx.BufferMarshaler = (*wireResponse)(nil)

// MarshalBuffers implements grpcx.BufferMarshaler.
func (w *wireResponse) MarshalBuffers(mem.BufferPool) (mem.BufferSlice, error) {
	w.buf.Ref()
	return mem.BufferSlice{w.buf}, nil
}

// free drops the response's own reference to its buffer; it may be called again.
func (w *wireResponse) free() {
	if w.buf != nil {
		w.buf.Free()
		w.buf = nil
	}
}

// wireMsg is what the encoder learned of one delivery: the fields of its
// PubsubMessage and the sizes of it and of its ReceivedMessage.
type wireMsg struct {
	d *delivery
	// id is the message id header (last one wins); with idSeq, there is none and the
	// id is the source sequence.
	id    []byte
	idSeq bool
	// ordering is the ordering key; secs and nanos the publish time.
	ordering     []byte
	secs         int64
	nanos        int32
	attr0, attr1 int // the message's attributes: enc.attrs[attr0:attr1], sorted by key
	msgSize      int // the PubsubMessage's encoded size
	rmSize       int // the ReceivedMessage's
	// proto is the ReceivedMessage encoded by proto instead (see above), else nil.
	proto []byte
}

type wireAttr struct {
	key string
	val []byte
}

// streamEncoder encodes a stream's responses; its scratch space is reused from batch
// to batch (one encoder per stream, used by its receive loop only).
type streamEncoder struct {
	h     *Subscriber
	sub   *subInfo
	props *pubsubpb.StreamingPullResponse_SubscriptionProperties

	msgs  []wireMsg
	attrs []wireAttr
	// The last publish time parsed and what it gave (a publish batch shares one).
	lastPub       []byte
	lastSecs      int64
	lastNanos     int32
	lastPubParsed bool
}

// encode encodes ds as one StreamingPullResponse with the stream's subscription
// properties. It returns the response and the sum of its messages' sizes (proto.Size
// of each PubsubMessage, in bytes).
// The response does not refer to ds: ds may be freed once it returns. The error is
// proto's, for a message it cannot marshal.
func (e *streamEncoder) encode(ctx context.Context, ds []delivery) (w *wireResponse, total int64, err error) {
	e.msgs = slices.Grow(e.msgs[:0], len(ds))[:len(ds)]
	e.attrs = e.attrs[:0]
	defer func() {
		for i := range e.msgs {
			e.msgs[i] = wireMsg{} // the deliveries' views, dropped
		}
		clear(e.attrs)
	}()
	size := 0
	for i := range ds {
		m := &e.msgs[i]
		if err := e.prepare(ctx, m, &ds[i]); err != nil {
			return nil, 0, err
		}
		size += 1 + protowire.SizeBytes(m.rmSize)
	}
	props := e.propsSize()
	size += 1 + protowire.SizeBytes(props)

	bp := grpcx.BufferPool.Get(size)
	b := (*bp)[:0]
	for i := range e.msgs {
		m := &e.msgs[i]
		total += int64(m.msgSize)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(m.rmSize))
		if m.proto != nil {
			b = append(b, m.proto...)
			continue
		}
		b = e.appendReceived(b, m)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(props))
	if e.props.GetExactlyOnceDeliveryEnabled() {
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 1)
	}
	if e.props.GetMessageOrderingEnabled() {
		b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), 1)
	}
	if len(b) != size {
		// A bug, not bad input: it fails this stream (INTERNAL), not the replica, as a
		// panic outside the handler's goroutine would.
		grpcx.BufferPool.Put(bp)
		return nil, 0, fmt.Errorf("streamwire: encoded %d bytes where %d were computed", len(b), size)
	}
	*bp = b
	return &wireResponse{buf: mem.NewBuffer(bp, grpcx.BufferPool)}, total, nil
}

func (e *streamEncoder) propsSize() int {
	n := 0
	if e.props.GetExactlyOnceDeliveryEnabled() {
		n += 2
	}
	if e.props.GetMessageOrderingEnabled() {
		n += 2
	}
	return n
}

// prepare fills m for d, as delivery.received reads d: the last message id, publish
// time and ordering key header win; attributes are the headers without the "_"
// prefix, the escaped ones (hdrAttrPrefix) and the dead-letter source time, the last
// of a key winning.
func (e *streamEncoder) prepare(ctx context.Context, m *wireMsg, d *delivery) error {
	*m = wireMsg{d: d, attr0: len(e.attrs)}
	f := d.walkHeaders(func(k string, v []byte) { e.addAttr(m, k, v) })
	m.id, m.ordering = f.id, f.ordering
	fallback := false
	m.attr1 = len(e.attrs)
	attrs := e.attrs[m.attr0:m.attr1]
	for _, a := range attrs {
		if a.key == attrSchemaName {
			fallback = true
		}
	}
	if fallback {
		return e.prepareProto(ctx, m, d)
	}
	slices.SortFunc(attrs, func(a, b wireAttr) int { return strings.Compare(a.key, b.key) })
	if len(m.id) == 0 {
		m.idSeq = true
	}
	m.secs, m.nanos = e.publishTime(f.published, f.hasPublished, d.ts)

	n := 0
	if len(d.value) > 0 {
		n += 1 + protowire.SizeBytes(len(d.value))
	}
	for _, a := range attrs {
		n += 1 + protowire.SizeBytes(attrEntrySize(a))
	}
	if m.idSeq {
		var tmp [20]byte
		n += 1 + protowire.SizeBytes(len(strconv.AppendInt(tmp[:0], d.sourceSeq, 10)))
	} else {
		n += 1 + protowire.SizeBytes(len(m.id))
	}
	n += 1 + protowire.SizeBytes(timestampSize(m.secs, m.nanos))
	if len(m.ordering) > 0 {
		n += 1 + protowire.SizeBytes(len(m.ordering))
	}
	m.msgSize = n

	rm := 0
	if len(d.ackID) > 0 {
		rm += 1 + protowire.SizeBytes(len(d.ackID))
	}
	rm += 1 + protowire.SizeBytes(n)
	if a := e.attempt(d); a != 0 {
		rm += 1 + protowire.SizeVarint(uint64(int64(a)))
	}
	m.rmSize = rm
	return nil
}

// prepareProto fills m for d through proto: delivery.received, showDeletedSchema and
// proto.Marshal (deterministic, as the wire encoding is).
func (e *streamEncoder) prepareProto(ctx context.Context, m *wireMsg, d *delivery) error {
	e.attrs = e.attrs[:m.attr0]
	rm := d.received(e.sub)
	e.h.showDeletedSchema(ctx, rm.GetMessage())
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rm)
	if err != nil {
		return err
	}
	// b is never empty (the message field is always there), so proto != nil marks it.
	*m = wireMsg{d: d, attr0: m.attr0, attr1: m.attr0, proto: b, rmSize: len(b), msgSize: proto.Size(rm.GetMessage())}
	return nil
}

// addAttr sets attribute key of m to val, replacing an earlier value of the key.
func (e *streamEncoder) addAttr(m *wireMsg, key string, val []byte) {
	for i := m.attr0; i < len(e.attrs); i++ {
		if e.attrs[i].key == key {
			e.attrs[i].val = val
			return
		}
	}
	e.attrs = append(e.attrs, wireAttr{key: key, val: val})
}

// publishTime is the publish time of a message, as delivery.received sets it: the
// publish time header parsed as RFC 3339, else the record's timestamp (ms).
func (e *streamEncoder) publishTime(published []byte, has bool, tsMs int64) (int64, int32) {
	if has {
		if !e.lastPubParsed || !bytes.Equal(published, e.lastPub) {
			t, err := time.Parse(time.RFC3339Nano, string(published))
			e.lastPub = append(e.lastPub[:0], published...)
			e.lastPubParsed = err == nil
			if err == nil {
				e.lastSecs, e.lastNanos = t.Unix(), int32(t.Nanosecond())
			}
			// A failed parse is not cached (lastPubParsed false): rare, parsed again.
		}
		if e.lastPubParsed {
			return e.lastSecs, e.lastNanos
		}
	}
	t := time.UnixMilli(tsMs)
	return t.Unix(), int32(t.Nanosecond())
}

// attempt is the delivery attempt the ReceivedMessage carries: only with a
// dead-letter policy.
func (e *streamEncoder) attempt(d *delivery) int32 {
	if e.sub.spec.GetDeadLetterPolicy() != nil {
		return d.attempt
	}
	return 0
}

func attrEntrySize(a wireAttr) int {
	return 1 + protowire.SizeBytes(len(a.key)) + 1 + protowire.SizeBytes(len(a.val))
}

func timestampSize(secs int64, nanos int32) int {
	n := 0
	if secs != 0 {
		n += 1 + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}

// appendReceived appends the body of m's ReceivedMessage (ack_id 1, message 2,
// delivery_attempt 3; PubsubMessage: data 1, attributes 2, message_id 3,
// publish_time 4, ordering_key 5).
func (e *streamEncoder) appendReceived(b []byte, m *wireMsg) []byte {
	d := m.d
	if len(d.ackID) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, d.ackID)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(m.msgSize))
	if len(d.value) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, d.value)
	}
	for _, a := range e.attrs[m.attr0:m.attr1] {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(attrEntrySize(a)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, a.key)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, a.val)
	}
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	if m.idSeq {
		var tmp [20]byte
		b = protowire.AppendBytes(b, strconv.AppendInt(tmp[:0], d.sourceSeq, 10))
	} else {
		b = protowire.AppendBytes(b, m.id)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(timestampSize(m.secs, m.nanos)))
	if m.secs != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(m.secs))
	}
	if m.nanos != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), uint64(int64(m.nanos)))
	}
	if len(m.ordering) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, m.ordering)
	}
	if a := e.attempt(d); a != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(int64(a)))
	}
	return b
}
