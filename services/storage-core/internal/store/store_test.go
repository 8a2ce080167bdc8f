package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

func openStore(t *testing.T, dir string, clk *clock) *Store {
	t.Helper()
	opts := Options{RetentionInterval: -1, minSegmentBytes: 14}
	if clk != nil {
		opts.Now = clk.now
	}
	s, err := Open(dir, opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recordsOf encodes values as uncompressed v2 records with kmsg.
func recordsOf(values []string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Value: []byte(v), Key: []byte("k" + v),
			Headers: []kmsg.Header{{Key: "h", Value: []byte(v)}}}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	return recs
}

type batchOpt struct {
	pid   int64
	epoch int16
	seq   int32
	ts    int64
	codec kgo.CompressionCodec
	recs  []byte // override records section
	txn   bool   // transactional
}

// kbatch builds a RecordBatch v2 with kmsg as a Kafka producer would.
func kbatch(t *testing.T, o batchOpt, values ...string) []byte {
	t.Helper()
	if o.pid == 0 && o.epoch == 0 {
		o.pid, o.epoch, o.seq = -1, -1, -1
	}
	if o.ts == 0 {
		o.ts = 1_000_000
	}
	recs := recordsOf(values)
	var attrs int16
	if o.recs != nil {
		recs = o.recs
	} else if c, err := kgo.DefaultCompressor(o.codec); err != nil {
		t.Fatal(err)
	} else if c != nil {
		out, codec := c.Compress(new(bytes.Buffer), recs)
		recs = append([]byte(nil), out...)
		attrs = int16(codec)
	}
	if o.txn {
		attrs |= attrTransactional
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: o.ts, MaxTimestamp: o.ts + int64(len(values)) - 1, ProducerID: o.pid, ProducerEpoch: o.epoch,
		FirstSequence: o.seq, NumRecords: int32(len(values)), Records: recs,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], castagnoli))
	return raw
}

