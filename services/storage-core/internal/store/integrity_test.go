package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// TestHashedDirNameNotAChannel: a long name's hashed directory name is not a valid
// channel name, and creating a channel whose directory holds another channel's
// meta.json (here: a directory of the older "~h~" scheme) is refused without touching it.
func TestHashedDirNameNotAChannel(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	long := strings.Repeat("v", 250)
	l := mustCreate(t, s, long, ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{}, "victim"))
	victimDir := filepath.Base(l.dir)
	if _, _, err := s.Create(victimDir, ChannelConfig{}, false); err == nil {
		t.Fatalf("created a channel named after the hashed directory %q", victimDir)
	}
	if got := readAll(t, l, 0); len(got) != 1 || string(got[0].Value) != "victim" {
		t.Fatalf("victim data after create attempt: %+v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A directory made by the older scheme (name[:100] + "~h~" + sha256) opens under the
	// name in its meta.json, and creating the channel named like that directory fails.
	oldDir := long[:100] + "~h~" + strings.Repeat("ab", 32)
	if err := os.Rename(filepath.Join(dir, "channels", victimDir), filepath.Join(dir, "channels", oldDir)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, nil)
	defer s.Close()
	l, err := s.Get(long)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Create(oldDir, ChannelConfig{}, false)
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("create over an old-scheme directory: %v, want ErrInternal", err)
	}
	if got := readAll(t, l, 0); len(got) != 1 || string(got[0].Value) != "victim" {
		t.Fatalf("victim data after create attempt: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "channels", oldDir, metaFile)); err != nil {
		t.Fatal(err)
	}
}

// rawRecord encodes one record as Kafka does, with a chosen offset delta.
func rawRecord(delta int32, value string) []byte {
	r := kmsg.Record{OffsetDelta: delta, Value: []byte(value)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	return r.AppendTo(nil)
}

// lenPrefixed frames body as one record (varint length + body).
func lenPrefixed(body ...byte) []byte {
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

// batchWith builds a v2 batch of n records whose records section is recs, compressed
// with codec (nil: none), with a valid CRC.
func batchWith(t *testing.T, codec kgo.CompressionCodec, recs []byte, n int, garbage bool) []byte {
	t.Helper()
	vals := make([]string, n)
	b := kbatch(t, batchOpt{recs: []byte{}}, vals...)
	b = b[:batchHeaderLen]
	var attrs uint16
	if codec != (kgo.CompressionCodec{}) {
		c, err := kgo.DefaultCompressor(codec)
		if err != nil || c == nil {
			t.Fatal(err)
		}
		out, cd := c.Compress(new(bytes.Buffer), recs)
		recs = append([]byte(nil), out...)
		attrs = uint16(cd)
		if garbage {
			for i := range recs {
				recs[i] = byte(i*7 + 3)
			}
		}
	}
	b = append(b, recs...)
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-batchLengthField))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

func setHeader(b []byte, fn func(b []byte)) []byte {
	b = bytes.Clone(b)
	fn(b)
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

var allCodecs = map[string]kgo.CompressionCodec{
	"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// TestAppendValidatesRecords: batches whose records cannot be decoded are refused at
// append (as Kafka does), so they never reach native readers.
func TestAppendValidatesRecords(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "recs", ChannelConfig{})
	two := append(rawRecord(0, "a"), rawRecord(1, "b")...)
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"bad varint":         {batchWith(t, kgo.CompressionCodec{}, lenPrefixed(0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 1, false), ErrInvalidRecord},
		"key past end":       {batchWith(t, kgo.CompressionCodec{}, lenPrefixed(0, 0, 0, 40, 'k'), 1, false), ErrInvalidRecord},
		"empty body":         {batchWith(t, kgo.CompressionCodec{}, lenPrefixed(), 1, false), ErrInvalidRecord},
		"header count -1":    {batchWith(t, kgo.CompressionCodec{}, lenPrefixed(0, 0, 0, 1, 1, 1), 1, false), ErrInvalidRecord},
		"trailing bytes":     {batchWith(t, kgo.CompressionCodec{}, lenPrefixed(0, 0, 0, 1, 1, 0, 9), 1, false), ErrInvalidRecord},
		"null header key":    {batchWith(t, kgo.CompressionCodec{}, lenPrefixed(0, 0, 0, 1, 1, 2, 1, 1), 1, false), ErrInvalidRecord},
		"records past count": {batchWith(t, kgo.CompressionCodec{}, two, 1, false), ErrCorruptBatch},
	}
	for name, c := range allCodecs {
		cases[name+" garbage"] = struct {
			b    []byte
			want error
		}{batchWith(t, c, two, 2, true), ErrCorruptBatch}
		cases[name+" count"] = struct {
			b    []byte
			want error
		}{batchWith(t, c, two, 3, false), ErrCorruptBatch}
		cases[name+" bad record"] = struct {
			b    []byte
			want error
		}{batchWith(t, c, lenPrefixed(0, 0, 0, 40, 'k'), 1, false), ErrInvalidRecord}
	}
	for name, c := range cases {
		if _, err := l.AppendBatches(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	if l.HighWatermark() != 0 {
		t.Fatalf("corrupt batches were written: hw %d", l.HighWatermark())
	}
	for _, c := range allCodecs {
		mustAppend(t, l, batchWith(t, c, two, 2, false))
	}
	if got := readAll(t, l, 0); len(got) != 8 || string(got[7].Value) != "b" {
		t.Fatalf("read back %d records", len(got))
	}
}

// TestAppendRejectsBadOffsetDeltas: inner offset deltas must be exactly 0..n-1.
func TestAppendRejectsBadOffsetDeltas(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "deltas", ChannelConfig{})
	for _, deltas := range [][]int32{{0, 0, 0}, {0, 1000000, 2}, {-5, 1, 2}, {1, 2, 3}} {
		var recs []byte
		for _, d := range deltas {
			recs = append(recs, rawRecord(d, "v")...)
		}
		for name, c := range map[string]kgo.CompressionCodec{"none": {}, "zstd": kgo.ZstdCompression()} {
			if _, err := l.AppendBatches(batchWith(t, c, recs, 3, false)); !errors.Is(err, ErrInvalidRecord) {
				t.Errorf("deltas %v %s: got %v, want ErrInvalidRecord", deltas, name, err)
			}
		}
	}
	if l.HighWatermark() != 0 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
}

// TestAppendProducerFieldChecks: Kafka's LogValidator batch checks.
func TestAppendProducerFieldChecks(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "prod", ChannelConfig{})
	good := kbatch(t, batchOpt{}, "a")
	put := func(pid int64, seq int32, attrs uint16) []byte {
		return setHeader(good, func(b []byte) {
			binary.BigEndian.PutUint64(b[offProducerID:], uint64(pid))
			binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(seq))
			binary.BigEndian.PutUint16(b[offAttributes:], attrs)
		})
	}
	for name, b := range map[string][]byte{
		"control":                put(-1, -1, attrControl),
		"transactional no pid":   put(-1, -1, attrTransactional),
		"transactional pid -5":   put(-5, 0, attrTransactional),
		"negative seq with pid":  put(7, -3, 0),
		"control idempotent pid": put(7, 0, attrControl|attrTransactional),
	} {
		if _, err := l.AppendBatches(b); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: got %v, want ErrInvalidRecord", name, err)
		}
	}
	mustAppend(t, l, put(7, 0, 0))
	// No producer id with a base sequence: Kafka does not look at it, and franz-go
	// writes 0 there when idempotence is off.
	mustAppend(t, l, put(-1, 0, 0))
	mustAppend(t, l, put(-1, 5, 0))
	// A producer id below -1 is no producer id either (Kafka: hasProducerId is
	// producerId > -1): taken as sent, and not de-duplicated.
	hw := l.HighWatermark()
	mustAppend(t, l, put(-5, 0, 0))
	mustAppend(t, l, put(-5, 0, 0))
	mustAppend(t, l, put(-2, -1, 0))
	if got := l.HighWatermark(); got != hw+3 {
		t.Fatalf("after three batches without a producer id the high watermark is %d, want %d", got, hw+3)
	}
	recs, _, err := l.ReadRecords(hw, 10, 1<<20)
	if err != nil || len(recs) != 3 || recs[0].ProducerID != -5 || recs[2].ProducerID != -2 {
		t.Fatalf("read back: %v %+v", err, recs)
	}
}

// TestAppendDecompressedLimit: a small batch that decompresses past the channel's
// limit is refused.
func TestAppendDecompressedLimit(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "bomb", ChannelConfig{})
	r := kmsg.Record{Value: make([]byte, decompressLimit(DefaultMaxMessageBytes)+1)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := batchWith(t, kgo.ZstdCompression(), r.AppendTo(nil), 1, false)
	if len(b) > DefaultMaxMessageBytes {
		t.Fatalf("bomb is %d bytes", len(b))
	}
	if _, err := l.AppendBatches(b); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("got %v, want ErrCorruptBatch", err)
	}
}

