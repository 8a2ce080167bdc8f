package storagewire

import (
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A Receive answer holds up to 1000 messages. storage-core encodes it straight from
// its deliveries (ReceiveResponseBuffers) and pubsub-gateway decodes it straight into
// its own (DecodeReceiveResponse), without a ReceivedMessage, a Record and a Header per
// message in between.

// Header is a storage.proto Header: Key a UTF-8 string, Value bytes, nil when null (the
// field absent) and non-nil, maybe empty, when present.
type Header struct {
	Key   string
	Value []byte
}

// HeaderLike is any header type laid out as Header (such as the storage engine's own),
// so a caller's headers are encoded where they are, not copied into Headers.
type HeaderLike interface {
	~struct {
		Key   string
		Value []byte
	}
}

// Record is a storage.proto Record to encode. Key and Value are absent when nil (the
// fields are optional: nil is null, empty is empty).
type Record[H HeaderLike] struct {
	Sequence      int64
	TimestampMs   int64
	Key           []byte
	Value         []byte
	Headers       []H
	ProducerID    int64
	ProducerEpoch int32
	Transactional bool
	Control       bool
}

// ReceivedMessage is a queue.proto ReceivedMessage to encode.
type ReceivedMessage[H HeaderLike] struct {
	AckID           string
	Record          Record[H]
	Source          string
	SourceSequence  int64
	DeliveryAttempt int32
}

// ReceiveResponseBuffers is a ReceiveResponse of n messages, message i being msg(i),
// and next_bytes nextBytes, encoded as proto.Marshal encodes it, in one buffer: from
// pool when grpc would pool one of its size (the BufferSlice then frees it), else a
// plain slice; nil when there is nothing to encode. msg is called twice per message
// and must give the same answer both times. Errors: ErrInvalidUTF8 when an ack id, a
// source or a header key is not UTF-8.
func ReceiveResponseBuffers[H HeaderLike](n int, msg func(i int) ReceivedMessage[H], nextBytes int64, pool mem.BufferPool) (mem.BufferSlice, error) {
	size := 0
	// sizes[i]: the encoded size of message i and of its record, computed once for the
	// total and the length prefixes.
	sizes := make([][2]int, n)
	for i := range n {
		m := msg(i)
		if !utf8.ValidString(m.AckID) || !utf8.ValidString(m.Source) {
			return nil, ErrInvalidUTF8
		}
		for _, h := range m.Record.Headers {
			if !utf8.ValidString(Header(h).Key) {
				return nil, ErrInvalidUTF8
			}
		}
		rs := recordSize(&m.Record)
		ms := messageSize(&m, rs)
		sizes[i] = [2]int{ms, rs}
		size += bytesField(ms)
	}
	size += varintField(uint64(nextBytes))
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
	for i := range n {
		m := msg(i)
		b = protowire.AppendTag(b, fReceiveMessages, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i][0]))
		b = appendMessage(b, &m, sizes[i][1])
	}
	b = appendVarintField(b, fReceiveNextBytes, uint64(nextBytes))
	if bp == nil {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, pool)}, nil
}

// messageSize is the encoded size of m, whose record encodes to recordSize bytes.
func messageSize[H HeaderLike](m *ReceivedMessage[H], recordSize int) int {
	return stringField(m.AckID) + bytesField(recordSize) + stringField(m.Source) +
		varintField(uint64(m.SourceSequence)) + varintField(uint64(int64(m.DeliveryAttempt)))
}