func mustCreate(t *testing.T, s *Store, name string, cfg ChannelConfig) *Log {
	t.Helper()
	l, _, err := s.Create(name, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustAppend(t *testing.T, l *Log, b []byte) AppendResult {
	t.Helper()
	r, err := l.AppendBatches(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readAll(t *testing.T, l *Log, from int64) []Record {
	t.Helper()
	recs, _, err := l.ReadRecords(from, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestAppendReadAcrossSegments(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "kafka.t", ChannelConfig{SegmentBytes: 300})
	var want []string
	for i := 0; i < 20; i++ {
		v1, v2 := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		r := mustAppend(t, l, kbatch(t, batchOpt{}, v1, v2))
		if r.BaseOffset != int64(2*i) || r.LastOffset != int64(2*i+1) {
			t.Fatalf("append %d: %+v", i, r)
		}
		want = append(want, v1, v2)
	}
	if _, n := l.Stats(); n < 5 {
		t.Fatalf("expected several segments, got %d", n)
	}
	if l.HighWatermark() != 40 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
	for _, from := range []int64{0, 1, 7, 39} {
		recs := readAll(t, l, from)
		if len(recs) != 40-int(from) {
			t.Fatalf("from %d: %d records", from, len(recs))
		}
		for i, r := range recs {
			if r.Offset != from+int64(i) || string(r.Value) != want[from+int64(i)] || string(r.Key) != "k"+want[from+int64(i)] ||
				len(r.Headers) != 1 || string(r.Headers[0].Value) != want[from+int64(i)] {
				t.Fatalf("from %d record %d: %+v", from, i, r)
			}
		}
	}
	// Raw read: the first frame contains the offset.
	raw, err := l.ReadRaw(5, 1)
	if err != nil || len(raw) == 0 {
		t.Fatal(err)
	}
	if h := parseHeader(raw); h.BaseOffset != 4 || int(h.Length) != len(raw) {
		t.Fatalf("raw frame: %+v len %d", h, len(raw))
	}
	if raw, err := l.ReadRaw(40, 100); err != nil || raw != nil {
		t.Fatalf("at hw: %v %v", raw, err)
	}
	if _, err := l.ReadRaw(41, 100); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("past hw: %v", err)
	}
	// Reopen: same data, same next offset.
	_ = s.Close()
	s = openStore(t, filepath.Dir(filepath.Dir(l.dir)), nil)
	defer s.Close()
	l, err = s.Get("kafka.t")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, 0); len(got) != 40 {
		t.Fatalf("after reopen %d", len(got))
	}
	if r := mustAppend(t, l, kbatch(t, batchOpt{}, "z")); r.BaseOffset != 40 {
		t.Fatalf("after reopen append at %d", r.BaseOffset)
	}
}

func TestNativeAppendAndLogAppendTime(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(5_000_000)
	s := openStore(t, t.TempDir(), clk)
	defer s.Close()
	l := mustCreate(t, s, "n", ChannelConfig{})
	res, ts, err := l.Append([]NewRecord{{Key: nil, Value: []byte("v")}, {Timestamp: 42, Key: []byte{}, Value: nil,
		Headers: []Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}}}})
	if err != nil || res.BaseOffset != 0 || res.LastOffset != 1 || ts != 5_000_000 {
		t.Fatalf("append %+v %d %v", res, ts, err)
	}
	recs := readAll(t, l, 0)
	if len(recs) != 2 || recs[0].Key != nil || string(recs[0].Value) != "v" || recs[0].Timestamp != 5_000_000 || recs[0].ProducerID != -1 {
		t.Fatalf("rec0 %+v", recs)
	}
	if recs[1].Key == nil || len(recs[1].Key) != 0 || recs[1].Value != nil || recs[1].Timestamp != 42 || len(recs[1].Headers) != 2 || recs[1].Headers[1].Value != nil {
		t.Fatalf("rec1 %+v", recs[1])
	}

	la := mustCreate(t, s, "la", ChannelConfig{TimestampType: TimestampLogAppendTime})
	r := mustAppend(t, la, kbatch(t, batchOpt{ts: 7}, "x", "y"))
	if r.LogAppendTime != 5_000_000 {
		t.Fatalf("log append time %d", r.LogAppendTime)
	}
	for _, rec := range readAll(t, la, 0) {
		if rec.Timestamp != 5_000_000 {
			t.Fatalf("record ts %d", rec.Timestamp)
		}
	}
	raw, _ := la.ReadRaw(0, 1<<20)
	if _, err := checkFrame(raw, decompressLimit(DefaultMaxMessageBytes)); err != nil {
		t.Fatalf("stored LogAppendTime batch must have a valid CRC: %v", err)
	}
}

func TestValidation(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "v", ChannelConfig{MaxMessageBytes: 200})
	good := kbatch(t, batchOpt{}, "a")
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"crc":        {func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }(), ErrCorruptBatch},
		"magic":      {func() []byte { b := bytes.Clone(good); b[16] = 1; return b }(), ErrInvalidRecord},
		"short":      {good[:30], ErrCorruptBatch},
		"truncated":  {good[:len(good)-1], ErrCorruptBatch},
		"count":      {kbatch(t, batchOpt{recs: recordsOf([]string{"a"})}, "a", "b"), ErrCorruptBatch},
		"too large":  {kbatch(t, batchOpt{}, string(make([]byte, 300))), ErrBatchTooLarge},
		"empty":      {nil, ErrCorruptBatch},
		"bad second": {append(bytes.Clone(good), good[:20]...), ErrCorruptBatch},
	}
	for name, c := range cases {
		if _, err := l.AppendBatches(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	if l.HighWatermark() != 0 {
		t.Fatalf("nothing should be written, hw %d", l.HighWatermark())
	}
	// Two good batches in one call.
	r := mustAppend(t, l, append(kbatch(t, batchOpt{}, "a", "b"), kbatch(t, batchOpt{}, "c")...))
	if r.BaseOffset != 0 || l.HighWatermark() != 3 {
		t.Fatalf("multi: %+v hw %d", r, l.HighWatermark())
	}
}

func TestCompressedDecode(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "c", ChannelConfig{})
	codecs := []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	n := int64(0)
	for _, c := range codecs {
		vals := []string{"one", "two", string(bytes.Repeat([]byte("x"), 5000))}
		b := kbatch(t, batchOpt{codec: c}, vals...)
		if b[22]&7 == 0 {
			t.Fatalf("codec %v not applied", c)
		}
		mustAppend(t, l, b)
		n += 3
	}
	// Xerial-framed snappy, as the Java client writes.
	raw := recordsOf([]string{"j1", "j2"})
	block := snappy.Encode(nil, raw)
	x := []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
	x = binary.BigEndian.AppendUint32(x, uint32(len(block)))
	x = append(x, block...)
	xb := kbatch(t, batchOpt{recs: x}, "j1", "j2")
	binary.BigEndian.PutUint16(xb[21:], 2)
	binary.BigEndian.PutUint32(xb[17:], crc32.Checksum(xb[21:], castagnoli))
	mustAppend(t, l, xb)
	n += 2
	recs := readAll(t, l, 0)
	if int64(len(recs)) != n {
		t.Fatalf("decoded %d records, want %d", len(recs), n)
	}
	if string(recs[0].Value) != "one" || string(recs[n-1].Value) != "j2" || recs[n-1].Offset != n-1 {
		t.Fatalf("records %+v ... %+v", recs[0], recs[n-1])
	}
}