// TestReadCorruptStoredData: a bit flip in stored data is reported as ErrDataLoss by
// native reads (CRC-32C verified), not served.
func TestReadCorruptStoredData(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "flip", ChannelConfig{})
	b := kbatch(t, batchOpt{ts: 5000}, "hello")
	mustAppend(t, l, b)
	f, err := os.OpenFile(filepath.Join(l.dir, segmentName(0, ".log")), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a bit of the base timestamp (covered by the CRC).
	if _, err := f.WriteAt([]byte{b[offBaseTS+7] ^ 0x10}, offBaseTS+7); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, _, err := l.ReadRecords(0, 10, 1<<20); !errors.Is(err, ErrDataLoss) {
		t.Fatalf("read of a flipped batch: %v, want ErrDataLoss", err)
	}
}

// TestReadStopsAtMaxRecords: reading one record of a batch of many decodes only what
// is returned.
func TestReadStopsAtMaxRecords(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "many", ChannelConfig{MaxMessageBytes: 8 << 20})
	const n = 100_000
	var recs []byte
	for i := 0; i < n; i++ {
		recs = append(recs, rawRecord(int32(i), "")...)
	}
	mustAppend(t, l, batchWith(t, kgo.CompressionCodec{}, recs, n, false))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got, next, err := l.ReadRecords(0, 1, 1<<20)
	runtime.ReadMemStats(&after)
	if err != nil || len(got) != 1 || next != 1 {
		t.Fatalf("read: %d records, next %d, %v", len(got), next, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("reading 1 record allocated %d bytes", alloc)
	}
	got, next, err = l.ReadRecords(5, 3, 1<<20)
	if err != nil || len(got) != 3 || got[0].Offset != 5 || next != 8 {
		t.Fatalf("read from 5: %+v next %d %v", got, next, err)
	}
}

