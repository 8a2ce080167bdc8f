package store

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
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

// BenchmarkAppendChannels measures durable appends by 64 parallel producers, each to
// its own channel of 64 (a Kafka producer's many-partition produce), of batches of 16
// x 1 KiB records (bandwidth: WAL mode writes every byte twice, WAL and segment) and of
// one 100-byte record (fsync-bound), with each channel fsyncing its own segment
// (wal=false, the default) and with the node write-ahead log whose fsyncs all channels
// share (wal=true, --wal). Compare the two in one farm-bench call:
//
//	go test -c -o /tmp/store.test ./internal/store/
//	farm-bench --vs '/tmp/store.test -test.run XXX -test.bench AppendChannels/batch=1x100B/wal=false -test.benchtime 20000x' -- \
//	  /tmp/store.test -test.run XXX -test.bench AppendChannels/batch=1x100B/wal=true -test.benchtime 20000x
func BenchmarkAppendChannels(b *testing.B) {
	for _, shape := range []struct {
		name string
		n    int
		size int
	}{{"16x1KiB", 16, 1024}, {"1x100B", 1, 100}} {
		for _, walMode := range []bool{false, true} {
			b.Run(fmt.Sprintf("batch=%s/wal=%v", shape.name, walMode), func(b *testing.B) {
				benchAppendChannels(b, walMode, shape.n, shape.size)
			})
		}
	}
}

func benchAppendChannels(b *testing.B, walMode bool, records, size int) {
	s, err := Open(b.TempDir(), Options{RetentionInterval: -1, WAL: walMode}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const channels = 64
	logs := make([]*Log, channels)
	for i := range logs {
		if logs[i], _, err = s.Create(fmt.Sprintf("bench-%d", i), ChannelConfig{}, false); err != nil {
			b.Fatal(err)
		}
	}
	vals := make([]string, records)
	for i := range vals {
		vals[i] = strings.Repeat("v", size)
	}
	batch := kbatch(&testing.T{}, batchOpt{}, vals...)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.SetParallelism((channels + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l := logs[int(next.Add(1)-1)%channels]
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
