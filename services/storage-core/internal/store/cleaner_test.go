package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
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

// compactWorkload appends keys x versions records in batches of 10 (every tenth
// version of a key a tombstone) at clock time clk and returns the key and value (nil
// for a tombstone) by offset.
func compactWorkload(t *testing.T, l *Log, clk *clock, keys, versions int) map[int64][2][]byte {
	t.Helper()
	written := map[int64][2][]byte{}
	var batch []NewRecord
	flush := func() {
		r := mustAppend(t, l, EncodeBatch(batch, clk.ms.Load()))
		for i, nr := range batch {
			written[r.BaseOffset+int64(i)] = [2][]byte{nr.Key, nr.Value}
		}
		batch = batch[:0]
	}
	for v := range versions {
		for k := range keys {
			nr := NewRecord{Timestamp: clk.ms.Load(), Key: fmt.Appendf(nil, "key-%04d", k), Value: fmt.Appendf(nil, "value-%04d-%03d", k, v)}
			if (k+v)%10 == 0 {
				nr.Value = nil
			}
			batch = append(batch, nr)
			if len(batch) == 10 {
				flush()
			}
		}
		clk.ms.Add(1)
	}
	if len(batch) > 0 {
		flush()
	}
	return written
}

// wantCompacted returns the offsets a full clean of everything below activeBase keeps:
// all at or after activeBase, and below it the newest offset of each key (tombstones
// too unless dropTombs).
func wantCompacted(written map[int64][2][]byte, activeBase int64, dropTombs bool) []int64 {
	newest := map[string]int64{}
	for off, kv := range written {
		if off < activeBase && off >= newest[string(kv[0])] {
			newest[string(kv[0])] = off
		}
	}
	var out []int64
	for off, kv := range written {
		if off >= activeBase || newest[string(kv[0])] == off && !(dropTombs && kv[1] == nil) {
			out = append(out, off)
		}
	}
	slices.Sort(out)
	return out
}

func checkCompacted(t *testing.T, l *Log, written map[int64][2][]byte, want []int64) {
	t.Helper()
	got := readAll(t, l, l.LogStart())
	if len(got) != len(want) {
		t.Fatalf("%d records after cleaning, want %d", len(got), len(want))
	}
	for i, r := range got {
		kv := written[r.Offset]
		if r.Offset != want[i] || !bytes.Equal(r.Key, kv[0]) || !bytes.Equal(r.Value, kv[1]) || (r.Value == nil) != (kv[1] == nil) {
			t.Fatalf("record %d: offset %d key %q value %q, want offset %d key %q value %q", i, r.Offset, r.Key, r.Value, want[i], kv[0], kv[1])
		}
	}
}