// TestSegmentBytesMinimum: segment_bytes below 1 MiB (Kafka 4.0's minimum) is refused
// by Create and UpdateConfig, naming the bound.
func TestSegmentBytesMinimum(t *testing.T) {
	s, err := Open(t.TempDir(), Options{RetentionInterval: -1}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, v := range []int64{14, 1000, MinSegmentBytes - 1} {
		_, _, err := s.Create("seg", ChannelConfig{SegmentBytes: v}, false)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "1048576") {
			t.Fatalf("segment_bytes %d: %v", v, err)
		}
	}
	l := mustCreate(t, s, "seg", ChannelConfig{SegmentBytes: MinSegmentBytes})
	if err := l.UpdateConfig(ChannelConfig{SegmentBytes: 14}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("update to 14: %v", err)
	}
	if got := l.Config().SegmentBytes; got != MinSegmentBytes {
		t.Fatalf("segment_bytes %d after a refused update", got)
	}
}

// TestMidSegmentCorruptionFences: a bit flip in the middle of the active segment is
// not a torn tail: nothing is truncated, that channel is fenced with an error naming
// the file and position, other channels keep working, and the fenced one can be deleted.
func TestMidSegmentCorruptionFences(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	a := mustCreate(t, s, "a", ChannelConfig{})
	b := mustCreate(t, s, "b", ChannelConfig{})
	var pos2 int64
	for i := 0; i < 5; i++ {
		if i == 2 {
			pos2 = a.active.size.Load()
		}
		mustAppend(t, a, kbatch(t, batchOpt{}, "x", "y"))
	}
	mustAppend(t, b, kbatch(t, batchOpt{}, "b"))
	seg := a.active.path
	_ = s.Close()
	st, _ := os.Stat(seg)
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x7f}, pos2+batchHeaderLen+3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	m := NewMetrics(nil)
	s, err = Open(dir, Options{RetentionInterval: -1, Metrics: m}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("open must not fail for one corrupt channel: %v", err)
	}
	defer s.Close()
	_, err = s.Get("a")
	if !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), seg) || !strings.Contains(err.Error(), "byte") {
		t.Fatalf("get fenced channel: %v", err)
	}
	if st2, _ := os.Stat(seg); st2.Size() != st.Size() {
		t.Fatalf("segment truncated from %d to %d bytes", st.Size(), st2.Size())
	}
	if got := testutil.ToFloat64(m.TailTruncations); got != 0 {
		t.Fatalf("truncations %v", got)
	}
	if _, _, err := s.Create("a", ChannelConfig{}, true); !errors.Is(err, ErrStorage) {
		t.Fatalf("create over fenced channel: %v", err)
	}
	b, err = s.Get("b")
	if err != nil || len(readAll(t, b, 0)) != 1 {
		t.Fatalf("other channel: %v", err)
	}
	if err := s.Delete("a", false); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "a", ChannelConfig{})
}

