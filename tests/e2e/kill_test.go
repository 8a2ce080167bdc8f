package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// TestKillStorageDuringProduce: storage-core is killed with SIGKILL while a kgo
// idempotent producer writes 50,000 records, and started again about a second later.
// Every record acknowledged before the kill is there exactly once afterwards, the
// producer goes on (all records end up acknowledged, with kgo's default infinite record
// retries), and no record is stored twice.
func TestKillStorageDuringProduce(t *testing.T) { killDuringProduce(t, stack.StorageCore) }

// TestKillGatewayDuringProduce: the same with the (only) kafka-gateway killed and
// restarted on its port: idempotence state lives in storage-core, so the producer's
// retries after reconnecting are deduplicated there.
func TestKillGatewayDuringProduce(t *testing.T) { killDuringProduce(t, stack.KafkaGateway+"-0") }

func killDuringProduce(t *testing.T, victim string) {
	killDuringProduceWith(t, victim, killPlan{})
}

// killPlan varies killDuringProduce: the stack, partitions (default 3), records
// (default 50,000) and their value padding, an extra condition to reach before the
// kill, what to do to the files while the victim is down and after the checks.
type killPlan struct {
	opts       stack.Options
	partitions int32
	n          int
	pad        int
	ready      func(s *stack.Stack) bool
	readyWhat  string
	whileDown  func(t *testing.T, s *stack.Stack)
	after      func(t *testing.T, s *stack.Stack)
	// pace, when set, is a pause after every 100 records handed to the producer, so
	// the run outlasts ready.
	pace time.Duration
	// clientOpts are added to the producer's options.
	clientOpts []kgo.Opt
}

func killDuringProduceWith(t *testing.T, victim string, plan killPlan) {
	n := plan.n
	if n == 0 {
		n = 50_000
	}
	if plan.partitions == 0 {
		plan.partitions = 3
	}
	s := stack.StartT(t, plan.opts)
	topic := topicName("kill")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, plan.partitions, nil)
	pad := strings.Repeat("p", plan.pad)

	cl := newClient(t, s.KafkaAddrs, append([]kgo.Opt{kgo.DefaultProduceTopic(topic),
		kgo.ProduceRequestTimeout(5 * time.Second),
		kgo.RetryTimeout(2 * time.Minute),
		kgo.MaxBufferedRecords(2000)}, plan.clientOpts...)...)
	ctx := ctxT(t, 4*time.Minute)

	var (
		mu         sync.Mutex
		acked      = map[int]produced{}
		failed     = map[int]error{}
		ackedCount atomic.Int64
		finished   atomic.Int64
	)
	value := func(i int) string { return "kill-" + strconv.Itoa(i) + pad }
	go func() {
		for i := 0; i < n; i++ {
			i := i
			if plan.pace > 0 && i%100 == 99 {
				time.Sleep(plan.pace) // the scenario's produce rate
			}
			cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%997), Value: []byte(value(i))}, func(r *kgo.Record, err error) {
				defer finished.Add(1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed[i] = err
					return
				}
				acked[i] = produced{r.Partition, r.Offset}
				ackedCount.Add(1)
			})
		}
	}()

	waitFor(t, 60*time.Second, "5,000 acknowledged records before the kill", func() bool { return ackedCount.Load() >= 5000 })
	if plan.ready != nil {
		waitFor(t, 2*time.Minute, plan.readyWhat, func() bool { return plan.ready(s) })
	}
	if err := s.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", victim, err)
	}
	mu.Lock()
	ackedBeforeKill := make(map[int]produced, len(acked))
	for i, a := range acked {
		ackedBeforeKill[i] = a
	}
	mu.Unlock()
	t.Logf("%s killed with %d records acknowledged", victim, len(ackedBeforeKill))
	if len(ackedBeforeKill) == n {
		t.Fatalf("all %d records were acknowledged before the kill; the test needs a longer run", n)
	}

	if plan.whileDown != nil {
		plan.whileDown(t, s)
	}
	// Leave it down for a second (part of the scenario, not a readiness wait).
	time.Sleep(time.Second)
	ackedWhileDown := ackedCount.Load() - int64(len(ackedBeforeKill))
	restartCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Restart(restartCtx, victim); err != nil {
		t.Fatalf("restart %s: %v", victim, err)
	}
	t.Logf("%s restarted; %d acknowledgements arrived while it was down (responses in flight at the kill)", victim, ackedWhileDown)

	// The producer must finish on its own.
	waitFor(t, 3*time.Minute, "every produce promise to complete after the restart", func() bool { return finished.Load() == int64(n) })
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		for i, err := range failed {
			t.Errorf("record %d failed (of %d failed): %v", i, len(failed), err)
			break
		}
	}
	if len(acked) != n {
		t.Errorf("%d of %d records acknowledged", len(acked), n)
	}

	recs := consumeAll(t, s.KafkaAddrs, topic)
	checkDense(t, recs)
	count := map[string]int{}
	where := map[string]produced{}
	for _, r := range recs {
		count[string(r.Value)]++
		where[string(r.Value)] = produced{r.Partition, r.Offset}
	}
	var dups, lostBefore, lostAfter int
	for v, c := range count {
		if c > 1 {
			dups++
			if dups <= 3 {
				t.Errorf("value %q stored %d times", v, c)
			}
		}
	}
	for i := 0; i < n; i++ {
		v := value(i)
		a, ok := acked[i]
		if !ok {
			continue
		}
		if count[v] == 0 {
			if _, before := ackedBeforeKill[i]; before {
				lostBefore++
			} else {
				lostAfter++
			}
			continue
		}
		if w := where[v]; w != a {
			t.Errorf("record %d: acknowledged at %d/%d, stored at %d/%d", i, a.partition, a.offset, w.partition, w.offset)
		}
	}
	if dups > 0 || lostBefore > 0 || lostAfter > 0 {
		t.Fatalf("after kill -9: %d values duplicated, %d records acknowledged before the kill lost, %d acknowledged after it lost (stored %d records, %d distinct)", dups, lostBefore, lostAfter, len(recs), len(count))
	}
	if len(recs) != n {
		t.Errorf("stored %d records, want %d", len(recs), n)
	}
	if plan.after != nil {
		plan.after(t, s)
	}
}

// waitFor polls cond every 20 ms until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}
