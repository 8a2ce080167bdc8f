package store

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// logState is what consumers see of a channel: its data records read_uncommitted
// (offset -> "key=value@ts", aborted ones included), read_committed, and its markers
// (offset -> has a delete horizon).
type logState struct {
	records, committed map[int64]string
	markers            map[int64]bool
	start, hw          int64
}

func readState(t *testing.T, l *Log) logState {
	t.Helper()
	st := logState{records: map[int64]string{}, markers: map[int64]bool{}, start: l.LogStart(), hw: l.HighWatermark()}
	for next := st.start; next < st.hw; {
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
			next = h.NextOffset()
			if h.Attributes&attrControl != 0 {
				_, st.markers[h.BaseOffset] = deleteHorizon(&h)
				continue
			}
			if err := eachRecord(frame, &h, func(off int64, key, value []byte, ts int64) {
				v := string(value)
				if value == nil {
					v = "<nil>"
				}
				st.records[off] = fmt.Sprintf("%s=%s@%d", key, v, ts)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cv, ts := committedView(t, l)
	st.committed = map[int64]string{}
	for off, v := range cv {
		st.committed[off] = fmt.Sprintf("%s@%d", v, ts[off])
	}
	return st
}

// diff describes how b differs from a ("" when they read the same); horizons says
// whether the markers' delete horizons count.
func (a logState) diff(b logState, horizons bool) string {
	mk := func(m map[int64]bool) []int64 { return slices.Sorted(maps.Keys(m)) }
	switch {
	case a.start != b.start || a.hw != b.hw:
		return fmt.Sprintf("log start, high watermark %d, %d vs %d, %d", a.start, a.hw, b.start, b.hw)
	case !maps.Equal(a.records, b.records):
		return fmt.Sprintf("read_uncommitted records differ:\n%v\n%v", a.records, b.records)
	case !maps.Equal(a.committed, b.committed):
		return fmt.Sprintf("read_committed records differ:\n%v\n%v", a.committed, b.committed)
	case horizons && !maps.Equal(a.markers, b.markers):
		return fmt.Sprintf("markers differ: %v vs %v", a.markers, b.markers)
	case !slices.Equal(mk(a.markers), mk(b.markers)):
		return fmt.Sprintf("marker offsets differ: %v vs %v", mk(a.markers), mk(b.markers))
	}
	return ""
}

// checkSegmentFiles fails unless the channel directory dir holds no cleaner leftover
// and its .log files hold every batch once: batch offsets strictly increase across the
// files in base order, and each file's batches lie within its base and the next
// file's base.
func checkSegmentFiles(t *testing.T, what, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, cleanSuffix) || strings.HasSuffix(n, swapSuffix) {
			t.Fatalf("%s: leftover %s after open", what, n)
		}
		if b, ok := strings.CutSuffix(n, ".log"); ok {
			v, _ := strconv.ParseInt(b, 10, 64)
			bases = append(bases, v)
		}
	}
	slices.Sort(bases)
	last := int64(-1)
	for i, b := range bases {
		data, err := os.ReadFile(filepath.Join(dir, segmentName(b, ".log")))
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < len(data); {
			h := parseHeader(data[p:])
			if h.Length < batchHeaderLen || p+int(h.Length) > len(data) {
				t.Fatalf("%s: bad batch at %d of segment %d", what, p, b)
			}
			if h.BaseOffset <= last || h.BaseOffset < b || i+1 < len(bases) && h.LastOffset() >= bases[i+1] {
				t.Fatalf("%s: segment %d holds offsets %d-%d after offset %d (next segment %v): a record is in two places", what, b, h.BaseOffset, h.LastOffset(), last, bases[i+1:])
			}
			last = h.LastOffset()
			p += int(h.Length)
		}
	}
}

// checkAbortedIndex fails unless every entry of the aborted-transactions index ends at
// an ABORT marker still in the log (an entry without its marker would make a
// read_committed consumer drop the producer's later records), and no aborted record is
// read_committed.
func checkAbortedIndex(t *testing.T, what string, l *Log, st logState, aborted map[int64]bool) {
	t.Helper()
	for _, a := range l.abortedEntries(l.LogStart(), l.HighWatermark()) {
		if _, ok := st.markers[a.last]; !ok {
			t.Fatalf("%s: aborted index entry %+v outlives its marker (markers %v)", what, a, st.markers)
		}
	}
	for off := range st.committed {
		if aborted[off] {
			t.Fatalf("%s: aborted record %d read_committed: %s", what, off, st.committed[off])
		}
	}
}

// crashPoint is a copy of the data directory as a kill -9 at one step of a swap
// leaves it.
type crashPoint struct {
	swap int // 0-based swap of the pass
	step string
	segs int // segments the swap replaces
	dir  string
}

// TestCleanerCrashMidSwap: a compacted channel of committed and aborted transactions
// (markers of both), plain records and tombstones is cleaned in three passes (aborted
// records go; markers and tombstones get delete horizons and go a pass after them,
// KIP-534; what passes shrank is merged into fewer segments). At every step of every
// segment swap the data directory is copied as a kill -9 there leaves it, and each
// copy is opened as after a restart:
//   - no cleaner file is left and every offset is in one segment file only;
//   - it reads (read_uncommitted, read_committed, markers with their horizons, log
//     start, high watermark) exactly as the log before the swap when the crash came
//     before the swap's commit point, and exactly as after it from the commit point on;
//   - every key's newest committed record is there, no aborted record is
//     read_committed, and no aborted-index entry outlives its marker;
//   - a cleaner pass on it resumes and ends where the uninterrupted pass did
//     (the same records, read both ways, and markers).
func TestCleanerCrashMidSwap(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.ms.Store(1_000_000)
	var s *Store
	var l *Log
	var points []crashPoint
	swap := 0
	opts := Options{RetentionInterval: -1, minSegmentBytes: 14, Now: clk.now, Cleaner: CleanerOptions{Threads: -1}}
	opts.swapHook = func(step string, segs int) {
		points = append(points, crashPoint{swap: swap, step: step, segs: segs, dir: crashCopy(t, s, dir, 0, l)})
		if step == swapStepDone {
			swap++
		}
	}
	s, err := Open(dir, opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l = mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 700, DeleteRetentionMs: 60_000, MinCleanableDirtyRatio: -1})

	// The offset of each key's newest committed record, the keys whose newest is a
	// tombstone, the offsets of aborted records.
	newest := map[string]int64{}
	deleted := map[string]bool{}
	aborted := map[int64]bool{}
	put := func(b []byte, abort bool) {
		t.Helper()
		r := mustAppend(t, l, b)
		h := parseHeader(b)
		if err := eachRecord(b, &h, func(off int64, key, value []byte, _ int64) {
			off += r.BaseOffset - h.BaseOffset
			if abort {
				aborted[off] = true
			} else {
				newest[string(key)], deleted[string(key)] = off, value == nil
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	seq := map[int64]int32{}
	txn := func(pid int64, commit bool, recs ...kv) {
		t.Helper()
		put(kvBatch(t, batchOpt{pid: pid, seq: seq[pid], txn: true}, recs...), !commit)
		seq[pid] += int32(len(recs))
		if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: pid, Commit: commit}); err != nil {
			t.Fatal(err)
		}
	}
	plain := func(recs ...kv) { put(kvBatch(t, batchOpt{}, recs...), false) }
	fill := func(prefix string, n int) {
		for i := range n {
			plain(kv{key: fmt.Sprintf("%s%d", prefix, i%5), value: fmt.Sprintf("%s-%d", prefix, i)})
		}
	}
	for r := range 4 {
		txn(7, r%2 == 1, kv{key: "a", value: fmt.Sprintf("a-7-%d", r)}, kv{key: fmt.Sprintf("only7-%d", r), value: "x"})
		txn(8, r%3 != 0, kv{key: "a", value: fmt.Sprintf("a-8-%d", r)}, kv{key: "b", value: fmt.Sprintf("b-8-%d", r)})
		plain(kv{key: "b", value: fmt.Sprintf("b-%d", r)}, kv{key: fmt.Sprintf("t%d", r%2), tomb: r >= 2})
		fill("f", 2)
	}
	fill("g", 8)

	checkCopy := func(pass int, p crashPoint, want logState, live logState, liveCkpt string) {
		t.Helper()
		what := fmt.Sprintf("pass %d swap %d (%d segments) crash at %s", pass, p.swap, p.segs, p.step)
		copts := Options{RetentionInterval: -1, minSegmentBytes: 14, Now: clk.now, Cleaner: CleanerOptions{Threads: -1}}
		cs, err := Open(p.dir, copts, zaptest.NewLogger(t))
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		defer func() { _ = cs.Close() }()
		cl, err := cs.Get("c")
		if err != nil {
			t.Fatal(err)
		}
		checkSegmentFiles(t, what, cl.dir)
		got := readState(t, cl)
		if d := want.diff(got, true); d != "" {
			t.Fatalf("%s: the restarted log is neither the one before nor the one after the swap: %s", what, d)
		}
		for key, off := range newest {
			if _, ok := got.committed[off]; !ok && off < want.hw && !deleted[key] {
				t.Fatalf("%s: the newest committed record of %q (offset %d) is lost", what, key, off)
			}
		}
		checkAbortedIndex(t, what, cl, got, aborted)
		if n := cs.RunCleaner(); n < 1 {
			t.Fatalf("%s: the cleaner did not resume (%d passes)", what, n)
		}
		res := readState(t, cl)
		if d := live.diff(res, false); d != "" {
			t.Fatalf("%s: the resumed pass ends elsewhere than the uninterrupted one: %s", what, d)
		}
		checkAbortedIndex(t, what+", resumed", cl, res, aborted)
		checkSegmentFiles(t, what+", resumed", cl.dir)
		if b, _ := os.ReadFile(filepath.Join(cl.dir, cleanerCheckpointFile)); string(b) != liveCkpt {
			t.Fatalf("%s: resumed cleaner checkpoint %q, uninterrupted %q", what, b, liveCkpt)
		}
	}

	merged := 0
	for pass := 1; pass <= 3; pass++ {
		switch pass {
		case 2:
			fill("h", 10)
			clk.ms.Add(1000)
		case 3:
			fill("i", 10)
			clk.ms.Add(60_000) // past the horizons of passes 1 and 2
		}
		before := readState(t, l)
		points, swap = nil, 0
		_, segsBefore := l.Stats()
		if n := s.RunCleaner(); n != 1 {
			t.Fatalf("pass %d: RunCleaner ran %d passes, want 1", pass, n)
		}
		_, segsAfter := l.Stats()
		after := readState(t, l)
		ckpt, _ := os.ReadFile(filepath.Join(l.dir, cleanerCheckpointFile))
		checkAbortedIndex(t, fmt.Sprintf("pass %d, uninterrupted", pass), l, after, aborted)
		// KIP-534: markers stay through pass 1 (their transactions had records in it);
		// pass 2 gives those whose transaction has nothing left a delete horizon; pass 3,
		// past it, removes them.
		withHorizon := 0
		for _, h := range after.markers {
			if h {
				withHorizon++
			}
		}
		if pass == 1 && (len(after.markers) != 8 || withHorizon != 0) ||
			pass == 2 && (len(after.markers) != 8 || withHorizon == 0) ||
			pass == 3 && len(after.markers) >= 8 {
			t.Fatalf("pass %d: markers %v", pass, after.markers)
		}
		if pass > 1 {
			for off := range after.records {
				if aborted[off] {
					t.Fatalf("pass %d: aborted record %d still in the log", pass, off)
				}
			}
		}
		// The states each swap goes from and to: copies of the crash copies at its first
		// and last step, opened.
		var from, to []logState
		for _, p := range points {
			if p.step != swapStepWritten && p.step != swapStepDone {
				continue
			}
			ref := t.TempDir()
			if err := os.CopyFS(ref, os.DirFS(p.dir)); err != nil {
				t.Fatal(err)
			}
			rs, err := Open(ref, Options{RetentionInterval: -1, minSegmentBytes: 14, Now: clk.now, Cleaner: CleanerOptions{Threads: -1}}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			rl, _ := rs.Get("c")
			st := readState(t, rl)
			_ = rs.Close()
			if p.step == swapStepWritten {
				from = append(from, st)
			} else {
				to = append(to, st)
			}
		}
		if len(from) != swap || len(to) != swap || swap == 0 {
			t.Fatalf("pass %d: %d swaps, %d and %d end states", pass, swap, len(from), len(to))
		}
		// Between swaps nothing a reader sees changes; the first starts from the log
		// before the pass, the last ends at the log after it.
		if d := before.diff(from[0], true); d != "" {
			t.Fatalf("pass %d: before the first swap: %s", pass, d)
		}
		for i := 1; i < swap; i++ {
			if d := to[i-1].diff(from[i], true); d != "" {
				t.Fatalf("pass %d: between swaps %d and %d: %s", pass, i-1, i, d)
			}
		}
		if d := after.diff(to[swap-1], true); d != "" {
			t.Fatalf("pass %d: after the last swap: %s", pass, d)
		}
		steps := map[string]bool{}
		for _, p := range points {
			want := to[p.swap]
			if p.step == swapStepWritten {
				want = from[p.swap]
			}
			checkCopy(pass, p, want, after, string(ckpt))
			steps[p.step] = true
			if p.segs > 1 && p.step == swapStepDone {
				merged++
			}
		}
		if len(steps) != 6 {
			t.Fatalf("pass %d: crash copies at steps %v, want all six", pass, slices.Sorted(maps.Keys(steps)))
		}
		t.Logf("pass %d: %d swaps, %d crash points, %d segments -> %d", pass, swap, len(points), segsBefore, segsAfter)
	}
	if merged == 0 {
		t.Fatal("no swap merged segments")
	}
}
