package e2e

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// txnBatch is a transactional batch of one record from producer pid at epoch.
func txnBatch(pid int64, epoch int16) []byte {
	b := idempotentBatch(pid, epoch, 0, 1)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|0x10)
	return resealBatch(b)
}

// TestTxnBadInput: transaction requests that Kafka refuses get Kafka's codes, and
// nothing stored changes: AddPartitionsToTxn naming an unknown topic, EndTxn without a
// transaction or for an unknown id, TxnOffsetCommit with another producer's epoch or id,
// transactional batches from a producer not in a transaction or to a partition not
// added.
func TestTxnBadInput(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnbad")
	createTopic(t, adm, topic, 2, nil)
	cl := newClient(t, s.KafkaAddrs)
	ctx := ctxT(t, 2*time.Minute)
	tid := topicName("tid")

	initPID := func(id string) (int64, int16) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(id), 60000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("InitProducerId(%s): %v, %v", id, resp, err)
		}
		return resp.ProducerID, resp.ProducerEpoch
	}
	addParts := func(id string, pid int64, epoch int16, parts map[string][]int32) map[string]map[int32]int16 {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.SetVersion(3)
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
		for tp, ps := range parts {
			rt := kmsg.NewAddPartitionsToTxnRequestTopic()
			rt.Topic, rt.Partitions = tp, ps
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("AddPartitionsToTxn: %v", err)
		}
		out := map[string]map[int32]int16{}
		for _, rt := range resp.Topics {
			out[rt.Topic] = map[int32]int16{}
			for _, rp := range rt.Partitions {
				out[rt.Topic][rp.Partition] = rp.ErrorCode
			}
		}
		return out
	}
	endTxn := func(id string, pid int64, epoch int16, commit bool) int16 {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, commit
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("EndTxn: %v", err)
		}
		return resp.ErrorCode
	}
	want := func(what string, got int16, e *kerr.Error) {
		t.Helper()
		if got != e.Code {
			t.Errorf("%s: %s, want %s", what, codeName(got), e.Message)
		}
	}
	hw := func() map[int32]int64 {
		e, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		e.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out
	}
	before := hw()

	pid, epoch := initPID(tid)
	codes := addParts(tid, pid, epoch, map[string][]int32{topic: {0}, "no-such-topic-x": {0}})
	want("AddPartitionsToTxn unknown topic", codes["no-such-topic-x"][0], kerr.UnknownTopicOrPartition)
	want("AddPartitionsToTxn known partition beside an unknown one", codes[topic][0], kerr.OperationNotAttempted)
	want("EndTxn without a transaction (nothing was added)", endTxn(tid, pid, epoch, true), kerr.InvalidTxnState)
	want("EndTxn of an unknown transactional id", endTxn(topicName("tid"), 1, 0, true), kerr.InvalidProducerIDMapping)

	// A transactional batch from a producer that has no transaction.
	td := waitTopic(t, adm, topic, 2)
	leader := td.Partitions[0].Leader
	// Produce v11: a transactions v1 client, whose partitions must have been added
	// (v12 under transactions v2 adds them itself).
	v11 := kversion.Stable()
	v11.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	cl11 := newClient(t, s.KafkaAddrs, kgo.MaxVersions(v11))
	txnProduce := func(id string, p int32, b []byte) int16 {
		req := kmsg.NewPtrProduceRequest()
		req.TransactionID, req.Acks, req.TimeoutMillis = kmsg.StringPtr(id), -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, b
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl11.Broker(int(leader)))
		if err != nil {
			t.Fatalf("produce: %v", err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	want("transactional batch without a transaction", txnProduce(tid, 0, txnBatch(pid, epoch)), kerr.InvalidTxnState)

	// Open a transaction on partition 0 with the group; then the bad calls.
	if c := addParts(tid, pid, epoch, map[string][]int32{topic: {0}}); c[topic][0] != 0 {
		t.Fatalf("AddPartitionsToTxn: %s", codeName(c[topic][0]))
	}
	want("transactional batch to a partition not added", txnProduce(tid, 1, txnBatch(pid, epoch)), kerr.InvalidTxnState)
	want("transactional batch with another epoch", txnProduce(tid, 0, txnBatch(pid, epoch+1)), kerr.InvalidProducerEpoch)
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = tid, pid, epoch, "txnbad-group"
	if resp, err := ao.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v %v", resp, err)
	}
	toc := func(p int64, e int16) int16 {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = tid, "txnbad-group", p, e, -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("TxnOffsetCommit: %v", err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	want("TxnOffsetCommit with another producer's epoch", toc(pid, epoch+1), kerr.InvalidProducerEpoch)
	want("TxnOffsetCommit with another producer id", toc(pid+1, epoch), kerr.InvalidProducerIDMapping)
	if c := endTxn(tid, pid, epoch, false); c != 0 {
		t.Errorf("abort: %s", codeName(c))
	}

	// Nothing stored: no records (the abort of a transaction that stored nothing
	// writes no marker either) and no committed offset.
	after := hw()
	for p, o := range before {
		if after[p] != o {
			t.Errorf("partition %d high watermark %d -> %d", p, o, after[p])
		}
	}
	offs, err := adm.FetchOffsets(ctx, "txnbad-group")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topic, 0); ok && o.At >= 0 {
		t.Errorf("group offset committed by refused or aborted calls: %+v", o)
	}
}
