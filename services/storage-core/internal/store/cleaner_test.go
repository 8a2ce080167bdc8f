package store

import (
	"errors"
	"testing"
)

// TestCompactedNullKey: a record without a key is refused on a compacted channel with a
// RecordError naming its index in the batch (Kafka LogValidator, INVALID_RECORD), and
// nothing is stored; a delete channel takes it.
func TestCompactedNullKey(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	for _, pol := range []int32{CleanupCompact, CleanupCompactDelete} {
		l := mustCreate(t, s, "c"+string(rune('0'+pol)), ChannelConfig{CleanupPolicy: pol})
		b := EncodeBatch([]NewRecord{{Key: []byte("a"), Value: []byte("1")}, {Value: []byte("2")}, {Key: []byte{}, Value: []byte("3")}}, 1)
		_, err := l.AppendBatches(b)
		var re *RecordError
		if !errors.As(err, &re) || re.Index != 1 || !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("policy %d: append with a null key = %v, want RecordError at index 1", pol, err)
		}
		if hw := l.HighWatermark(); hw != 0 {
			t.Fatalf("policy %d: high watermark %d after a refused append", pol, hw)
		}
		mustAppend(t, l, EncodeBatch([]NewRecord{{Key: []byte{}, Value: []byte("empty key is a key")}}, 1))
	}
	d := mustCreate(t, s, "d", ChannelConfig{})
	mustAppend(t, d, EncodeBatch([]NewRecord{{Value: []byte("x")}}, 1))
}