func TestIdempotence(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	l := mustCreate(t, s, "idem", ChannelConfig{})
	p := func(epoch int16, seq int32, vals ...string) []byte {
		return kbatch(t, batchOpt{pid: 9, epoch: epoch, seq: seq}, vals...)
	}
	mustAppend(t, l, kbatch(t, batchOpt{}, "other")) // offset 0
	r1 := mustAppend(t, l, p(0, 0, "a", "b"))        // 1..2
	r2 := mustAppend(t, l, p(0, 2, "c"))             // 3
	if r1.BaseOffset != 1 || r2.BaseOffset != 3 {
		t.Fatalf("offsets %d %d", r1.BaseOffset, r2.BaseOffset)
	}
	d, err := l.AppendBatches(p(0, 0, "a", "b"))
	if err != nil || !d.Duplicate || d.BaseOffset != 1 {
		t.Fatalf("duplicate: %+v %v", d, err)
	}
	if _, err := l.AppendBatches(p(0, 5, "x")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	if _, err := l.AppendBatches(p(1, 3, "x")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("new epoch not at 0: %v", err)
	}
	if l.HighWatermark() != 4 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
	// Survives a restart (state rebuilt from batch headers).
	_ = s.Close()
	s = openStore(t, dir, nil)
	defer s.Close()
	l, _ = s.Get("idem")
	d, err = l.AppendBatches(p(0, 2, "c"))
	if err != nil || !d.Duplicate || d.BaseOffset != 3 {
		t.Fatalf("duplicate after reopen: %+v %v", d, err)
	}
	if r := mustAppend(t, l, p(0, 3, "d")); r.BaseOffset != 4 {
		t.Fatalf("next after reopen %d", r.BaseOffset)
	}
	if r := mustAppend(t, l, p(1, 0, "e")); r.BaseOffset != 5 {
		t.Fatalf("new epoch %d", r.BaseOffset)
	}
	if _, err := l.AppendBatches(p(0, 4, "f")); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("old epoch: %v", err)
	}
	// Only the last 5 batches are remembered.
	for i := int32(1); i <= 6; i++ {
		mustAppend(t, l, p(1, i, "g"))
	}
	if _, err := l.AppendBatches(p(1, 1, "g")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("old duplicate beyond 5 batches: %v", err)
	}
	if d, err := l.AppendBatches(p(1, 2, "g")); err != nil || !d.Duplicate {
		t.Fatalf("5th last batch is a duplicate: %+v %v", d, err)
	}
}

