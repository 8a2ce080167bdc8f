package e2e

import (
	"context"
	"errors"
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

// TestTxnGroupTransactSession: a consume-transform-produce chain over three topics
// (in -> mid -> out, 3 partitions each) with two kgo GroupTransactSession stages, each
// reading read_committed and committing its group's offsets inside its transaction.
// The output holds every input record exactly once, in order per partition.
func TestTxnGroupTransactSession(t *testing.T) {
	runTxnChain(t, 10_000, false)
}

// TestTxnGroupTransactSessionKills: the same chain with 100,000 records while one
// kafka-gateway replica (of two) and then the coordinator are killed with SIGKILL
// and started again.
func TestTxnGroupTransactSessionKills(t *testing.T) {
	runTxnChain(t, 100_000, true)
}

const txnChainPartitions = 3

func runTxnChain(t *testing.T, n int, kills bool) {
	var s *stack.Stack
	if kills {
		s = stack.StartT(t, stack.Options{Gateways: 2})
	} else {
		s = sharedStack(t)
	}
	adm := newAdmin(t, s.KafkaAddrs)
	in, mid, out := topicName("chain-in"), topicName("chain-mid"), topicName("chain-out")
	for _, tp := range []string{in, mid, out} {
		createTopic(t, adm, tp, txnChainPartitions, nil)
	}

	// Input: record i goes to partition i%3 with value "<p>-<seq within p>".
	prod := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(20_000))
	ctx := ctxT(t, 15*time.Minute)
	var perr atomic.Value
	for i := 0; i < n; i++ {
		p := int32(i % txnChainPartitions)
		v := fmt.Sprintf("%d-%06d", p, i/txnChainPartitions)
		prod.Produce(ctx, &kgo.Record{Topic: in, Partition: p, Value: []byte(v)}, func(_ *kgo.Record, err error) {
			if err != nil {
				perr.Store(err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("flush input: %v", err)
	}
	if err, _ := perr.Load().(error); err != nil {
		t.Fatalf("produce input: %v", err)
	}

	// Two stages, each one transactional group member.
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var moved [2]atomic.Int64
	errs := make(chan error, 2)
	for i, st := range []struct{ from, to string }{{in, mid}, {mid, out}} {
		i, st := i, st
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := txnStage(runCtx, s.KafkaAddrs, "stage-"+st.to, st.from, st.to, topicName("tid-"+strconv.Itoa(i)), &moved[i]); err != nil {
				errs <- fmt.Errorf("stage %d: %w", i, err)
			}
		}()
	}
	defer func() {
		stop()
		wg.Wait()
	}()

	if kills {
		waitFor(t, 5*time.Minute, "a third of the records through the chain", func() bool { return moved[1].Load() >= int64(n/3) })
		victim := stack.KafkaGateway + "-1"
		if err := s.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s: %v", victim, err)
		}
		t.Logf("%s killed at %d records through", victim, moved[1].Load())
		if err := s.Restart(ctxT(t, time.Minute), victim); err != nil {
			t.Fatalf("restart %s: %v", victim, err)
		}
		waitFor(t, 5*time.Minute, "two thirds of the records through the chain", func() bool { return moved[1].Load() >= int64(2*n/3) })
		if err := s.Kill(stack.Coordinator, syscall.SIGKILL); err != nil {
			t.Fatalf("kill coordinator: %v", err)
		}
		t.Logf("coordinator killed at %d records through", moved[1].Load())
		if err := s.Restart(ctxT(t, time.Minute), stack.Coordinator); err != nil {
			t.Fatalf("restart coordinator: %v", err)
		}
	}

	// Every input record reaches out (committed); then a sentinel closes each
	// partition, so the check below reads everything committed before it.
	got := map[int32][]string{}
	cons := newClient(t, s.KafkaAddrs, kgo.ConsumeTopics(out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	total := 0
	deadline := time.Now().Add(10 * time.Minute)
	for total < n {
		select {
		case err := <-errs:
			t.Fatalf("%v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %d of %d records in the output (stages moved %d, %d)", total, n, moved[0].Load(), moved[1].Load())
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cons.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			total++
		})
	}
	stop()
	wg.Wait()
	closer := txnProducer(t, s.KafkaAddrs, topicName("tid-done"))
	runTxn(t, closer, out, txnChainPartitions, true, "done", "done", "done")
	closed := map[int32]bool{}
	rctx := ctxT(t, 2*time.Minute)
	for len(closed) < txnChainPartitions {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("sentinels of %d of %d partitions read", len(closed), txnChainPartitions)
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case closed[r.Partition]:
			case string(r.Value) == "done":
				closed[r.Partition] = true
			default:
				got[r.Partition] = append(got[r.Partition], string(r.Value))
			}
		})
	}

	for p := int32(0); p < txnChainPartitions; p++ {
		vs := got[p]
		want := (n - int(p) + txnChainPartitions - 1) / txnChainPartitions
		if len(vs) != want {
			t.Errorf("partition %d: %d records, want %d", p, len(vs), want)
		}
		bad := 0
		for i, v := range vs {
			if w := fmt.Sprintf("%d-%06d", p, i); v != w {
				if bad++; bad <= 3 {
					t.Errorf("partition %d record %d is %q, want %q (duplicate, loss or reorder)", p, i, v, w)
				}
			}
		}
	}
}

// txnStage is one consume-transform-produce member: it moves every record of from
// into the same partition of to, in transactions of at most 500 records, committing the
// group's offsets in the transaction. It returns when ctx ends (nil) or on a fatal
// error.
func txnStage(ctx context.Context, addrs []string, group, from, to, tid string, moved *atomic.Int64) error {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(addrs...),
		kgo.TransactionalID(tid),
		kgo.TransactionTimeout(30*time.Second),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(from),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.SessionTimeout(groupSessionTimeout),
		kgo.FetchMaxBytes(1<<20),
	)
	if err != nil {
		return err
	}
	defer sess.Close()
	for ctx.Err() == nil {
		fs := sess.PollRecords(ctx, 500) // transactions of at most 500 records
		if ctx.Err() != nil {
			return nil
		}
		var recs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, &kgo.Record{Topic: to, Partition: r.Partition, Value: r.Value})
		})
		if len(recs) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var perr atomic.Value
		var pwg sync.WaitGroup
		for _, r := range recs {
			pwg.Add(1)
			sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
				defer pwg.Done()
				if err != nil {
					perr.Store(err)
				}
			})
		}
		pwg.Wait()
		end := kgo.TryCommit
		if err, _ := perr.Load().(error); err != nil {
			end = kgo.TryAbort
		}
		committed, err := sess.End(ctx, end)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && isRetriableEnd(err):
			continue
		case err != nil:
			return fmt.Errorf("end: %w", err)
		}
		if committed {
			moved.Add(int64(len(recs)))
		}
	}
	return nil
}

// isRetriableEnd reports whether an End error leaves the session usable (kgo aborts
// and the next poll re-reads from the committed offsets).
func isRetriableEnd(err error) bool {
	return !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "fenced")
}