func recordSize[H HeaderLike](r *Record[H]) int {
	n := varintField(uint64(r.Sequence)) + varintField(uint64(r.TimestampMs))
	if r.Key != nil {
		n += bytesField(len(r.Key))
	}
	if r.Value != nil {
		n += bytesField(len(r.Value))
	}
	for _, h := range r.Headers {
		n += bytesField(headerSize(Header(h)))
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

func headerSize(h Header) int {
	n := stringField(h.Key)
	if h.Value != nil {
		n += bytesField(len(h.Value))
	}
	return n
}

// appendMessage appends m, whose record encodes to recordSize bytes.
func appendMessage[H HeaderLike](b []byte, m *ReceivedMessage[H], recordSize int) []byte {
	b = appendStringField(b, fMsgAckID, m.AckID)
	r := &m.Record
	b = protowire.AppendTag(b, fMsgRecord, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(recordSize))
	b = appendVarintField(b, fRecSequence, uint64(r.Sequence))
	b = appendVarintField(b, fRecTimestamp, uint64(r.TimestampMs))
	if r.Key != nil {
		b = appendBytesField(b, fRecKey, r.Key)
	}
	if r.Value != nil {
		b = appendBytesField(b, fRecValue, r.Value)
	}
	for _, hl := range r.Headers {
		h := Header(hl)
		b = protowire.AppendTag(b, fRecHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		b = appendStringField(b, fHdrKey, h.Key)
		if h.Value != nil {
			b = appendBytesField(b, fHdrValue, h.Value)
		}
	}
	b = appendVarintField(b, fRecProducerID, uint64(r.ProducerID))
	b = appendVarintField(b, fRecProducerEpoch, uint64(int64(r.ProducerEpoch)))
	b = appendBoolField(b, fRecTransactional, r.Transactional)
	b = appendBoolField(b, fRecControl, r.Control)
	b = appendStringField(b, fMsgSource, m.Source)
	b = appendVarintField(b, fMsgSourceSq, uint64(m.SourceSequence))
	return appendVarintField(b, fMsgAttempt, uint64(int64(m.DeliveryAttempt)))
}

// MessageView is a decoded queue.proto ReceivedMessage whose bytes are views of the
// answer it was decoded from. AckID and Source are UTF-8 (checked); Record's headers
// went to ReceiveVisitor.Header.
type MessageView struct {
	AckID           []byte
	Record          RecordView
	Source          []byte
	SourceSequence  int64
	DeliveryAttempt int32
}

// RecordView is a decoded storage.proto Record but its headers. Key and Value are nil
// when absent (null) and non-nil, maybe empty, when present; their capacity is capped
// at the field.
type RecordView struct {
	Sequence      int64
	TimestampMs   int64
	Key           []byte
	Value         []byte
	ProducerID    int64
	ProducerEpoch int32
	Transactional bool
	Control       bool
}

// ReceiveVisitor takes a ReceiveResponse as DecodeReceiveResponse walks it. Values are
// passed by value so that decoding allocates nothing of its own.
type ReceiveVisitor interface {
	// Header is one header of the message being decoded, in order: key is UTF-8
	// (checked), value is nil when the field is absent; both are views of the answer.
	Header(key, value []byte)
	// Message is the message whose headers were just passed to Header.
	Message(m MessageView)
}

// CountReceivedMessages is the number of messages in the ReceiveResponse b (to size
// what the messages are decoded into). Errors: as DecodeReceiveResponse's for the top
// level of b.
func CountReceivedMessages(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		num, typ, _, rest, err := nextField(b)
		if err != nil {
			return 0, err
		}
		if num == fReceiveMessages && typ == protowire.BytesType {
			n++
		}
		b = rest
	}
	return n, nil
}

// DecodeReceiveResponse decodes the ReceiveResponse b into v, message by message, and
// returns its next_bytes. It
// fails exactly when proto.Unmarshal fails (a truncated or malformed field, a field
// number above protowire.MaxValidNumber, ErrInvalidUTF8 for an ack id, a source or a
// header key), and otherwise gives what proto.Unmarshal gives: unknown fields and
// fields of an unexpected wire type are skipped, a field seen twice keeps its last
// value, a record sent twice in one message merges (headers add up). On an error v
// has seen part of the answer.
func DecodeReceiveResponse(b []byte, v ReceiveVisitor) (nextBytes int64, err error) {
	for len(b) > 0 {
		num, typ, f, rest, err := nextField(b)
		if err != nil {
			return 0, err
		}
		switch {
		case num == fReceiveMessages && typ == protowire.BytesType:
			if err := decodeMessage(f, v); err != nil {
				return 0, err
			}
		case num == fReceiveNextBytes && typ == protowire.VarintType:
			nextBytes = int64(varint(f))
		}
		b = rest
	}
	return nextBytes, nil
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
		return 0, 0, nil, nil, ErrFieldNumber
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

func decodeMessage(b []byte, v ReceiveVisitor) error {
	var m MessageView
	for len(b) > 0 {
		num, typ, f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case num == fMsgAckID && typ == protowire.BytesType:
			if !utf8.Valid(f) {
				return ErrInvalidUTF8
			}
			m.AckID = f
		case num == fMsgRecord && typ == protowire.BytesType:
			if err := decodeRecord(f, &m.Record, v); err != nil {
				return err
			}
		case num == fMsgSource && typ == protowire.BytesType:
			if !utf8.Valid(f) {
				return ErrInvalidUTF8
			}
			m.Source = f
		case num == fMsgSourceSq && typ == protowire.VarintType:
			m.SourceSequence = int64(varint(f))
		case num == fMsgAttempt && typ == protowire.VarintType:
			m.DeliveryAttempt = int32(varint(f))
		}
	}
	v.Message(m)
	return nil
}

func decodeRecord(b []byte, r *RecordView, v ReceiveVisitor) error {
	for len(b) > 0 {
		num, typ, f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		if typ == protowire.BytesType {
			switch num {
			case fRecKey:
				r.Key = f[:len(f):len(f)]
			case fRecValue:
				r.Value = f[:len(f):len(f)]
			case fRecHeaders:
				key, value, err := decodeHeader(f)
				if err != nil {
					return err
				}
				v.Header(key, value)
			}
			continue
		}
		if typ != protowire.VarintType {
			continue
		}
		x := varint(f)
		switch num {
		case fRecSequence:
			r.Sequence = int64(x)
		case fRecTimestamp:
			r.TimestampMs = int64(x)
		case fRecProducerID:
			r.ProducerID = int64(x)
		case fRecProducerEpoch:
			r.ProducerEpoch = int32(x)
		case fRecTransactional:
			r.Transactional = protowire.DecodeBool(x)
		case fRecControl:
			r.Control = protowire.DecodeBool(x)
		}
	}
	return nil
}

func decodeHeader(b []byte) (key, value []byte, err error) {
	for len(b) > 0 {
		num, typ, f, rest, err := nextField(b)
		if err != nil {
			return nil, nil, err
		}
		b = rest
		switch {
		case num == fHdrKey && typ == protowire.BytesType:
			if !utf8.Valid(f) {
				return nil, nil, ErrInvalidUTF8
			}
			key = f
		case num == fHdrValue && typ == protowire.BytesType:
			value = f[:len(f):len(f)]
		}
	}
	return key, value, nil
}