func TestTornTailRecovery(t *testing.T) {
	for _, mode := range []string{"truncate", "corrupt", "garbage"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, nil)
			l := mustCreate(t, s, "torn", ChannelConfig{})
			for i := int32(0); i < 3; i++ {
				mustAppend(t, l, kbatch(t, batchOpt{pid: 1, epoch: 0, seq: i * 2}, "a", "b"))
			}
			seg := l.active.path
			_ = s.Close()
			st, _ := os.Stat(seg)
			switch mode {
			case "truncate":
				if err := os.Truncate(seg, st.Size()-7); err != nil {
					t.Fatal(err)
				}
			case "corrupt":
				f, _ := os.OpenFile(seg, os.O_RDWR, 0)
				_, _ = f.WriteAt([]byte{0xde}, st.Size()-3)
				_ = f.Close()
			case "garbage":
				f, _ := os.OpenFile(seg, os.O_RDWR|os.O_APPEND, 0)
				_, _ = f.Write(bytes.Repeat([]byte{0x01}, 100))
				_ = f.Close()
			}
			m := NewMetrics(nil)
			s2, err := Open(dir, Options{RetentionInterval: -1, Metrics: m}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if got := testutil.ToFloat64(m.TailTruncations); got != 1 {
				t.Fatalf("truncated counter %v", got)
			}
			l, _ = s2.Get("torn")
			wantHW := int64(4)
			if mode == "garbage" {
				wantHW = 6
			}
			if l.HighWatermark() != wantHW || len(readAll(t, l, 0)) != int(wantHW) {
				t.Fatalf("hw %d", l.HighWatermark())
			}
			// The producer retries the lost batch: it is appended at the exact next offset.
			r, err := l.AppendBatches(kbatch(t, batchOpt{pid: 1, epoch: 0, seq: 4}, "a", "b"))
			if err != nil {
				t.Fatal(err)
			}
			if r.BaseOffset != 4 {
				t.Fatalf("retry at %d (dup %v)", r.BaseOffset, r.Duplicate)
			}
		})
	}
}

func TestRetentionAndDeleteRecords(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(10_000_000)
	s := openStore(t, t.TempDir(), clk)
	defer s.Close()
	l := mustCreate(t, s, "r", ChannelConfig{SegmentBytes: 200, RetentionMs: 1000})
	for i := 0; i < 10; i++ {
		mustAppend(t, l, kbatch(t, batchOpt{ts: 10_000_000 + int64(i)*100}, "abcdefghij", "abcdefghij"))
	}
	_, segs := l.Stats()
	if segs < 4 {
		t.Fatalf("segments %d", segs)
	}
	s.RunRetention()
	if l.LogStart() != 0 {
		t.Fatalf("nothing expired yet, log start %d", l.LogStart())
	}
	clk.ms.Store(10_000_000 + 1500)
	s.RunRetention()
	if l.LogStart() == 0 {
		t.Fatal("expired segments not deleted")
	}
	start := l.LogStart()
	if _, err := l.ReadRaw(0, 100); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read below log start: %v", err)
	}
	if recs := readAll(t, l, start); len(recs) != int(20-start) || recs[0].Offset != start {
		t.Fatalf("after retention: %d records", len(recs))
	}
	// Bytes.
	if err := l.UpdateConfig(ChannelConfig{SegmentBytes: 200, RetentionMs: -1, RetentionBytes: 1}); err != nil {
		t.Fatal(err)
	}
	s.RunRetention()
	if _, n := l.Stats(); n != 1 {
		t.Fatalf("bytes retention left %d segments", n)
	}
	// DeleteRecords.
	// Below the log start (Kafka: the log start only moves forward, no error).
	start = l.LogStart()
	if ls, err := l.DeleteRecords(start - 1); err != nil || ls != start {
		t.Fatalf("delete below start %d: %d %v", start, ls, err)
	}
	if ls, err := l.DeleteRecords(0); err != nil || ls != start || l.LogStart() != start {
		t.Fatalf("delete before 0 with log start %d: %d %v (log start now %d)", start, ls, err, l.LogStart())
	}
	if _, err := l.DeleteRecords(-2); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("delete before -2: %v", err)
	}
	if _, err := l.DeleteRecords(21); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("delete past hw: %v", err)
	}
	if ls, err := l.DeleteRecords(19); err != nil || ls != 19 {
		t.Fatalf("delete records: %d %v", ls, err)
	}
	if recs := readAll(t, l, 19); len(recs) != 1 || recs[0].Offset != 19 {
		t.Fatalf("after delete: %+v", recs)
	}
	if ls, err := l.DeleteRecords(-1); err != nil || ls != 20 {
		t.Fatalf("delete all: %d %v", ls, err)
	}
	dir := l.dir
	_ = s.Close()
	s = openStore(t, filepath.Dir(filepath.Dir(dir)), clk)
	defer s.Close()
	l, _ = s.Get("r")
	if l.LogStart() != 20 || l.HighWatermark() != 20 {
		t.Fatalf("after reopen: start %d hw %d", l.LogStart(), l.HighWatermark())
	}
	if r := mustAppend(t, l, kbatch(t, batchOpt{}, "n")); r.BaseOffset != 20 {
		t.Fatalf("append after delete-all at %d", r.BaseOffset)
	}
}