// TestReadAfterDeleteIsNotFound: a handle to a deleted channel reads ErrNotFound (so
// long polls woken by the delete answer CHANNEL_NOT_FOUND instead of waiting on).
func TestReadAfterDeleteIsNotFound(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	l := mustCreate(t, s, "gone", ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{}, "a"))
	changed := l.Changed()
	if err := s.Delete("gone", false); err != nil {
		t.Fatal(err)
	}
	<-changed // the delete wakes long polls
	if _, err := l.ReadRaw(1, 1<<20); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read raw after delete: %v", err)
	}
	if _, _, err := l.ReadRecords(0, 10, 1<<20); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read records after delete: %v", err)
	}
	l2 := mustCreate(t, s, "other", ChannelConfig{})
	_ = s.Close()
	if _, err := l2.ReadRaw(0, 1<<20); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after shutdown: %v", err)
	}
}

// TestOpenWaitsForDyingLockHolder: Open waits (bounded) for a LOCK still held, as by
// a process killed with SIGKILL that the kernel has not finished tearing down.
func TestOpenWaitsForDyingLockHolder(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	_ = s.Close()
	held, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	type result struct {
		s   *Store
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Open(dir, Options{RetentionInterval: -1, LockWait: time.Minute}, zap.New(core))
		done <- result{s, err}
	}()
	for logs.FilterMessage("data dir lock is held; waiting for the holder to exit").Len() == 0 {
		select {
		case r := <-done:
			t.Fatalf("open did not wait for the lock: %v", r.err)
		default:
			runtime.Gosched()
		}
	}
	_ = held.Close() // the holder dies
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = r.s.Close()
}

// BenchmarkCheckFrame: append-time validation of a 100-record batch (~16 KB of
// values), uncompressed (parsed in place) and zstd (pooled buffers and decoders).
func BenchmarkCheckFrame(b *testing.B) {
	vals := make([]string, 100)
	for i := range vals {
		vals[i] = strings.Repeat("v", 160)
	}
	t := &testing.T{}
	for name, c := range map[string]kgo.CompressionCodec{"none": {}, "zstd": kgo.ZstdCompression(), "lz4": kgo.Lz4Compression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression()} {
		batch := kbatch(t, batchOpt{codec: c}, vals...)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(batch)))
			for i := 0; i < b.N; i++ {
				if _, err := checkFrame(batch, decompressLimit(DefaultMaxMessageBytes)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
