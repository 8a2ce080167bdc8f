package e2e

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnProducer returns a kgo transactional producer writing to the partition each
// record names (manual partitioner).
func txnProducer(t *testing.T, addrs []string, tid string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClient(t, addrs, append([]kgo.Opt{kgo.TransactionalID(tid), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(60 * time.Second), kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)...)
}

// runTxn produces the values (to partition i % partitions) in one transaction and
// ends it with commit or abort.
func runTxn(t *testing.T, cl *kgo.Client, topic string, partitions int, commit bool, values ...string) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("BeginTransaction: %v", err)
	}
	for i, v := range values {
		r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(v)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("transactional produce %s: %v", v, err)
		}
	}
	end := kgo.TryAbort
	if commit {
		end = kgo.TryCommit
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatalf("EndTransaction(commit=%v): %v", commit, err)
	}
}

// consumeUntil reads topic from the start at the isolation level until every
// partition has given a record with the value done, and returns the values before
// it per partition, in offset order.
func consumeUntil(t *testing.T, addrs []string, topic string, partitions int, committed bool, done string) map[int32][]string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := newClient(t, addrs, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := ctxT(t, time.Minute)
	out := map[int32][]string{}
	finished := map[int32]bool{}
	for len(finished) < partitions {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s (read_committed=%v): %d of %d partitions finished; got %v", topic, committed, len(finished), partitions, out)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Logf("fetch error on partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if finished[r.Partition] {
				return
			}
			if r.Attrs.IsControl() {
				t.Errorf("consumer got a control record at %d/%d", r.Partition, r.Offset)
			}
			if string(r.Value) == done {
				finished[r.Partition] = true
				return
			}
			out[r.Partition] = append(out[r.Partition], string(r.Value))
		})
	}
	return out
}

func flatten(m map[int32][]string) []string {
	var out []string
	for _, vs := range m {
		out = append(out, vs...)
	}
	sort.Strings(out)
	return out
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

// TestTxnCommitAbort: a kgo transactional producer (transactions v2, KIP-890) commits,
// aborts, then commits again; a read_committed consumer sees exactly the committed records (in order per
// partition), a read_uncommitted one sees them all, neither a control record.
func TestTxnCommitAbort(t *testing.T) {
	s := sharedStack(t)
	topic := topicName("txn")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 2, nil)
	tid := topicName("tid")
	cl := txnProducer(t, s.KafkaAddrs, tid)
	runTxn(t, cl, topic, 2, true, seq("c1", 10)...)
	runTxn(t, cl, topic, 2, false, seq("ab", 10)...)
	runTxn(t, cl, topic, 2, true, seq("c2", 10)...)
	runTxn(t, cl, topic, 2, true, "done", "done")
	// kgo uses KIP-890 transactions v2 (ApiVersions advertises transaction.version 2):
	// EndTxn v5 bumped the epoch at each of the four ends. EndTxn answers once the
	// decision is durable (as Kafka): the state is PrepareCommit until the markers are
	// written, CompleteCommit after.
	adm := newAdmin(t, s.KafkaAddrs)
	var ds kadm.DescribedTransactions
	waitFor(t, 20*time.Second, "DescribeTransactions to show CompleteCommit", func() bool {
		var err error
		ds, err = adm.DescribeTransactions(ctxT(t, 30*time.Second), tid)
		return err == nil && ds[tid].State == "CompleteCommit"
	})
	if ds[tid].ProducerEpoch != 4 {
		t.Errorf("after four transactions: %+v; want epoch 4 (bumped per transaction)", ds[tid])
	}

	committed := consumeUntil(t, s.KafkaAddrs, topic, 2, true, "done")
	want := append(seq("c1", 10), seq("c2", 10)...)
	sort.Strings(want)
	if got := flatten(committed); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("read_committed got %v, want %v", got, want)
	}
	for p, vs := range committed {
		if !sort.StringsAreSorted(vs) {
			t.Errorf("read_committed partition %d out of order: %v", p, vs)
		}
	}
	all := consumeUntil(t, s.KafkaAddrs, topic, 2, false, "done")
	want = append(want, seq("ab", 10)...)
	sort.Strings(want)
	if got := flatten(all); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("read_uncommitted got %v, want %v", got, want)
	}
}

