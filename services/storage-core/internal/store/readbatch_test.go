package store

import (
	"fmt"
	"testing"
)

// TestReadBatchRecords: every record of the whole frames read, from the one holding
// off (mid-frame: the earlier ones skipped), into the caller's buffer; next is after
// the last frame; header slices of one batch share an allocation without overlapping.
func TestReadBatchRecords(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "kafka.t", ChannelConfig{})
	var want []string
	for i := 0; i < 5; i++ {
		var vs []string
		for j := 0; j < 4; j++ {
			vs = append(vs, fmt.Sprintf("v%d.%d", i, j))
		}
		mustAppend(t, l, kbatch(t, batchOpt{}, vs...))
		want = append(want, vs...)
	}
	var buf []byte
	alloc := func(n int) []byte {
		buf = make([]byte, n)
		return buf
	}
	for _, tc := range []struct {
		off      int64
		maxBytes int
		n        int
		next     int64
	}{
		{0, 1 << 20, 20, 20},
		{6, 1 << 20, 14, 20},
		{6, 1, 2, 8}, // one frame: the one holding 6
		{19, 1, 1, 20},
	} {
		recs, next, err := l.ReadBatchRecords(tc.off, tc.maxBytes, alloc)
		if err != nil || len(recs) != tc.n || next != tc.next {
			t.Fatalf("from %d, %d bytes: %d records, next %d, %v; want %d, next %d", tc.off, tc.maxBytes, len(recs), next, err, tc.n, tc.next)
		}
		for i, r := range recs {
			o := tc.off + int64(i)
			if r.Offset != o || string(r.Value) != want[o] || string(r.Key) != "k"+want[o] ||
				len(r.Headers) != 1 || r.Headers[0].Key != "h" || string(r.Headers[0].Value) != want[o] {
				t.Fatalf("from %d record %d: %+v", tc.off, i, r)
			}
			if cap(r.Headers) != len(r.Headers) {
				t.Fatalf("record %d: headers cap %d > len %d: an append would overwrite the next record's", o, cap(r.Headers), len(r.Headers))
			}
		}
		// The records alias the buffer from alloc.
		if len(recs) > 0 {
			v := recs[0].Value
			copy(buf, make([]byte, len(buf)))
			if string(v) == want[tc.off] {
				t.Fatalf("from %d: record value not in the caller's buffer", tc.off)
			}
		}
	}
	if recs, next, err := l.ReadBatchRecords(20, 1<<20, alloc); err != nil || recs != nil || next != 20 {
		t.Fatalf("at the high watermark: %v, next %d, %v", recs, next, err)
	}
}
