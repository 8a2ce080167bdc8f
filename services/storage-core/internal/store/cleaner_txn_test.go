package store

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// kv is a record of kvBatch: key and value; tomb makes the value null.
type kv struct {
	key, value string
	tomb       bool
}

// kvBatch is kbatch with the given keys and values.
func kvBatch(t *testing.T, o batchOpt, recs ...kv) []byte {
	t.Helper()
	var b []byte
	for i, r := range recs {
		kr := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Key: []byte(r.key), Value: []byte(r.value)}
		if r.tomb {
			kr.Value = nil
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		b = kr.AppendTo(b)
	}
	o.recs = b
	vals := make([]string, len(recs))
	return kbatch(t, o, vals...)
}

// committedView reads the channel below its last stable offset as a Kafka
// read_committed consumer does with the frames and the aborted-transactions list Fetch
// returns (Java Fetcher / kgo): a producer enters "aborted" at the first batch reaching
// the first offset of one of its aborted transactions, its transactional batches are
// dropped until its ABORT marker, control batches are never returned. It returns
// offset -> "key=value" ("key=<nil>" for a tombstone) and the timestamps.
func committedView(t *testing.T, l *Log) (map[int64]string, map[int64]int64) {
	t.Helper()
	lso := l.LastStable()
	aborted := l.AbortedTxns(l.LogStart(), lso)
	sort.Slice(aborted, func(i, j int) bool { return aborted[i].FirstOffset < aborted[j].FirstOffset })
	inAbort := map[int64]bool{}
	out, ts := map[int64]string{}, map[int64]int64{}
	for next := l.LogStart(); next < lso; {
		raw, err := l.ReadRaw(next, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) == 0 {
			break
		}
		for len(raw) > 0 {
			n, err := frameLen(raw)
			if err != nil {
				t.Fatal(err)
			}
			h := parseHeader(raw)
			frame := raw[:n]
			raw = raw[n:]
			if h.BaseOffset >= lso {
				next = lso
				break
			}
			next = h.NextOffset()
			for len(aborted) > 0 && aborted[0].FirstOffset <= h.LastOffset() {
				inAbort[aborted[0].ProducerID] = true
				aborted = aborted[1:]
			}
			if h.Attributes&attrControl != 0 {
				if ci, ok := parseControl(frame); ok && !ci.commit {
					delete(inAbort, h.ProducerID)
				}
				continue
			}
			if h.Attributes&attrTransactional != 0 && inAbort[h.ProducerID] {
				continue
			}
			if err := eachRecord(frame, &h, func(off int64, key, value []byte, rts int64) {
				if value == nil {
					out[off] = string(key) + "=<nil>"
				} else {
					out[off] = string(key) + "=" + string(value)
				}
				ts[off] = rts
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out, ts
}

// batchAt returns the header of the stored batch holding offset off; ok is false when
// the first batch at or after off starts later (off was removed).
func batchAt(t *testing.T, l *Log, off int64) (batchHeader, bool) {
	t.Helper()
	raw, err := l.ReadRaw(off, 1)
	if err != nil || len(raw) == 0 {
		t.Fatalf("read at %d: %v", off, err)
	}
	h := parseHeader(raw)
	return h, h.BaseOffset <= off && off <= h.LastOffset()
}

// TestCleanerTxnMarkers: a compacted channel with committed and aborted transactions,
// their markers and a tombstone, cleaned as Kafka's LogCleaner does (KIP-98, KIP-534):
//   - pass 1: the aborted transaction's records go, the newest committed record of
//     each key stays, every marker stays (its transaction had records in the pass), the
//     aborted index keeps the entry, the tombstone stays with a delete horizon;
//   - pass 2: markers whose transaction has no record left get a delete horizon, and the
//     aborted entry with no record left leaves the index (also after a restart); markers
//     of transactions with records left are untouched;
//   - pass 3, after delete_retention_ms: those markers and the tombstone go.
//
// Offsets never change, and a Kafka-style read_committed read returns, for every
// surviving record, what it returned before cleaning (and the timestamps).
func TestCleanerTxnMarkers(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, dir, clk)
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 600, DeleteRetentionMs: 60_000, MinCleanableDirtyRatio: -1})
	marker := func(pid int64, commit bool) int64 {
		t.Helper()
		r, err := l.WriteTxnMarker(TxnMarker{ProducerID: pid, Commit: commit})
		if err != nil {
			t.Fatal(err)
		}
		return r.BaseOffset
	}
	txn := func(pid int64, seq int32, recs ...kv) {
		mustAppend(t, l, kvBatch(t, batchOpt{pid: pid, seq: seq, txn: true}, recs...))
	}
	plain := func(recs ...kv) { mustAppend(t, l, kvBatch(t, batchOpt{}, recs...)) }
	txn(7, 0, kv{key: "a", value: "a-aborted"}, kv{key: "b", value: "b-aborted"}) // 0-1
	mAbort := marker(7, false)                                                    // 2
	txn(8, 0, kv{key: "a", value: "a-1"}, kv{key: "c", value: "c-1"})             // 3-4
	mC8 := marker(8, true)                                                        // 5
	txn(9, 0, kv{key: "d", value: "d-1"})                                         // 6
	mC9 := marker(9, true)                                                        // 7
	plain(kv{key: "a", value: "a-2"}, kv{key: "d", value: "d-2"})                 // 8-9
	plain(kv{key: "z", tomb: true})                                               // 10
	txn(7, 2, kv{key: "e", value: "e-1"})                                         // 11
	mC7 := marker(7, true)                                                        // 12
	txn(9, 1, kv{key: "f", value: "f-1"})                                         // 13
	mC9b := marker(9, true)                                                       // 14
	if mAbort != 2 || mC8 != 5 || mC9 != 7 || mC7 != 12 || mC9b != 14 {
		t.Fatalf("markers at %d %d %d %d %d, want 2 5 7 12 14", mAbort, mC8, mC9, mC7, mC9b)
	}
	fill := func(prefix string) {
		for i := range 20 {
			plain(kv{key: fmt.Sprintf("%s%d", prefix, i%10), value: fmt.Sprintf("%s-%d", prefix, i)})
		}
	}
	fill("g")
	if a := l.activeBase(); a <= 14 {
		t.Fatalf("active segment starts at %d; the test needs the transactions in closed segments", a)
	}
	if got := l.AbortedTxns(0, l.HighWatermark()); len(got) != 1 || got[0] != (AbortedTxn{ProducerID: 7, FirstOffset: 0}) {
		t.Fatalf("aborted index before cleaning: %+v", got)
	}
	before, tsBefore := committedView(t, l)
	if before[0] != "" || before[1] != "" || before[3] != "a=a-1" || before[10] != "z=<nil>" {
		t.Fatalf("read_committed before cleaning: %v", before)
	}
	hw := l.HighWatermark()

	// checkView: the read_committed view holds exactly want among offsets < 15 (the
	// transactions and the tombstone), the same values and timestamps as before
	// cleaning for every surviving record written before it, and the log start has not
	// moved.
	checkView := func(pass string, want []int64) {
		t.Helper()
		got, ts := committedView(t, l)
		var low []int64
		for off, v := range got {
			if off < hw && (before[off] != v || tsBefore[off] != ts[off]) {
				t.Errorf("%s: offset %d reads %q ts %d, before cleaning %q ts %d", pass, off, v, ts[off], before[off], tsBefore[off])
			}
			if off < 15 {
				low = append(low, off)
			}
		}
		slices.Sort(low)
		if !slices.Equal(low, want) {
			t.Errorf("%s: read_committed offsets below 15 = %v, want %v", pass, low, want)
		}
		if l.LogStart() != 0 {
			t.Errorf("%s: log start %d, want 0", pass, l.LogStart())
		}
	}
	// checkMarkers: each marker offset is present (with or without a delete horizon) or
	// gone, as want says: 'k' kept, 'h' kept with a horizon, '-' gone.
	checkMarkers := func(pass string, want map[int64]byte) {
		t.Helper()
		for _, off := range slices.Sorted(maps.Keys(want)) {
			h, ok := batchAt(t, l, off)
			got := byte('-')
			if ok {
				if h.Attributes&attrControl == 0 {
					t.Fatalf("%s: batch at %d is not a marker: %+v", pass, off, h)
				}
				got = 'k'
				if _, has := deleteHorizon(&h); has {
					got = 'h'
				}
			}
			if got != want[off] {
				t.Errorf("%s: marker %d state %c, want %c", pass, off, got, want[off])
			}
		}
	}

	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("pass 1: RunCleaner ran %d passes, want 1", n)
	}
	checkView("pass 1", []int64{4, 8, 9, 10, 11, 13})
	checkMarkers("pass 1", map[int64]byte{2: 'k', 5: 'k', 7: 'k', 12: 'k', 14: 'k'})
	for _, off := range []int64{0, 1, 3, 6} {
		if _, ok := before[off]; ok {
			if recs, _, _ := l.ReadRecords(off, 1, 1<<20); len(recs) > 0 && recs[0].Offset == off {
				t.Errorf("pass 1: offset %d survived (read_uncommitted)", off)
			}
		}
	}
	if recs, _, _ := l.ReadRecords(0, 2, 1<<20); len(recs) > 0 && recs[0].Offset < 3 {
		t.Errorf("pass 1: an aborted record is still read: %+v", recs[0])
	}
	if got := l.AbortedTxns(0, hw); len(got) != 1 {
		t.Errorf("pass 1: aborted index %+v, want the entry of producer 7 (its marker is kept)", got)
	}
	if h, _ := batchAt(t, l, 10); h.Attributes&attrDeleteHorizon == 0 || h.BaseTimestamp != clk.ms.Load()+60_000 {
		t.Errorf("pass 1: the tombstone's batch has attributes %#x base timestamp %d, want the delete horizon %d", h.Attributes, h.BaseTimestamp, clk.ms.Load()+60_000)
	}

	fill("h") // dirty records for a second pass
	fill("i")
	clk.ms.Add(1000)
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("pass 2: RunCleaner ran %d passes, want 1", n)
	}
	checkView("pass 2", []int64{4, 8, 9, 10, 11, 13})
	want2 := map[int64]byte{2: 'h', 5: 'k', 7: 'h', 12: 'k', 14: 'k'}
	checkMarkers("pass 2", want2)
	if got := l.AbortedTxns(0, hw); len(got) != 0 {
		t.Errorf("pass 2: aborted index %+v, want none (no record of the transaction is left)", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, clk)
	l, _ = s.Get("c")
	if got := l.AbortedTxns(0, hw); len(got) != 0 {
		t.Errorf("after a restart: aborted index %+v, want none", got)
	}
	checkMarkers("after a restart", want2)
	checkView("after a restart", []int64{4, 8, 9, 10, 11, 13})

	fill("j")
	fill("k")
	clk.ms.Add(60_000) // past the horizons set in pass 1 and pass 2
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("pass 3: RunCleaner ran %d passes, want 1", n)
	}
	checkView("pass 3", []int64{4, 8, 9, 11, 13})
	want3 := map[int64]byte{2: '-', 5: 'k', 7: '-', 12: 'k', 14: 'k'}
	checkMarkers("pass 3", want3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, clk)
	defer s.Close()
	l, _ = s.Get("c")
	checkMarkers("pass 3, restarted", want3)
	checkView("pass 3, restarted", []int64{4, 8, 9, 11, 13})
	if lso := l.LastStable(); lso != l.HighWatermark() {
		t.Errorf("after a restart: LSO %d, high watermark %d (a transaction left open)", lso, l.HighWatermark())
	}
	// The producers' state survived: their next sequences are taken.
	txn(8, 2, kv{key: "x", value: "x"})
	marker(8, true)
	txn(9, 2, kv{key: "x", value: "y"})
	marker(9, false)
}