func TestLookupTime(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "time", ChannelConfig{SegmentBytes: 500})
	for i := 0; i < 50; i++ {
		// Batch i: two records at 1000+10i and 1000+10i+1.
		mustAppend(t, l, kbatch(t, batchOpt{ts: 1000 + int64(i)*10}, "v", "w"))
	}
	for _, c := range []struct {
		ts, off int64
		found   bool
	}{{0, 0, true}, {1000, 0, true}, {1001, 1, true}, {1002, 2, true}, {1255, 52, true}, {1491, 99, true}, {1492, 0, false}} {
		off, _, found, err := l.LookupTime(c.ts)
		if err != nil || found != c.found || found && off != c.off {
			t.Errorf("lookup %d: off %d found %v err %v; want %d %v", c.ts, off, found, err, c.off, c.found)
		}
	}
	off, ts, found, err := l.LookupMaxTime()
	if err != nil || !found || off != 99 || ts != 1491 {
		t.Fatalf("max time: %d %d %v %v", off, ts, found, err)
	}
}

func TestGroupCommitConcurrent(t *testing.T) {
	m := NewMetrics(nil)
	s, err := Open(t.TempDir(), Options{RetentionInterval: -1, Metrics: m, minSegmentBytes: 14}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := mustCreate(t, s, "gc", ChannelConfig{SegmentBytes: 4096})
	const writers, each = 8, 40
	var wg sync.WaitGroup
	offs := make(chan int64, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r, err := l.AppendBatches(kbatch(t, batchOpt{}, "x"))
				if err != nil {
					t.Error(err)
					return
				}
				// Acknowledged means durable and visible.
				if l.HighWatermark() <= r.BaseOffset {
					t.Errorf("acked offset %d above hw %d", r.BaseOffset, l.HighWatermark())
				}
				offs <- r.BaseOffset
			}
		}()
	}
	wg.Wait()
	close(offs)
	seen := map[int64]bool{}
	for o := range offs {
		if seen[o] {
			t.Fatalf("offset %d twice", o)
		}
		seen[o] = true
	}
	if len(seen) != writers*each || l.HighWatermark() != writers*each {
		t.Fatalf("got %d offsets, hw %d", len(seen), l.HighWatermark())
	}
	if got := len(readAll(t, l, 0)); got != writers*each {
		t.Fatalf("read %d", got)
	}
	t.Logf("%d appends, %v fsyncs", writers*each, testutil.ToFloat64(m.Fsyncs))
}

func TestLongPollWakeup(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "lp", ChannelConfig{})
	got := make(chan bool, 1)
	ch := l.Changed()
	go func() { got <- l.Wait(t.Context(), 0, time.Minute) }()
	mustAppend(t, l, kbatch(t, batchOpt{}, "x"))
	<-ch // closed by the durable advance
	if !<-got {
		t.Fatal("waiter not woken with data")
	}
	// Deleting the channel wakes waiters too.
	go func() { got <- l.Wait(t.Context(), 1, time.Minute) }()
	if err := s.Delete("lp", false); err != nil {
		t.Fatal(err)
	}
	if <-got {
		t.Fatal("no data expected")
	}
}

