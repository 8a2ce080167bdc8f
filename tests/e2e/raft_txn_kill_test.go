package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnOutcome is what a transactional producer was told of one transaction.
type txnOutcome int

const (
	txnCommitted txnOutcome = iota // EndTransaction(commit) succeeded
	txnAborted                     // aborted, and the client was told so
	txnUnknown                     // an error left the outcome to the coordinator
)

// TestRaftKafkaTransactionsUnderLeaderKills: a kgo transactional producer runs at least
// 16 transactions of 9 records over 3 partitions (every fourth aborted) on a raft-mode
// storage cluster while a node (half the time a partition's leader) is SIGKILLed and
// restarted again and again, so kills land in produces, in EndTxn and between a
// transaction's markers. A transaction whose EndTransaction failed is left to the
// coordinator and the client replaced (which fences it); one that outlives its 20 s
// timeout while produces wait out elections is aborted by the coordinator's sweep with
// the epoch bumped, so its producer is fenced, as in Kafka. Afterwards every
// partition's last stable offset reaches its high watermark (no marker was lost), and
// read_committed sees each transaction all or nothing: every record of a committed one
// exactly once, none of an aborted one.
func TestRaftKafkaTransactionsUnderLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	topic := topicName("raft-txn-kill")
	// minKills kills, one every 0.5-1.5 s after the last restart, and at least minTxns
	// transactions, on until the kills are over.
	const partitions, minTxns, minKills, perTxn = 3, 16, 5, 9
	s, leader := startRaftStack(t, topic, partitions)
	tid := topicName("raft-txn-kill-id")
	open := func() *kgo.Client {
		return newClient(t, s.KafkaAddrs, kgo.TransactionalID(tid), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second),
			kgo.RequestTimeoutOverhead(5*time.Second))
	}
	outcomes := make(chan txnOutcome, 200)
	var enough atomic.Bool
	go func() {
		defer close(outcomes)
		tx := open()
		for n := 0; !enough.Load() && n < 200; n++ {
			out, err := runKillTxn(tx, topic, n, perTxn, partitions, n%4 != 3)
			if out == txnAborted && err != nil {
				t.Logf("transaction %d: %v", n, err)
			} else if err != nil {
				t.Logf("transaction %d: %v (outcome left to the coordinator)", n, err)
				tx.Close()
				tx = open()
			}
			outcomes <- out
		}
	}()
	var got []txnOutcome
	kills := 0
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	pause := func() time.Duration { return time.Duration(500+rng.IntN(1000)) * time.Millisecond }
	next := time.NewTimer(pause())
	defer next.Stop()
	for done := false; !done; {
		select {
		case o, ok := <-outcomes:
			if !ok {
				done = true
				break
			}
			got = append(got, o)
			enough.Store(len(got) >= minTxns && kills >= minKills)
			continue
		case <-next.C:
		}
		if kills >= minKills {
			continue // the last transactions run on a whole cluster
		}
		victim := leader(channel.KafkaPartition(topic, rng.Int32N(partitions)))
		if rng.IntN(2) == 0 {
			// As often any node: it may be a follower, or the one restarted last.
			victim = s.Storages[rng.IntN(len(s.Storages))]
		}
		if err := s.Kill(victim.Name, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		kills++
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
		if err := s.Restart(context.Background(), victim.Name); err != nil {
			t.Fatal(err)
		}
		enough.Store(len(got) >= minTxns && kills >= minKills)
		next.Reset(pause())
	}
	t.Logf("%d leader kills over %d transactions; outcomes %v", kills, len(got), got)
	if len(got) < minTxns || kills < minKills {
		t.Fatalf("%d transactions ran with %d kills, want at least %d with %d", len(got), kills, minTxns, minKills)
	}

	waitStableAtEnd(t, newAdmin(t, s.KafkaAddrs), topic, partitions, 60*time.Second)

	c := newClient(t, s.KafkaAddrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := map[string]int{}
	wantMin := 0
	for _, o := range got {
		if o == txnCommitted {
			wantMin += perTxn
		}
	}
	ctx := ctxT(t, 60*time.Second)
	for n := 0; n < wantMin; {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read_committed read %d of at least %d: %v", n, wantMin, err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; n++ })
	}
	quiet, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.PollFetches(quiet).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	for n, o := range got {
		present := 0
		for i := 0; i < perTxn; i++ {
			v := txnValue(n, i)
			if seen[v] > 1 {
				t.Fatalf("value %s read %d times", v, seen[v])
			}
			present += seen[v]
			delete(seen, v)
		}
		switch {
		case present != 0 && present != perTxn:
			t.Fatalf("transaction %d (outcome %d): %d of its %d records are visible, want all or none", n, o, present, perTxn)
		case o == txnCommitted && present != perTxn:
			t.Fatalf("committed transaction %d: %d of %d records visible", n, present, perTxn)
		case o == txnAborted && present != 0:
			t.Fatalf("aborted transaction %d: %d records visible", n, present)
		}
	}
	if len(seen) != 0 {
		t.Fatalf("read_committed saw values no transaction wrote: %v", seen)
	}
	// Each partition's replicas are byte-identical up to its end, markers, epochs and
	// producer state included.
	ends, err := newAdmin(t, s.KafkaAddrs).ListEndOffsets(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[channel.KafkaPartition(topic, o.Partition)] = o.Offset })
	if len(want) != partitions {
		t.Fatalf("end offsets of %d partitions, want %d", len(want), partitions)
	}
	checkStackReplicas(t, s, want)
}

func txnValue(n, i int) string { return fmt.Sprintf("k%02d-%d", n, i) }

// runKillTxn runs transaction n on tx: perTxn records round-robin over the partitions,
// then commit or abort. An error before EndTransaction aborts; any error returns
// txnUnknown unless the abort was acknowledged (txnAborted, with the produce error).
func runKillTxn(tx *kgo.Client, topic string, n, perTxn int, partitions int32, commit bool) (txnOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := tx.BeginTransaction(); err != nil {
		return txnUnknown, err
	}
	for i := 0; i < perTxn; i++ {
		r := &kgo.Record{Topic: topic, Value: []byte(txnValue(n, i)), Partition: int32(i) % partitions}
		if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
			if aerr := tx.AbortBufferedRecords(ctx); aerr == nil {
				if eerr := tx.EndTransaction(ctx, kgo.TryAbort); eerr == nil {
					return txnAborted, fmt.Errorf("aborted after a produce error: %w", err)
				}
			}
			return txnUnknown, err
		}
	}
	if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return txnUnknown, err
	}
	if commit {
		return txnCommitted, nil
	}
	return txnAborted, nil
}