// TestCleanerCompacts: a compacted channel of 200 keys x 30 versions (10 % tombstones)
// keeps, after a pass, exactly the newest record of each key below the active segment,
// at its original offset, and every record of the active segment; tombstones go once
// delete_retention_ms has passed; the cleaned log reads the same after a restart, and
// the log start and high watermark do not move.
func TestCleanerCompacts(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, dir, clk)
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 8 << 10, DeleteRetentionMs: 60_000, MinCleanableDirtyRatio: -1})
	written := compactWorkload(t, l, clk, 200, 30)
	hw, start := l.HighWatermark(), l.LogStart()
	sizeBefore, segsBefore := l.Stats()
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("RunCleaner ran %d passes, want 1", n)
	}
	active := l.activeBase()
	checkCompacted(t, l, written, wantCompacted(written, active, false))
	sizeAfter, segsAfter := l.Stats()
	if sizeAfter >= sizeBefore/3 || segsAfter != segsBefore || l.HighWatermark() != hw || l.LogStart() != start {
		t.Fatalf("after cleaning: %d bytes in %d segments (before %d in %d), hw %d start %d (before %d, %d)",
			sizeAfter, segsAfter, sizeBefore, segsBefore, l.HighWatermark(), l.LogStart(), hw, start)
	}
	if n := s.RunCleaner(); n != 0 {
		t.Fatalf("a second RunCleaner with nothing dirty ran %d passes", n)
	}
	clk.ms.Add(60_001)
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("RunCleaner after delete_retention_ms ran %d passes, want 1 (tombstones due)", n)
	}
	want := wantCompacted(written, active, true)
	checkCompacted(t, l, written, want)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, clk)
	defer s.Close()
	l, err := s.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, l, written, want)
	if l.HighWatermark() != hw || l.LogStart() != start {
		t.Fatalf("after restart: hw %d start %d, want %d %d", l.HighWatermark(), l.LogStart(), hw, start)
	}
	// Raw frames of a cleaned segment are valid Kafka batches for kmsg.
	raw, err := l.ReadRaw(start, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for len(raw) > 0 {
		var rb kmsg.RecordBatch
		n, _ := frameLen(raw)
		if err := rb.ReadFrom(raw[:n]); err != nil || rb.NumRecords <= 0 || rb.NumRecords > rb.LastOffsetDelta+1 ||
			crc32.Checksum(raw[21:n], castagnoli) != uint32(rb.CRC) {
			t.Fatalf("cleaned frame at %d: %v %+v", rb.FirstOffset, err, rb.NumRecords)
		}
		raw = raw[n:]
	}
}

// TestCleanerLeavesDeleteChannels: a pass never looks at delete-policy channels, and a
// compacted channel younger than min_compaction_lag_ms is not cleaned.
func TestCleanerLeavesDeleteChannels(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, t.TempDir(), clk)
	defer s.Close()
	d := mustCreate(t, s, "d", ChannelConfig{SegmentBytes: 8 << 10})
	c := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 8 << 10, MinCompactionLagMs: 10_000, MinCleanableDirtyRatio: -1})
	wd := compactWorkload(t, d, clk, 50, 20)
	wc := compactWorkload(t, c, clk, 50, 20)
	if n := s.RunCleaner(); n != 0 {
		t.Fatalf("RunCleaner ran %d passes within min_compaction_lag_ms", n)
	}
	if got := readAll(t, d, 0); len(got) != len(wd) {
		t.Fatalf("delete channel: %d records, want %d", len(got), len(wd))
	}
	clk.ms.Add(10_001)
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("RunCleaner after min_compaction_lag_ms ran %d passes, want 1", n)
	}
	checkCompacted(t, c, wc, wantCompacted(wc, c.activeBase(), false))
	if got := readAll(t, d, 0); len(got) != len(wd) {
		t.Fatalf("delete channel after a pass: %d records, want %d", len(got), len(wd))
	}
}

// TestCleanerSmallMap: a dedupe buffer holding fewer keys than the dirty section
// cleans in several passes and ends with the same result as one big pass.
func TestCleanerSmallMap(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	dir := t.TempDir()
	opts := Options{RetentionInterval: -1, minSegmentBytes: 14, Now: clk.now, Cleaner: CleanerOptions{Threads: -1, DedupeBufferBytes: 60 * (dedupeEntryBytes + 8)}}
	s, err := Open(dir, opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 8 << 10, MinCleanableDirtyRatio: -1})
	written := compactWorkload(t, l, clk, 200, 10)
	if n := s.RunCleaner(); n < 3 {
		t.Fatalf("RunCleaner ran %d passes with a 60-key map over 200 keys, want several", n)
	}
	checkCompacted(t, l, written, wantCompacted(written, l.activeBase(), false))
}

// TestCleanerLeftovers: files of an interrupted pass are removed at open.
func TestCleanerLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact})
	mustAppend(t, l, EncodeBatch([]NewRecord{{Key: []byte("k"), Value: []byte("v")}}, 1))
	cdir := l.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(cdir, segmentName(0, ".log")+cleanSuffix)
	if err := os.WriteFile(left, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, nil)
	defer s.Close()
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("leftover %s after open: %v", left, err)
	}
	l, _ = s.Get("c")
	if got := readAll(t, l, 0); len(got) != 1 {
		t.Fatalf("%d records, want 1", len(got))
	}
}

