package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produced is what a produce promise reported for one record.
type produced struct {
	partition int32
	offset    int64
}

// TestIdempotentKeyed100k: kgo's default (idempotent) producer writes 100,000 keyed
// records to 6 partitions; every record is read back exactly once, on the partition
// the client chose, at the offset the produce promise reported, in produce order.
func TestIdempotentKeyed100k(t *testing.T) {
	const n = 100_000
	s := sharedStack(t)
	topic := topicName("idem")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 6, nil)

	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.ProduceRequestTimeout(30*time.Second))
	ctx := ctxT(t, 3*time.Minute)
	var (
		mu     sync.Mutex
		acks   = make([]produced, n)
		errs   []error
		wg     sync.WaitGroup
		values = func(i int) string { return "value-" + strconv.Itoa(i) + "-0123456789abcdef0123456789abcdef" }
	)
	for i := 0; i < n; i++ {
		i := i
		wg.Add(1)
		r := &kgo.Record{Key: fmt.Appendf(nil, "key-%d", i%5000), Value: []byte(values(i))}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("record %d: %w", i, err))
				return
			}
			acks[i] = produced{r.Partition, r.Offset}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d records failed; first: %v", len(errs), errs[0])
	}

	recs := consumeAll(t, s.KafkaAddrs, topic)
	if len(recs) != n {
		t.Errorf("read %d records, want %d", len(recs), n)
	}
	byPart := checkDense(t, recs)
	if len(byPart) != 6 {
		t.Errorf("records on %d partitions, want 6", len(byPart))
	}
	counts := map[int32]int{}
	for p, rs := range byPart {
		counts[p] = len(rs)
	}
	t.Logf("read back %d records; per partition: %v", len(recs), counts)
	seen := make([]bool, n)
	keyPart := map[string]int32{}
	for p, rs := range byPart {
		last := -1
		for _, r := range rs {
			var i int
			if _, err := fmt.Sscanf(string(r.Value), "value-%d-", &i); err != nil || i < 0 || i >= n || string(r.Value) != values(i) {
				t.Fatalf("partition %d offset %d: unexpected value %q", p, r.Offset, r.Value)
			}
			if seen[i] {
				t.Fatalf("record %d read twice (again at %d/%d)", i, p, r.Offset)
			}
			seen[i] = true
			if a := acks[i]; a.partition != p || a.offset != r.Offset {
				t.Fatalf("record %d: produce promise said %d/%d, read at %d/%d", i, a.partition, a.offset, p, r.Offset)
			}
			if i <= last {
				t.Fatalf("partition %d: record %d at offset %d after record %d: not in produce order", p, i, r.Offset, last)
			}
			last = i
			if kp, ok := keyPart[string(r.Key)]; ok && kp != p {
				t.Fatalf("key %q on partitions %d and %d", r.Key, kp, p)
			}
			keyPart[string(r.Key)] = p
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("record %d (acked at %d/%d) never read back", i, acks[i].partition, acks[i].offset)
		}
	}
}
