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

// TestReadDataRecords: control batches are never returned; at read_committed neither
// are aborted transactions' batches nor anything from the last stable offset on, and
// next moves past what was skipped (to the LSO at most); read_uncommitted returns every
// data record.
func TestReadDataRecords(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "kafka.t", ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{}, "p0"))                                   // 0
	mustAppend(t, l, kbatch(t, batchOpt{pid: 1, txn: true}, "a1", "a2"))            // 1-2, aborted
	mustAppend(t, l, kbatch(t, batchOpt{pid: 2, txn: true}, "c3"))                  // 3, committed
	for _, m := range []TxnMarker{{ProducerID: 1}, {ProducerID: 2, Commit: true}} { // 4, 5
		if _, err := l.WriteTxnMarker(m); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, l, kbatch(t, batchOpt{pid: 3, txn: true}, "o6")) // 6, open: the LSO
	mustAppend(t, l, kbatch(t, batchOpt{}, "p7"))                  // 7
	read := func(off int64, committed bool) (got []string, next int64) {
		t.Helper()
		for {
			recs, n, err := l.ReadDataRecords(off, 1<<20, committed, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got = append(got, fmt.Sprintf("%d=%s", r.Offset, r.Value))
			}
			if n == off {
				return got, n
			}
			off = n
		}
	}
	if got, next := read(0, true); fmt.Sprint(got) != "[0=p0 3=c3]" || next != 6 {
		t.Fatalf("read_committed: %v, next %d; want [0=p0 3=c3] and 6", got, next)
	}
	if got, next := read(0, false); fmt.Sprint(got) != "[0=p0 1=a1 2=a2 3=c3 6=o6 7=p7]" || next != 8 {
		t.Fatalf("read_uncommitted: %v, next %d", got, next)
	}
	if got, next := read(6, true); len(got) != 0 || next != 6 {
		t.Fatalf("read_committed at the LSO: %v, next %d", got, next)
	}
}