// TestCleanerTxnAndProducers: a pass removes the batches of an aborted transaction and
// keeps the markers and the committed records (newest per key); an idempotent
// producer's superseded batches go, but its last batch stays (a header of no records
// once superseded), and a retry of a batch of its dedupe window is still answered as a
// duplicate with its original offset, before and after a restart.
func TestCleanerTxnAndProducers(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, dir, clk)
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 600, MinCleanableDirtyRatio: -1})
	mustAppend(t, l, kbatch(t, batchOpt{pid: 7, epoch: 0, seq: 0, txn: true}, "t1", "t2"))  // 0-1
	if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: 7, ProducerEpoch: 0}); err != nil { // 2: abort
		t.Fatal(err)
	}
	mustAppend(t, l, kbatch(t, batchOpt{pid: 8, epoch: 0, seq: 0, txn: true}, "t3"))                      // 3
	if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: 8, ProducerEpoch: 0, Commit: true}); err != nil { // 4
		t.Fatal(err)
	}
	first := mustAppend(t, l, kbatch(t, batchOpt{pid: 9, epoch: 0, seq: 0}, "p")) // 5
	mustAppend(t, l, kbatch(t, batchOpt{pid: 9, epoch: 0, seq: 1}, "p"))          // 6, supersedes 5
	for i := range 40 {
		mustAppend(t, l, kbatch(t, batchOpt{}, fmt.Sprintf("f%d", i%4))) // 7..46
	}
	mustAppend(t, l, kbatch(t, batchOpt{}, "p")) // 47: supersedes 6 (producer 9's last batch)
	for i := range 20 {
		mustAppend(t, l, kbatch(t, batchOpt{}, fmt.Sprintf("g%d", i))) // roll past 47
	}
	if n := s.RunCleaner(); n < 1 {
		t.Fatal("no pass")
	}
	active := l.activeBase()
	if active <= 47 {
		t.Fatalf("active segment starts at %d; the test needs 47 in a closed one", active)
	}
	got := map[int64]string{}
	for _, r := range readAll(t, l, 0) {
		got[r.Offset] = string(r.Value)
	}
	for off, want := range map[int64]string{3: "t3", 47: "p", 43: "f0", 44: "f1", 45: "f2", 46: "f3"} {
		if got[off] != want {
			t.Errorf("offset %d = %q, want %q", off, got[off], want)
		}
	}
	for _, off := range []int64{0, 1, 5, 6, 7, 42} {
		if v, ok := got[off]; ok {
			t.Errorf("offset %d (%q) survived cleaning", off, v)
		}
	}
	// Markers stay in the log (read raw: ReadRecords skips control batches).
	for _, off := range []int64{2, 4} {
		raw, err := l.ReadRaw(off, 1)
		if err != nil || len(raw) == 0 {
			t.Fatalf("read marker %d: %v", off, err)
		}
		if h := parseHeader(raw); h.BaseOffset != off || h.Attributes&attrControl == 0 {
			t.Errorf("offset %d: batch at %d attributes %#x, want the marker", off, h.BaseOffset, h.Attributes)
		}
	}
	// Producer 9's last batch (offset 6) is kept as an empty header.
	raw, err := l.ReadRaw(6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if h := parseHeader(raw); h.BaseOffset != 6 || h.RecordCount != 0 || h.ProducerID != 9 {
		t.Fatalf("producer 9's last batch: %+v, want an empty batch at 6", h)
	}
	retry := func() {
		t.Helper()
		d, err := l.AppendBatches(kbatch(t, batchOpt{pid: 9, epoch: 0, seq: 0}, "p"))
		if err != nil || !d.Duplicate || d.BaseOffset != first.BaseOffset {
			t.Fatalf("retry of producer 9's first batch: %+v %v, want a duplicate at %d", d, err, first.BaseOffset)
		}
	}
	retry()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Without the snapshots the producer state is rebuilt from the cleaned segments.
	matches, _ := filepath.Glob(filepath.Join(l.dir, "*.snapshot"))
	for _, m := range matches {
		_ = os.Remove(m)
	}
	s = openStore(t, dir, clk)
	defer s.Close()
	l, _ = s.Get("c")
	d, err := l.AppendBatches(kbatch(t, batchOpt{pid: 9, epoch: 0, seq: 2}, "p"))
	if err != nil || d.Duplicate {
		t.Fatalf("producer 9's next batch after a restart: %+v %v", d, err)
	}
	if _, err := l.AppendBatches(kbatch(t, batchOpt{pid: 9, epoch: 0, seq: 5}, "p")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("a sequence gap after a restart: %v, want ErrOutOfOrderSequence", err)
	}
}