func TestIntervalFsync(t *testing.T) {
	s, err := Open(t.TempDir(), Options{RetentionInterval: -1, FsyncInterval: 5 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := mustCreate(t, s, "iv", ChannelConfig{})
	for i := 0; i < 10; i++ {
		mustAppend(t, l, kbatch(t, batchOpt{}, "x"))
	}
	if l.HighWatermark() != 10 || len(readAll(t, l, 0)) != 10 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
}

func TestChannelAdmin(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	if _, _, err := s.Create("_x", ChannelConfig{}, false); err == nil {
		t.Fatal("reserved name accepted")
	}
	if _, _, err := s.Create("a/b", ChannelConfig{}, false); err == nil {
		t.Fatal("bad name accepted")
	}
	if _, _, err := s.Create("ok", ChannelConfig{RetentionMs: -5}, false); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad config: %v", err)
	}
	long := string(bytes.Repeat([]byte("x"), 400))
	mustCreate(t, s, long, ChannelConfig{})
	mustCreate(t, s, "kafka.a", ChannelConfig{})
	if _, _, err := s.Create("kafka.a", ChannelConfig{}, false); !errors.Is(err, ErrExists) {
		t.Fatalf("exists: %v", err)
	}
	if _, created, err := s.Create("kafka.a", ChannelConfig{}, true); err != nil || created {
		t.Fatalf("if not exists: %v %v", created, err)
	}
	if got := s.List("kafka."); len(got) != 1 {
		t.Fatalf("list %d", len(got))
	}
	if _, err := Open(dir, Options{LockWait: -1}, zaptest.NewLogger(t)); err == nil {
		t.Fatal("second open of a locked dir succeeded")
	}
	_ = s.Close()
	s = openStore(t, dir, nil)
	defer s.Close()
	if _, err := s.Get(long); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("kafka.a", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("kafka.a", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	if err := s.Delete("kafka.a", true); err != nil {
		t.Fatal(err)
	}
}

// TestReopenFromSnapshotAndIndexes: after rolls, a reopen loads sealed segments from
// their index files plus the producer snapshot, and behaves as a full scan does.
func TestReopenFromSnapshotAndIndexes(t *testing.T) {
	for _, dropSnap := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop_snapshot=%v", dropSnap), func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, nil)
			l := mustCreate(t, s, "snap", ChannelConfig{SegmentBytes: 400})
			for i := int32(0); i < 30; i++ {
				mustAppend(t, l, kbatch(t, batchOpt{pid: 3, epoch: 0, seq: i * 2, ts: 5000 + int64(i)*10}, "a", "b"))
			}
			_, segs := l.Stats()
			if segs < 4 {
				t.Fatalf("segments %d", segs)
			}
			ldir := l.dir
			_ = s.Close()
			if dropSnap {
				matches, _ := filepath.Glob(filepath.Join(ldir, "*.snapshot"))
				if len(matches) != 1 {
					t.Fatalf("snapshots %v", matches)
				}
				_ = os.Remove(matches[0])
			}
			s = openStore(t, dir, nil)
			defer s.Close()
			l, _ = s.Get("snap")
			if l.HighWatermark() != 60 || len(readAll(t, l, 0)) != 60 {
				t.Fatalf("hw %d", l.HighWatermark())
			}
			// The last 5 batches are duplicates (some live in sealed segments).
			for i := int32(25); i < 30; i++ {
				d, err := l.AppendBatches(kbatch(t, batchOpt{pid: 3, epoch: 0, seq: i * 2, ts: 1}, "a", "b"))
				if err != nil || !d.Duplicate || d.BaseOffset != int64(i)*2 {
					t.Fatalf("batch %d: %+v %v", i, d, err)
				}
			}
			if off, _, found, err := l.LookupTime(5105); err != nil || !found || off != 22 {
				t.Fatalf("lookup: %d %v %v", off, found, err)
			}
			if off, ts, found, err := l.LookupMaxTime(); err != nil || !found || off != 59 || ts != 5291 {
				t.Fatalf("max: %d %d %v %v", off, ts, found, err)
			}
			if r := mustAppend(t, l, kbatch(t, batchOpt{pid: 3, epoch: 0, seq: 60}, "c")); r.BaseOffset != 60 {
				t.Fatalf("next %d", r.BaseOffset)
			}
		})
	}
}

