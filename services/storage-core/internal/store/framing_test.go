package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// reseal recomputes the batch length and CRC-32C of a hand-edited frame.
func reseal(b []byte) []byte {
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-batchLengthField))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

// TestProduceFramingCodes pins the answer to every way a Kafka producer's records can
// be refused before they are checked in depth (checkFraming), the codes kafka-gateway
// passes on (ErrCorruptBatch: CORRUPT_MESSAGE, ErrInvalidRecord: INVALID_RECORD,
// ErrBatchTooLarge: MESSAGE_TOO_LARGE), including which of two faults wins, as Kafka
// checks a Produce request: framing and magic first, one batch per partition before
// the batch's contents.
func TestProduceFramingCodes(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "p", ChannelConfig{MaxMessageBytes: 300})
	good := kbatch(t, batchOpt{}, "a", "b")
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	control := func(b []byte) []byte {
		binary.BigEndian.PutUint16(b[offAttributes:], attrControl|attrTransactional)
		return b
	}
	big := string(make([]byte, 400))
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"null", nil, ErrInvalidRecord},
		{"empty", []byte{}, ErrInvalidRecord},
		{"shorter than up to magic", good[:16], ErrCorruptBatch},
		{"truncated", good[:len(good)-1], ErrCorruptBatch},
		{"negative batch length", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offBatchLength:], 0xffffffff); return b }), ErrCorruptBatch},
		{"batch length below a header", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[offBatchLength:], 30); return b[:42] }), ErrCorruptBatch},
		{"magic 1", edit(func(b []byte) []byte { b[offMagic] = 1; return b }), ErrInvalidRecord},
		{"magic 1, shorter than a header", edit(func(b []byte) []byte {
			b[offMagic] = 1
			binary.BigEndian.PutUint32(b[offBatchLength:], 30)
			return b[:42]
		}), ErrInvalidRecord},
		{"magic 1, too large", func() []byte { b := kbatch(t, batchOpt{}, big); b[offMagic] = 1; return b }(), ErrInvalidRecord},
		// Kafka ByteBufferLogInputStream.nextBatchSize: a magic outside 0..2 is
		// CorruptRecordException, before the batch is cut out or counted.
		{"magic 3", edit(func(b []byte) []byte { b[offMagic] = 3; return b }), ErrCorruptBatch},
		{"magic -1", edit(func(b []byte) []byte { b[offMagic] = 0xff; return b }), ErrCorruptBatch},
		{"magic 3, shorter than a header", edit(func(b []byte) []byte {
			b[offMagic] = 3
			binary.BigEndian.PutUint32(b[offBatchLength:], 30)
			return b[:42]
		}), ErrCorruptBatch},
		{"a batch and a magic 3 batch", append(bytes.Clone(good), edit(func(b []byte) []byte { b[offMagic] = 3; return b })...), ErrCorruptBatch},
		{"bad CRC", edit(func(b []byte) []byte { b[offCRC] ^= 0xff; return b }), ErrCorruptBatch},
		{"bad CRC, too large", func() []byte { b := kbatch(t, batchOpt{}, big); b[offCRC] ^= 0xff; return b }(), ErrBatchTooLarge},
		{"transactional, bad CRC, too large", func() []byte { b := kbatch(t, batchOpt{pid: 7, epoch: 1, txn: true}, big); b[offCRC] ^= 0xff; return b }(), ErrCorruptBatch},
		{"control", edit(func(b []byte) []byte { return reseal(control(b)) }), ErrInvalidRecord},
		{"control, bad CRC", edit(func(b []byte) []byte { control(b)[offCRC] ^= 0xff; return b }), ErrCorruptBatch},
		{"control, bad last offset delta", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLastDelta:], 9)
			return reseal(control(b))
		}), ErrInvalidRecord},
		{"control, too large", reseal(control(kbatch(t, batchOpt{}, big))), ErrInvalidRecord},
		{"two batches", append(bytes.Clone(good), good...), ErrInvalidRecord},
		{"two batches, the first with a bad CRC", append(edit(func(b []byte) []byte { b[offCRC] ^= 0xff; return b }), good...), ErrInvalidRecord},
		{"two batches, the first too large", append(kbatch(t, batchOpt{}, big), good...), ErrInvalidRecord},
		{"a batch and 5 bytes", append(bytes.Clone(good), 1, 2, 3, 4, 5), ErrCorruptBatch},
		{"a batch and a control batch", append(bytes.Clone(good), edit(func(b []byte) []byte { return reseal(control(b)) })...), ErrInvalidRecord},
		{"a batch and a magic 1 batch", append(bytes.Clone(good), edit(func(b []byte) []byte { b[offMagic] = 1; return b })...), ErrInvalidRecord},
	}
	for _, c := range cases {
		for _, validate := range []bool{false, true} {
			_, err := l.BeginAppendWith(bytes.Clone(c.b), AppendOptions{SingleBatch: true, ValidateOnly: validate}).Wait()
			if !errors.Is(err, c.want) {
				t.Errorf("%s (validate only %v): %v, want %v", c.name, validate, err, c.want)
			}
		}
	}
	if hw := l.HighWatermark(); hw != 0 {
		t.Fatalf("refused appends wrote: high watermark %d", hw)
	}

	// Without single_batch (native callers): empty is CORRUPT_BATCH, several frames
	// are appended together.
	if _, err := l.BeginAppendWith(nil, AppendOptions{}).Wait(); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("empty, not single: %v, want %v", err, ErrCorruptBatch)
	}
	// validate_only stores nothing and leaves producer state alone.
	idem := kbatch(t, batchOpt{pid: 3, epoch: 0, seq: 0}, "x")
	if r, err := l.BeginAppendWith(bytes.Clone(idem), AppendOptions{SingleBatch: true, ValidateOnly: true}).Wait(); err != nil || r.BaseOffset != -1 || l.HighWatermark() != 0 {
		t.Fatalf("validate only: %+v %v, high watermark %d", r, err, l.HighWatermark())
	}
	if r, err := l.BeginAppendWith(bytes.Clone(idem), AppendOptions{SingleBatch: true}).Wait(); err != nil || r.Duplicate || r.BaseOffset != 0 {
		t.Fatalf("append after validate only: %+v %v, want a first append", r, err)
	}
	if r := mustAppend(t, l, append(bytes.Clone(good), good...)); r.BaseOffset != 1 || l.HighWatermark() != 5 {
		t.Fatalf("two batches, not single: %+v, high watermark %d", r, l.HighWatermark())
	}
}