// TestCleanerMergesSegments: segments a pass shrank are merged by the next pass into
// as few segments as fit in segment_bytes (Kafka Cleaner.groupSegmentsBySize), each at
// the base offset of the first segment it replaces: every surviving record keeps its
// offset and is found by an offset lookup (the merged segment's index), no sealed
// segment outgrows segment_bytes, and the log reads the same after a restart that
// loads the merged segments from their index files.
func TestCleanerMergesSegments(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, dir, clk)
	const segBytes = 8 << 10
	l := mustCreate(t, s, "c", ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: segBytes, DeleteRetentionMs: 3_600_000, MinCleanableDirtyRatio: -1})
	written := compactWorkload(t, l, clk, 200, 30)
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("pass 1: RunCleaner ran %d passes, want 1", n)
	}
	_, segs1 := l.Stats()
	bases1 := segmentBases(l)
	more := compactWorkload(t, l, clk, 20, 5) // a little dirt for a second pass
	maps.Copy(written, more)
	if n := s.RunCleaner(); n != 1 {
		t.Fatalf("pass 2: RunCleaner ran %d passes, want 1", n)
	}
	_, segs2 := l.Stats()
	t.Logf("%d segments after the first pass, %d after the second", segs1, segs2)
	if segs2 >= segs1/2 {
		t.Fatalf("%d segments after the second pass, %d after the first: the shrunken segments were not merged", segs2, segs1)
	}
	want := wantCompacted(written, l.activeBase(), false)
	check := func(what string) {
		t.Helper()
		checkCompacted(t, l, written, want)
		for _, b := range segmentBases(l) {
			if !slices.Contains(bases1, b) && b < bases1[len(bases1)-1] {
				t.Fatalf("%s: segment at %d, not the base of one it replaced (%v)", what, b, bases1)
			}
		}
		l.segMu.RLock()
		for _, sg := range l.segs[:len(l.segs)-1] {
			if sg.size.Load() > segBytes {
				t.Errorf("%s: segment %d holds %d bytes, more than segment_bytes %d", what, sg.base, sg.size.Load(), segBytes)
			}
		}
		l.segMu.RUnlock()
		for _, off := range want {
			recs, _, err := l.ReadRecords(off, 1, 1<<20)
			if err != nil || len(recs) == 0 || recs[0].Offset != off {
				t.Fatalf("%s: read at %d: %v %v", what, off, recs, err)
			}
		}
	}
	check("after the merge")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, b := range segmentBases(l) {
		if _, err := os.Stat(filepath.Join(l.dir, segmentName(b, ".index"))); err != nil {
			t.Fatalf("merged segment %d: %v", b, err)
		}
	}
	s = openStore(t, dir, clk)
	defer s.Close()
	l, _ = s.Get("c")
	check("after a restart")
}

// segmentBases returns the base offsets of l's segments, oldest first.
func segmentBases(l *Log) []int64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	var out []int64
	for _, s := range l.segs {
		out = append(out, s.base)
	}
	return out
}
