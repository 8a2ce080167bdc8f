package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
)

// TestKillStoragePipelined: three idempotent kgo producers (acks=all; idempotent kgo
// keeps up to five produce requests in flight per broker; small batches) write while
// storage-core is killed with SIGKILL twice and started again. Afterwards every
// acknowledged record is stored exactly once at its acknowledged offset, offsets are
// contiguous, and the native Read of every partition serves the same records (no torn
// batch).
func TestKillStoragePipelined(t *testing.T) {
	const (
		producers = 3
		n         = 12_000 // per producer
		parts     = 4
	)
	s := stack.StartT(t, stack.Options{})
	topic := topicName("killpipe")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, parts, nil)
	ctx := ctxT(t, 5*time.Minute)

	var (
		mu       sync.Mutex
		acked    = map[string]produced{}
		failed   = map[string]error{}
		ackCount atomic.Int64
		finished atomic.Int64
	)
	for p := 0; p < producers; p++ {
		cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchMaxBytes(2048),
			kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ProduceRequestTimeout(5*time.Second),
			kgo.RetryTimeout(3*time.Minute),
			kgo.MaxBufferedRecords(3000))
		go func() {
			for i := 0; i < n; i++ {
				v := "p" + strconv.Itoa(p) + "-" + strconv.Itoa(i)
				cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%101), Value: []byte(v)}, func(r *kgo.Record, err error) {
					defer finished.Add(1)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed[v] = err
						return
					}
					acked[v] = produced{r.Partition, r.Offset}
					ackCount.Add(1)
				})
			}
		}()
	}
	for round, at := range []int64{3000, 15000} {
		waitFor(t, 2*time.Minute, fmt.Sprintf("%d acknowledged records before kill %d", at, round+1), func() bool { return ackCount.Load() >= at })
		if err := s.Kill(stack.StorageCore, syscall.SIGKILL); err != nil {
			t.Fatalf("kill storage-core: %v", err)
		}
		t.Logf("kill %d with %d records acknowledged", round+1, ackCount.Load())
		time.Sleep(500 * time.Millisecond) // down for a while: part of the scenario
		rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := s.Restart(rctx, stack.StorageCore)
		cancel()
		if err != nil {
			t.Fatalf("restart storage-core: %v", err)
		}
	}
	waitFor(t, 4*time.Minute, "every produce to complete", func() bool { return finished.Load() == producers*n })
	mu.Lock()
	defer mu.Unlock()
	for v, err := range failed {
		t.Errorf("record %s failed (%d failed): %v", v, len(failed), err)
		break
	}

	recs := consumeAll(t, s.KafkaAddrs, topic)
	byPart := checkDense(t, recs)
	count := map[string]int{}
	for _, r := range recs {
		v := string(r.Value)
		count[v]++
		if a, ok := acked[v]; ok && (a.partition != r.Partition || a.offset != r.Offset) {
			t.Errorf("%s acknowledged at %d/%d, stored at %d/%d", v, a.partition, a.offset, r.Partition, r.Offset)
		}
	}
	lost, dups := 0, 0
	for v := range acked {
		if count[v] == 0 {
			lost++
		}
	}
	for _, c := range count {
		if c > 1 {
			dups++
		}
	}
	if lost > 0 || dups > 0 || len(recs) != producers*n {
		t.Fatalf("%d acknowledged records lost, %d values stored more than once, %d stored of %d", lost, dups, len(recs), producers*n)
	}

	// The native Read serves the same records.
	st := storageClient(t, s.StorageAddr)
	for p := int32(0); p < parts; p++ {
		var got []string
		for seq := int64(1); ; {
			resp, err := st.Read(ctxT(t, 20*time.Second), &storagev1.ReadRequest{Channel: channel.KafkaPartition(topic, p), FromSequence: seq, MaxRecords: 10000})
			if err != nil {
				t.Fatalf("native Read partition %d at %d: %v", p, seq, err)
			}
			for _, r := range resp.Records {
				got = append(got, string(r.Value))
			}
			if resp.NextSequence > resp.HighWatermark || len(resp.Records) == 0 {
				break
			}
			seq = resp.NextSequence
		}
		if len(got) != len(byPart[p]) {
			t.Fatalf("native Read partition %d: %d records, Kafka fetch %d", p, len(got), len(byPart[p]))
		}
		for i, r := range byPart[p] {
			if got[i] != string(r.Value) {
				t.Fatalf("native Read partition %d record %d = %q, Kafka fetch %q", p, i, got[i], r.Value)
			}
		}
	}
}