func TestProducerExpiry(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(100_000_000)
	s := openStore(t, t.TempDir(), clk)
	defer s.Close()
	l := mustCreate(t, s, "exp", ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{pid: 4, epoch: 0, seq: 0}, "a"))
	if _, err := l.AppendBatches(kbatch(t, batchOpt{pid: 4, epoch: 0, seq: 7}, "b")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	clk.ms.Add(producerExpiryMs + 1)
	s.RunRetention()
	// Expired: the producer is unknown again, so any sequence is accepted (Kafka).
	if _, err := l.AppendBatches(kbatch(t, batchOpt{pid: 4, epoch: 0, seq: 7}, "b")); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

// TestBeginAppendPipelined: appends begun back to back (write phase only) get offsets
// in begin order, are not visible before they are durable, and a duplicate begun before
// the original is durable is answered with the original's offset; waiting in reverse
// order works (one fsync covers them all).
func TestBeginAppendPipelined(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "pipe", ChannelConfig{})
	var pend []*PendingAppend
	for i := range 10 {
		pend = append(pend, l.BeginAppend(kbatch(t, batchOpt{pid: 3, epoch: 0, seq: int32(2 * i)}, "a", "b")))
	}
	dup := l.BeginAppend(kbatch(t, batchOpt{pid: 3, epoch: 0, seq: 16}, "a", "b"))
	gap := l.BeginAppend(kbatch(t, batchOpt{pid: 3, epoch: 0, seq: 99}, "a"))
	// In WAL mode the WAL writer fsyncs without waiting for a Wait to lead.
	if hw := l.HighWatermark(); hw != 0 && !s.opts.WAL {
		t.Fatalf("high watermark %d before any wait, want 0", hw)
	}
	d, err := dup.Wait()
	if err != nil || !d.Duplicate || d.BaseOffset != 16 {
		t.Fatalf("duplicate: %+v %v", d, err)
	}
	if hw := l.HighWatermark(); hw < 18 {
		t.Fatalf("high watermark %d after the duplicate's wait, want >= 18 (original durable)", hw)
	}
	if _, err := gap.Wait(); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	for i := len(pend) - 1; i >= 0; i-- {
		r, err := pend[i].Wait()
		if err != nil || r.BaseOffset != int64(2*i) {
			t.Fatalf("append %d: %+v %v", i, r, err)
		}
	}
	if hw := l.HighWatermark(); hw != 20 {
		t.Fatalf("high watermark %d, want 20", hw)
	}
}