// TestCleanerStopsAtLSO: the cleaner never cleans past the first offset of an open
// transaction; once it commits, the rest is cleaned.
func TestCleanerStopsAtLSO(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, t.TempDir(), clk)
	defer s.Close()
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 600, MinCleanableDirtyRatio: -1})
	plain := func(recs ...kv) { mustAppend(t, l, kvBatch(t, batchOpt{}, recs...)) }
	for i := range 20 {
		plain(kv{key: fmt.Sprintf("g%d", i%2), value: "old"})
	}
	open := l.HighWatermark()
	mustAppend(t, l, kvBatch(t, batchOpt{pid: 5, txn: true}, kv{key: "g0", value: "open"}))
	for i := range 40 {
		plain(kv{key: fmt.Sprintf("g%d", i%2), value: fmt.Sprintf("new-%d", i)})
	}
	if lso := l.LastStable(); lso != open {
		t.Fatalf("LSO %d, want %d", lso, open)
	}
	s.RunCleaner()
	count := func(from, to int64) int {
		n := 0
		for _, r := range readAll(t, l, 0) {
			if r.Offset >= from && r.Offset < to {
				n++
			}
		}
		return n
	}
	if n := count(open, l.HighWatermark()); n != 41 {
		t.Fatalf("%d records at or after the open transaction's first offset after cleaning, want all 41", n)
	}
	if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: 5, Commit: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		plain(kv{key: "h", value: fmt.Sprint(i)})
	}
	if n := s.RunCleaner(); n < 1 {
		t.Fatal("no pass after the commit")
	}
	if n := count(open, l.activeBase()); n >= 41 {
		t.Fatalf("%d records at or after the committed transaction below the active segment, want them compacted", n)
	}
}
