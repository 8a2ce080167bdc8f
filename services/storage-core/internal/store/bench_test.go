package store

import (
	"strings"
	"testing"

	"go.uber.org/zap"
)

// BenchmarkAppendBatches measures durable appends (fsync=always, group commit) of
// 16 x 1 KiB-record batches from parallel producers to one channel. Compare with
// `dd if=/dev/zero of=f bs=16k count=N oflag=dsync` for the disk's own figure.
func BenchmarkAppendBatches(b *testing.B) {
	s, err := Open(b.TempDir(), Options{RetentionInterval: -1}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, _, err := s.Create("bench", ChannelConfig{}, false)
	if err != nil {
		b.Fatal(err)
	}
	vals := make([]string, 16)
	for i := range vals {
		vals[i] = strings.Repeat("v", 1024)
	}
	t := &testing.T{}
	batch := kbatch(t, batchOpt{}, vals...)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, len(batch))
		for pb.Next() {
			copy(buf, batch)
			if _, err := l.AppendBatches(buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReadRaw measures Fetch-style raw reads of 1 MiB from a filled channel.
func BenchmarkReadRaw(b *testing.B) {
	s, err := Open(b.TempDir(), Options{RetentionInterval: -1, FsyncInterval: 1 << 40}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, _, err := s.Create("bench", ChannelConfig{}, false)
	if err != nil {
		b.Fatal(err)
	}
	vals := make([]string, 16)
	for i := range vals {
		vals[i] = strings.Repeat("v", 1024)
	}
	batch := kbatch(&testing.T{}, batchOpt{}, vals...)
	for i := 0; i < 2000; i++ {
		if _, err := l.AppendBatches(append([]byte(nil), batch...)); err != nil {
			b.Fatal(err)
		}
	}
	hw := l.HighWatermark()
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	off := int64(0)
	for i := 0; i < b.N; i++ {
		raw, err := l.ReadRaw(off, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		off += int64(len(raw) / len(batch) * 16)
		if off >= hw {
			off = 0
		}
	}
}

// BenchmarkAppendWritePhase measures the write phase of appends (validation,
// idempotence, offsets, pwrite) without waiting for fsync (interval mode), so CPU
// costs on the append path show without the disk's noise.
func BenchmarkAppendWritePhase(b *testing.B) {
	s, err := Open(b.TempDir(), Options{RetentionInterval: -1, FsyncInterval: 1 << 40}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, _, err := s.Create("bench", ChannelConfig{}, false)
	if err != nil {
		b.Fatal(err)
	}
	vals := make([]string, 16)
	for i := range vals {
		vals[i] = strings.Repeat("v", 64)
	}
	batch := kbatch(&testing.T{}, batchOpt{}, vals...)
	buf := make([]byte, len(batch))
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		copy(buf, batch)
		if _, err := l.AppendBatches(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadRecords measures native decoded reads (Read, Subscribe) of 1000
// records from a filled channel.
func BenchmarkReadRecords(b *testing.B) {
	s, err := Open(b.TempDir(), Options{RetentionInterval: -1, FsyncInterval: 1 << 40}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, _, err := s.Create("bench", ChannelConfig{}, false)
	if err != nil {
		b.Fatal(err)
	}
	vals := make([]string, 16)
	for i := range vals {
		vals[i] = strings.Repeat("v", 100)
	}
	batch := kbatch(&testing.T{}, batchOpt{}, vals...)
	for i := 0; i < 2000; i++ {
		if _, err := l.AppendBatches(append([]byte(nil), batch...)); err != nil {
			b.Fatal(err)
		}
	}
	hw := l.HighWatermark()
	b.ReportAllocs()
	b.ResetTimer()
	off := int64(0)
	for i := 0; i < b.N; i++ {
		recs, next, err := l.ReadRecords(off, 1000, 1<<20)
		if err != nil || len(recs) == 0 {
			b.Fatal(err, len(recs))
		}
		off = next
		if off >= hw {
			off = 0
		}
	}
}
