package e2e

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxnAdmin: kadm's DescribeTransactions, ListTransactions and DescribeProducers
// (what kafka-transactions.sh calls) show an open transaction, its partitions, its
// producer and the first offset of its open transaction, and the committed state after.
func TestTxnAdmin(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnadm")
	createTopic(t, adm, topic, 2, nil)
	tid := topicName("tid")
	cl := txnProducer(t, s.KafkaAddrs, tid)
	runTxn(t, cl, topic, 2, true, "a", "b")
	ctx := ctxT(t, time.Minute)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("open")}).First()
	if err != nil {
		t.Fatal(err)
	}

	ds, err := adm.DescribeTransactions(ctx, tid, "no-such-tid-x")
	if err != nil {
		t.Logf("DescribeTransactions: %v", err)
	}
	d := ds[tid]
	if d.Err != nil || d.State != "Ongoing" || d.TimeoutMillis != 60000 || d.StartTimestamp <= 0 || d.ProducerID != r.ProducerID ||
		!d.Topics.Lookup(topic, 1) || d.Topics.Lookup(topic, 0) {
		t.Errorf("DescribeTransactions(%s) = %+v", tid, d)
	}
	if nd, ok := ds["no-such-tid-x"]; ok && nd.Err == nil {
		t.Errorf("unknown transactional id described without an error: %+v", nd)
	}
	ls, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatalf("ListTransactions: %v", err)
	}
	if l, ok := ls[tid]; !ok || l.ProducerID != r.ProducerID || l.State != "Ongoing" {
		t.Errorf("ListTransactions(Ongoing) has %s as %+v (present %v)", tid, l, ok)
	}
	ps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {1: {}}})
	if err != nil {
		t.Fatalf("DescribeProducers: %v", err)
	}
	found := false
	ps.EachProducer(func(p kadm.DescribedProducer) {
		if p.ProducerID == r.ProducerID {
			found = true
			if p.CurrentTxnStartOffset != r.Offset || p.ProducerEpoch != r.ProducerEpoch {
				t.Errorf("DescribeProducers: %+v, want the open transaction at offset %d, epoch %d", p, r.Offset, r.ProducerEpoch)
			}
		}
	})
	if !found {
		t.Errorf("DescribeProducers does not list producer %d: %+v", r.ProducerID, ps)
	}

	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	ds, _ = adm.DescribeTransactions(ctx, tid)
	if d := ds[tid]; d.State != "CompleteCommit" || len(d.Topics) != 0 {
		t.Errorf("after commit: %+v", d)
	}
	ls, err = adm.ListTransactions(ctx, []int64{r.ProducerID}, nil)
	if err != nil || ls[tid].State != "CompleteCommit" || len(ls) != 1 {
		t.Errorf("ListTransactions(producer %d) = %+v, %v", r.ProducerID, ls, err)
	}
}