// TestReadPrefetch: a read requests the next prefetchAhead bytes ahead of the reader,
// a read that would add less than a prefetch step does not, and reads further on move
// the readahead position up to the visible end.
func TestReadPrefetch(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "ra", ChannelConfig{})
	val := strings.Repeat("v", 100<<10)
	for range 100 { // ~300 KiB per batch (key, value, header)
		mustAppend(t, l, kbatch(t, batchOpt{}, val))
	}
	seg := l.segs[0]
	size := seg.size.Load()
	raw, err := l.ReadRaw(0, 1<<20)
	if err != nil || len(raw) == 0 {
		t.Fatalf("read: %d bytes, %v", len(raw), err)
	}
	ra := seg.readahead.Load()
	if want := int64(1<<20) + prefetchAhead; ra != want {
		t.Fatalf("readahead %d after the first read, want %d", ra, want)
	}
	if _, err := l.ReadRaw(3, 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := seg.readahead.Load(); got != ra {
		t.Fatalf("readahead moved from %d to %d for less than a step", ra, got)
	}
	if _, err := l.ReadRaw(60, 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := seg.readahead.Load(); got != size {
		t.Fatalf("readahead %d, want the visible end %d", got, size)
	}
}

// openClocked opens a store whose clock stands at now.
func openClocked(t *testing.T, now time.Time) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{RetentionInterval: -1, Now: func() time.Time { return now }}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// timedBatch is a batch with first timestamp base and one record per timestamp delta.
func timedBatch(t *testing.T, base int64, deltas ...int64) []byte {
	t.Helper()
	var out []byte
	for i, d := range deltas {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: d, Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		out = r.AppendTo(out)
	}
	return kbatch(t, batchOpt{ts: base, recs: out}, make([]string, len(deltas))...)
}

// TestTimestampLimits: a CreateTime channel with timestamp_before/after_max_ms refuses
// a batch with any record timestamp past them (its first, its largest, or one behind
// its first) with ErrInvalidTimestamp and stores nothing; LogAppendTime channels and
// channels without limits take any timestamp.
func TestTimestampLimits(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	s := openClocked(t, now)
	ms := now.UnixMilli()
	l := mustCreate(t, s, "limited", ChannelConfig{TimestampBeforeMaxMs: 60_000, TimestampAfterMaxMs: 1_000})
	mustAppend(t, l, kbatch(t, batchOpt{ts: ms - 60_000}, "a"))
	mustAppend(t, l, kbatch(t, batchOpt{ts: ms + 999}, "b", "c")) // the second record at +1000
	refused := map[string][]byte{
		"too old":         kbatch(t, batchOpt{ts: ms - 60_001}, "x"),
		"too new":         kbatch(t, batchOpt{ts: ms + 1_001}, "x"),
		"last too new":    kbatch(t, batchOpt{ts: ms + 1_000}, "x", "y"),
		"one behind base": timedBatch(t, ms, 0, -61_000),
	}
	for name, b := range refused {
		if _, err := l.AppendBatches(b); !errors.Is(err, ErrInvalidTimestamp) {
			t.Fatalf("%s: %v, want ErrInvalidTimestamp", name, err)
		}
	}
	if hw := l.HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d after refused batches, want 3", hw)
	}
	for _, cfg := range []ChannelConfig{{}, {TimestampBeforeMaxMs: 1, TimestampAfterMaxMs: 1, TimestampType: TimestampLogAppendTime}} {
		free := mustCreate(t, s, fmt.Sprint("free", cfg.TimestampType), cfg)
		mustAppend(t, free, kbatch(t, batchOpt{ts: 1}, "ancient"))
		mustAppend(t, free, kbatch(t, batchOpt{ts: ms + 86_400_000}, "future"))
	}
}

// TestTimestampLimitsPerRecord: the limits hold for every record, not only the batch's
// smallest and largest timestamps: a record without a timestamp (-1) is not checked,
// but it does not hide a too-old record next to it, and a timestamp far enough in the
// past that now-ts overflows is still too old.
func TestTimestampLimitsPerRecord(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	s := openClocked(t, now)
	ms := now.UnixMilli()
	l := mustCreate(t, s, "limited", ChannelConfig{TimestampBeforeMaxMs: 60_000, TimestampAfterMaxMs: 1_000})
	recs := func(base int64, deltas ...int64) []byte { return timedBatch(t, base, deltas...) }
	// No timestamp, then one at now: taken.
	mustAppend(t, l, recs(-1, 0, ms+1))
	for name, b := range map[string][]byte{
		"no timestamp hides a too-old one": recs(-1, 0, 1, ms+1), // -1, 0 (too old), now
	} {
		if _, err := l.AppendBatches(b); !errors.Is(err, ErrInvalidTimestamp) {
			t.Fatalf("%s: %v, want ErrInvalidTimestamp", name, err)
		}
	}
	old := mustCreate(t, s, "before-only", ChannelConfig{TimestampBeforeMaxMs: 60_000})
	if _, err := old.AppendBatches(recs(math.MinInt64, 0)); !errors.Is(err, ErrInvalidTimestamp) {
		t.Fatalf("MinInt64: %v, want ErrInvalidTimestamp", err)
	}
	mustAppend(t, old, recs(ms, 0, math.MaxInt64-ms)) // far future, no after limit
}
