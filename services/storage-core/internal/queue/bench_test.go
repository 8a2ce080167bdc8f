package queue

import (
	"context"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap"
)

// BenchmarkReceiveAck measures leased-and-acked messages per second: receivers take
// batches of `batch` messages and ack them (each Receive and each Ack waits for its
// group-committed state write, fsync included).
func BenchmarkReceiveAck(b *testing.B) {
	for _, tc := range []struct{ batch, receivers int }{{1, 1}, {100, 1}, {100, 4}} {
		b.Run("batch="+strconv.Itoa(tc.batch)+"/receivers="+strconv.Itoa(tc.receivers), func(b *testing.B) {
			dir := b.TempDir()
			st, err := store.Open(filepath.Join(dir, "store"), store.Options{RetentionInterval: -1}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			m, err := Open(st, filepath.Join(dir, "queues.db"), Options{}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = m.Close(); _ = st.Close() }()
			src, _, _ := st.Create("gcp.t", store.ChannelConfig{}, false)
			q, _, err := m.Create("gcp.sub.s", Config{}, []Binding{{Source: "gcp.t"}}, false)
			if err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 256)
			for n := 0; n < b.N; {
				k := min(1000, b.N-n)
				recs := make([]store.NewRecord, k)
				for i := range recs {
					recs[i] = store.NewRecord{Value: value}
				}
				if _, _, err := src.Append(recs); err != nil {
					b.Fatal(err)
				}
				n += k
			}
			for q.log.HighWatermark() < int64(b.N) { // the binding's copy is not measured
				time.Sleep(time.Millisecond)
			}
			b.SetBytes(int64(len(value)))
			b.ResetTimer()
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := 0
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for r := 0; r < tc.receivers; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						mu.Lock()
						done := got >= b.N
						mu.Unlock()
						if done {
							return
						}
						ds, err := q.Receive(ctx, tc.batch, 0, 0, 100*time.Millisecond)
						if ctx.Err() != nil {
							return
						}
						if err != nil {
							b.Error(err)
							return
						}
						if len(ds) == 0 {
							continue
						}
						ids := make([]string, len(ds))
						for i := range ds {
							ids[i] = ds[i].AckID
						}
						if _, err := q.Ack(ids); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						got += len(ds)
						if got >= b.N {
							cancel() // the others may be waiting for messages that will not come
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkFillReceive measures the receive path of a Pub/Sub-like subscription: b.N
// 1 KiB records with Pub/Sub's reserved headers are published to a source log and
// copied by a binding into the queue's log (not measured), then received in batches
// of `batch` (as a StreamingPull with flow control asks for them) and acked, each
// fill loading what the receives made room for. With outstanding > 0 the acks lag as
// a client's do: messages are acked 100 at a time, oldest first, once more than
// outstanding are leased (the Go client's default flow control holds 1000). One op is
// one message; cpu-ns/msg is the process's CPU time (user + system, all threads:
// fill, lease, ack, state commits, GC) per message. Run with -benchtime=50000x.
func BenchmarkFillReceive(b *testing.B) {
	for _, tc := range []struct{ batch, outstanding int }{{20, 0}, {100, 0}, {1000, 0}, {20, 1000}} {
		name := "batch=" + strconv.Itoa(tc.batch)
		if tc.outstanding > 0 {
			name += "/outstanding=" + strconv.Itoa(tc.outstanding)
		}
		batch := tc.batch
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			st, err := store.Open(filepath.Join(dir, "store"), store.Options{RetentionInterval: -1}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			m, err := Open(st, filepath.Join(dir, "queues.db"), Options{MaintenanceInterval: -1}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = m.Close(); _ = st.Close() }()
			src, _, _ := st.Create("gcp.t", store.ChannelConfig{}, false)
			q, _, err := m.Create("gcp.sub.s", Config{}, []Binding{{Source: "gcp.t"}}, false)
			if err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 1024)
			for n := 0; n < b.N; {
				k := min(100, b.N-n) // a Pub/Sub client publish batch
				recs := make([]store.NewRecord, k)
				for i := range recs {
					recs[i] = store.NewRecord{Value: value, Headers: []store.Header{
						{Key: "_pubsub_message_id", Value: strconv.AppendInt(nil, int64(n+i+1), 10)},
						{Key: "_pubsub_publish_time", Value: []byte("2026-12-01T16:43:43.123456789Z")},
					}}
				}
				if _, _, err := src.Append(recs); err != nil {
					b.Fatal(err)
				}
				n += k
			}
			for q.log.HighWatermark() < int64(b.N) { // the binding's copy is not measured
				time.Sleep(time.Millisecond)
			}
			ctx := context.Background()
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			var held []string // leased, not acked yet
			ack := func(n int) {
				if _, err := q.Ack(held[:n]); err != nil {
					b.Fatal(err)
				}
				held = held[n:]
			}
			for got := 0; got < b.N; {
				ds, err := q.Receive(ctx, batch, 0, 0, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if len(ds) == 0 {
					b.Fatalf("no message after %d of %d", got, b.N)
				}
				for i := range ds {
					held = append(held, ds[i].AckID)
				}
				got += len(ds)
				if tc.outstanding == 0 {
					ack(len(held))
				}
				for len(held) > tc.outstanding && tc.outstanding > 0 {
					ack(min(100, len(held)))
				}
			}
			if len(held) > 0 {
				ack(len(held))
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/msg")
		})
	}
}

// cpuTime returns the process's CPU time (user + system) in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
