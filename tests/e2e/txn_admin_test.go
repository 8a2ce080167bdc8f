package e2e

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	// As in Kafka, EndTxn answers once the decision is durable: the transaction shows
	// PrepareCommit, with its partitions, until the markers are written.
	waitFor(t, 20*time.Second, "DescribeTransactions to show CompleteCommit without partitions", func() bool {
		ds, _ = adm.DescribeTransactions(ctx, tid)
		return ds[tid].State == "CompleteCommit" && len(ds[tid].Topics) == 0
	})
	ls, err = adm.ListTransactions(ctx, []int64{r.ProducerID}, nil)
	if err != nil || ls[tid].State != "CompleteCommit" || len(ls) != 1 {
		t.Errorf("ListTransactions(producer %d) = %+v, %v", r.ProducerID, ls, err)
	}
}

// TestTxnAdminAbortHanging: what kafka-transactions.sh abort sends (WriteTxnMarkers to
// the partition's leader) ends an open transaction on a partition: an ABORT marker
// is written, the LSO moves to the high watermark and read_committed never sees the
// records; the coordinator's own later abort writes nothing more.
func TestTxnAdminAbortHanging(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnhang")
	createTopic(t, adm, topic, 1, nil)
	tid := topicName("tid")
	cl := txnProducer(t, s.KafkaAddrs, tid)
	ctx := ctxT(t, time.Minute)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("hanging")}).First()
	if err != nil {
		t.Fatal(err)
	}
	ends := func() (int64, int64) {
		c, err1 := adm.ListCommittedOffsets(ctx, topic)
		e, err2 := adm.ListEndOffsets(ctx, topic)
		if err1 != nil || err2 != nil {
			t.Fatalf("ListOffsets: %v %v", err1, err2)
		}
		co, _ := c.Lookup(topic, 0)
		eo, _ := e.Lookup(topic, 0)
		return co.Offset, eo.Offset
	}
	if lso, hw := ends(); lso != r.Offset || hw != r.Offset+1 {
		t.Fatalf("open transaction: LSO %d HW %d", lso, hw)
	}
	td := waitTopic(t, adm, topic, 1)
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = r.ProducerID, r.ProducerEpoch, false, 0
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = topic, []int32{0}
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp, err := req.RequestWith(ctx, newClient(t, s.KafkaAddrs).Broker(int(td.Partitions[0].Leader)))
	if err != nil {
		t.Fatalf("WriteTxnMarkers: %v", err)
	}
	if c := resp.Markers[0].Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatalf("WriteTxnMarkers: %s", codeName(c))
	}
	if lso, hw := ends(); lso != hw || hw != r.Offset+2 {
		t.Fatalf("after the admin abort: LSO %d HW %d, want both %d", lso, hw, r.Offset+2)
	}
	// The producer's own abort: the coordinator's marker finds nothing open.
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatalf("EndTransaction(abort): %v", err)
	}
	if _, hw := ends(); hw != r.Offset+2 {
		t.Errorf("a second marker was written: HW %d", hw)
	}
	runTxn(t, cl, topic, 1, true, "done")
	if got := consumeUntil(t, s.KafkaAddrs, topic, 1, true, "done")[0]; len(got) != 0 {
		t.Errorf("read_committed: %v, want nothing", got)
	}
}
