package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// TestTxnGroupCommitKills: 32 transactional producers (kgo) run short transactions
// over three partitions, so that EndTxn decisions and finishes go in the coordinator's
// batches, while the coordinator the gateway uses (one of two on the database) is
// killed with SIGKILL, mid-batch, then storage-core, then the coordinator again, each
// started again after its kill. The storage-core kill makes whole WriteTxnMarkers
// calls of finish batches fail (their rows stay Prepare*, finished later) and
// produces fail. read_committed must then hold every transaction whose commit was
// answered, exactly once per partition, none that the producer aborted, and no
// partition may be left with an open transaction (the closing sentinel is readable).
func TestTxnGroupCommitKills(t *testing.T) {
	runGroupCommitKills(t, stack.Coordinator, stack.StorageCore, stack.Coordinator)
}

// runGroupCommitKills runs the producers of TestTxnGroupCommitKills while
// each victim in turn is killed with SIGKILL and started again.
func runGroupCommitKills(t *testing.T, victims ...string) {
	s := stack.StartT(t, stack.Options{Coordinators: 2})
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txngc-kill")
	const parts = 3
	createTopic(t, adm, topic, parts, nil)
	ctx := ctxT(t, 5*time.Minute)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	const producers = 32
	type told struct {
		committed, aborted, unknown map[string]bool
	}
	var (
		mu     sync.Mutex
		result = told{map[string]bool{}, map[string]bool{}, map[string]bool{}}
		ends   atomic.Int64
		wg     sync.WaitGroup
	)
	mark := func(m map[string]bool, v string) {
		mu.Lock()
		m[v] = true
		mu.Unlock()
	}
	for i := 0; i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tid := fmt.Sprintf("%s-p%02d", topic, i)
			newProd := func() *kgo.Client {
				cl, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaAddrs...), kgo.TransactionalID(tid),
					kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(60*time.Second),
					kgo.RequiredAcks(kgo.AllISRAcks()))
				if err != nil {
					panic(err)
				}
				return cl
			}
			cl := newProd()
			defer func() { cl.Close() }()
			for n := 0; runCtx.Err() == nil; n++ {
				v := fmt.Sprintf("%s-%d", tid, n)
				if err := cl.BeginTransaction(); err != nil {
					cl.Close()
					cl = newProd()
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				var perr error
				for p := int32(0); p < parts && perr == nil; p++ {
					perr = cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).FirstErr()
				}
				commit := perr == nil && n%4 != 3
				end := kgo.TryAbort
				if commit {
					end = kgo.TryCommit
				} else if perr != nil {
					_ = cl.AbortBufferedRecords(pctx)
				}
				err := cl.EndTransaction(pctx, end)
				cancel()
				ends.Add(1)
				switch {
				case !commit:
					// Never asked to commit: never visible, whatever the answer.
					mark(result.aborted, v)
				case err == nil:
					mark(result.committed, v)
				default:
					mark(result.unknown, v)
				}
				if err != nil {
					// A new instance (InitProducerId fences the old one).
					cl.Close()
					cl = newProd()
				}
			}
		}()
	}
	waitFor(t, time.Minute, "transactions ending", func() bool { return ends.Load() >= 200 })
	for _, victim := range victims {
		before := ends.Load()
		if err := s.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s killed after %d ends; %d transactions left between decision and completion",
			victim, before, prepared(t, s))
		time.Sleep(500 * time.Millisecond)
		if err := s.Restart(ctxT(t, time.Minute), victim); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "transactions ending after the restart", func() bool { return ends.Load() >= before+200 })
	}
	stop()
	wg.Wait()
	closer := txnProducer(t, s.KafkaAddrs, topicName("tid-done"))
	runTxn(t, closer, topic, parts, true, "done", "done", "done")
	got := consumeUntil(t, s.KafkaAddrs, topic, parts, true, "done")
	mu.Lock()
	defer mu.Unlock()
	for p := int32(0); p < parts; p++ {
		seen := map[string]int{}
		for _, v := range got[p] {
			seen[v]++
		}
		for v, c := range seen {
			switch {
			case c != 1:
				t.Errorf("partition %d: %s read %d times", p, v, c)
			case result.aborted[v]:
				t.Errorf("partition %d: aborted %s is visible to read_committed", p, v)
			case !result.committed[v] && !result.unknown[v]:
				t.Errorf("partition %d: %s visible but never ended", p, v)
			}
		}
		for v := range result.committed {
			if seen[v] != 1 {
				t.Errorf("partition %d: committed %s read %d times, want 1", p, v, seen[v])
			}
		}
	}
	if n := prepared(t, s); n != 0 {
		t.Errorf("%d transactions still Prepare* at the end", n)
	}
	t.Logf("%d committed, %d aborted, %d unknown (EndTxn failed) transactions", len(result.committed), len(result.aborted), len(result.unknown))
}

// prepared counts the stack's transactions in PrepareCommit or PrepareAbort.
func prepared(t *testing.T, s *stack.Stack) int {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	conn, err := pgx.Connect(ctx, s.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM transactions WHERE state IN ('PrepareCommit', 'PrepareAbort')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