// TestTxnFencing: a second producer with the same transactional id fences the first:
// the first can neither produce nor commit, and nothing it wrote after the fence is
// visible to read_committed; the open transaction of the first is aborted.
func TestTxnFencing(t *testing.T) {
	s := sharedStack(t)
	topic := topicName("txnfence")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 1, nil)
	tid := topicName("tid")
	old := txnProducer(t, s.KafkaAddrs, tid)
	runTxn(t, old, topic, 1, true, "old-0")
	ctx := ctxT(t, time.Minute)
	// The old producer opens a transaction and writes into it ...
	if err := old.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := old.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie-0")}).FirstErr(); err != nil {
		t.Fatalf("produce before the fence: %v", err)
	}
	// ... then a new producer with the same id starts (InitProducerId fences).
	fresh := txnProducer(t, s.KafkaAddrs, tid)
	runTxn(t, fresh, topic, 1, true, "new-0")

	err := old.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie-1")}).FirstErr()
	if err == nil {
		t.Errorf("fenced producer's produce succeeded")
	}
	endErr := old.EndTransaction(ctx, kgo.TryCommit)
	if endErr == nil {
		t.Errorf("fenced producer's commit succeeded")
	}
	var ke *kerr.Error
	if !errors.As(endErr, &ke) && !errors.As(err, &ke) {
		t.Logf("fenced producer errors: produce %v, commit %v", err, endErr)
	}

	runTxn(t, fresh, topic, 1, true, "done")
	got := consumeUntil(t, s.KafkaAddrs, topic, 1, true, "done")[0]
	if strings.Join(got, ",") != "old-0,new-0" {
		t.Errorf("read_committed after the fence: %v, want [old-0 new-0]", got)
	}
}

// TestTxnAbandonedProducerTimesOut: a producer that stops mid-transaction (as if
// killed: no EndTxn, no more requests) holds the last stable offset at its first
// record; its transaction is aborted by the coordinator's sweep within its timeout
// (the LSO moves on), its records never reach read_committed, and the producer is
// fenced (the abort bumped its epoch).
func TestTxnAbandonedProducerTimesOut(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnzombie")
	createTopic(t, adm, topic, 1, nil)
	const timeout = 3 * time.Second
	zombie := txnProducer(t, s.KafkaAddrs, topicName("tid"), kgo.TransactionTimeout(timeout))
	runTxn(t, zombie, topic, 1, true, "before")
	ctx := ctxT(t, time.Minute)
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var first int64 = -1
	for i := 0; i < 5; i++ {
		r, err := zombie.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("zombie-%d", i))}).First()
		if err != nil {
			t.Fatalf("produce: %v", err)
		}
		if first < 0 {
			first = r.Offset
		}
	}
	opened := time.Now()
	lso := func() (int64, int64) {
		c, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			t.Fatalf("ListOffsets read_committed: %v", err)
		}
		e, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatalf("ListOffsets: %v", err)
		}
		co, _ := c.Lookup(topic, 0)
		eo, _ := e.Lookup(topic, 0)
		return co.Offset, eo.Offset
	}
	if l, hw := lso(); l != first || hw != first+5 {
		t.Fatalf("open transaction: LSO %d, high watermark %d; want LSO %d (its first record), HW %d", l, hw, first, first+5)
	}
	// The sweep aborts it: an ABORT marker follows, and the LSO reaches the HW.
	waitFor(t, timeout+10*time.Second, "the timed-out transaction to be aborted (LSO = HW)", func() bool {
		l, hw := lso()
		return l == hw && hw == first+6
	})
	t.Logf("aborted %v after the last record (timeout %v)", time.Since(opened).Round(100*time.Millisecond), timeout)
	// The zombie is fenced.
	if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie-late")}).FirstErr(); err == nil {
		t.Errorf("the timed-out producer could still produce")
	}
	fresh := txnProducer(t, s.KafkaAddrs, topicName("tid"))
	runTxn(t, fresh, topic, 1, true, "after")
	runTxn(t, fresh, topic, 1, true, "done")
	if got := consumeUntil(t, s.KafkaAddrs, topic, 1, true, "done")[0]; strings.Join(got, ",") != "before,after" {
		t.Errorf("read_committed: %v, want [before after]", got)
	}
}
