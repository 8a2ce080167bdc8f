package handler

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// fakeTxns answers every partition of AddPartitionsToTxn with code (or fails with err)
// and records the requests.
type fakeTxns struct {
	coordinatorv1.TransactionCoordinatorServiceClient
	code int32
	err  error
	adds []*coordinatorv1.AddPartitionsToTxnRequest
}

func (f *fakeTxns) AddPartitionsToTxn(_ context.Context, req *coordinatorv1.AddPartitionsToTxnRequest, _ ...grpc.CallOption) (*coordinatorv1.AddPartitionsToTxnResponse, error) {
	f.adds = append(f.adds, req)
	if f.err != nil {
		return nil, f.err
	}
	resp := &coordinatorv1.AddPartitionsToTxnResponse{}
	for _, x := range req.GetTransactions() {
		r := &coordinatorv1.TxnAdditionResult{TransactionalId: x.GetTransactionalId()}
		for _, t := range x.GetTopics() {
			rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
			for _, p := range t.GetPartitions() {
				rt.Partitions = append(rt.Partitions, &coordinatorv1.PartitionResult{Partition: p, ErrorCode: f.code})
			}
			r.Topics = append(r.Topics, rt)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (f *fakeTxns) EndTxn(_ context.Context, req *coordinatorv1.EndTxnRequest, _ ...grpc.CallOption) (*coordinatorv1.EndTxnResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &coordinatorv1.EndTxnResponse{ErrorCode: f.code, ProducerId: req.GetProducerId(), ProducerEpoch: req.GetProducerEpoch()}, nil
}

func newTxnEnv(t *testing.T) (*env, *fakeTxns) {
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	ft := &fakeTxns{}
	h := New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 2},
		Deps{Storage: st, Coordinator: co, Txns: ft, Log: zaptest.NewLogger(t)})
	return &env{h: h, st: st, co: co}, ft
}

// txnBatch is a transactional batch of producer 7, epoch 3.
func txnBatch() []byte {
	b := fake.Batch("x", "y")
	binary.BigEndian.PutUint16(b[21:], 0x10)
	binary.BigEndian.PutUint64(b[43:], 7)
	binary.BigEndian.PutUint16(b[51:], 3)
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestProduceTransactionalBatchIsVerified(t *testing.T) {
	e, ft := newTxnEnv(t)
	e.createTopic(t, "t", 2, nil)
	tid := "tx-1"
	produce := func(withID bool) int16 {
		req := produceReq("t", 1, txnBatch())
		if withID {
			req.TransactionID = &tid
		}
		return e.do(t, req, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	cases := []struct {
		name   string
		withID bool
		code   int32
		err    error
		want   int16
		stored bool
	}{
		{"no transactional id", false, 0, nil, kerr.InvalidTxnState.Code, false},
		{"not in the transaction", true, int32(kerr.InvalidTxnState.Code), nil, kerr.InvalidTxnState.Code, false},
		{"unknown producer id", true, int32(kerr.InvalidProducerIDMapping.Code), nil, kerr.InvalidTxnState.Code, false},
		{"fenced epoch", true, int32(kerr.ProducerFenced.Code), nil, kerr.InvalidProducerEpoch.Code, false},
		{"coordinator down", true, 0, status.Error(codes.Unavailable, "down"), kerr.NotEnoughReplicas.Code, false},
		{"in the transaction", true, 0, nil, 0, true},
	}
	for _, c := range cases {
		ft.code, ft.err = c.code, c.err
		before := e.st.HighWatermark("kafka.t~1")
		if got := produce(c.withID); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, code(got), code(c.want))
		}
		if stored := e.st.HighWatermark("kafka.t~1") > before; stored != c.stored {
			t.Errorf("%s: stored %v, want %v", c.name, stored, c.stored)
		}
	}
	last := ft.adds[len(ft.adds)-1].GetTransactions()
	if len(last) != 1 || !last[0].GetVerifyOnly() || last[0].GetTransactionalId() != tid || last[0].GetProducerId() != 7 ||
		last[0].GetProducerEpoch() != 3 || last[0].GetTopics()[0].GetName() != "t" || last[0].GetTopics()[0].GetPartitions()[0] != 1 {
		t.Errorf("verify request %v", last)
	}
}

func TestTxnFencedByVersion(t *testing.T) {
	e, ft := newTxnEnv(t)
	ft.code = int32(kerr.ProducerFenced.Code)
	for v, want := range map[int16]int16{0: kerr.InvalidProducerEpoch.Code, 1: kerr.InvalidProducerEpoch.Code, 2: kerr.ProducerFenced.Code, 3: kerr.ProducerFenced.Code} {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID, req.ProducerID = "tx", 7
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = "t", []int32{0, 1}
		req.Topics = append(req.Topics, rt)
		resp := e.do(t, req, v).(*kmsg.AddPartitionsToTxnResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 || resp.Topics[0].Partitions[1].ErrorCode != want {
			t.Errorf("AddPartitionsToTxn v%d: %+v, want %s", v, resp.Topics, code(want))
		}
		er := kmsg.NewPtrEndTxnRequest()
		er.TransactionalID = "tx"
		if got := e.do(t, er, v).(*kmsg.EndTxnResponse).ErrorCode; got != want {
			t.Errorf("EndTxn v%d: %s, want %s", v, code(got), code(want))
		}
	}
	// v4+ batches transactions and answers each.
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	for _, id := range []string{"a", "b"} {
		x := kmsg.NewAddPartitionsToTxnRequestTransaction()
		x.TransactionalID, x.VerifyOnly = id, true
		xt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		xt.Topic, xt.Partitions = "t", []int32{0}
		x.Topics = append(x.Topics, xt)
		req.Transactions = append(req.Transactions, x)
	}
	ft.code = 0
	resp := e.do(t, req, 4).(*kmsg.AddPartitionsToTxnResponse)
	if len(resp.Transactions) != 2 || resp.Transactions[1].TransactionalID != "b" || resp.Transactions[1].Topics[0].Partitions[0].ErrorCode != 0 {
		t.Errorf("v4: %+v", resp.Transactions)
	}
	if x := ft.adds[len(ft.adds)-1].GetTransactions(); len(x) != 2 || !x[0].GetVerifyOnly() {
		t.Errorf("v4 request to the coordinator: %v", x)
	}
	ft.err = status.Error(codes.Unavailable, "down")
	er := kmsg.NewPtrEndTxnRequest()
	if got := e.do(t, er, 3).(*kmsg.EndTxnResponse).ErrorCode; got != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("EndTxn with the coordinator down: %s", code(got))
	}
}

func TestAPIVersionsAdvertisesTransactionVersion(t *testing.T) {
	e, _ := newTxnEnv(t)
	resp := e.do(t, apiVersionsV3(), 3).(*kmsg.ApiVersionsResponse)
	if len(resp.FinalizedFeatures) != 3 || resp.FinalizedFeatures[0].Name != "transaction.version" || resp.FinalizedFeatures[0].MaxVersionLevel != 2 ||
		len(resp.SupportedFeatures) != 3 || resp.SupportedFeatures[0].MaxVersion != 2 {
		t.Errorf("features: supported %+v finalized %+v", resp.SupportedFeatures, resp.FinalizedFeatures)
	}
	// group.version 1 (KIP-848) is finalized exactly when ConsumerGroupHeartbeat v0-1
	// and ConsumerGroupDescribe are served.
	if len(resp.FinalizedFeatures) == 3 {
		if f := resp.FinalizedFeatures[1]; f.Name != "group.version" || f.MinVersionLevel != 1 || f.MaxVersionLevel != 1 {
			t.Errorf("group.version finalized as %+v", f)
		}
		// share.version 1 (KIP-932), as Kafka 4.2 finalizes it: share groups are on.
		if f := resp.FinalizedFeatures[2]; f.Name != "share.version" || f.MinVersionLevel != 1 || f.MaxVersionLevel != 1 {
			t.Errorf("share.version finalized as %+v", f)
		}
	}
	for _, key := range []int16{68, 69} {
		if _, maxV, ok := Supported(key); !ok || maxV < 1 {
			t.Errorf("group.version 1 advertised but key %d serves up to v%d", key, maxV)
		}
	}
	// Served exactly when the v2 versions are.
	for key, v := range map[int16]int16{0: 12, 26: 5, 28: 5} {
		if _, maxV, ok := Supported(key); !ok || maxV < v {
			t.Errorf("transaction.version 2 advertised but key %d serves up to v%d, need v%d", key, maxV, v)
		}
	}
}

func TestProduceV12AddsPartition(t *testing.T) {
	e, ft := newTxnEnv(t)
	e.createTopic(t, "t", 2, nil)
	tid := "tx-2"
	for _, v := range []int16{11, 12} {
		req := produceReq("t", 0, txnBatch())
		req.TransactionID = &tid
		if c := e.do(t, req, v).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; c != 0 {
			t.Fatalf("produce v%d: %s", v, code(c))
		}
		if verify := ft.adds[len(ft.adds)-1].GetTransactions()[0].GetVerifyOnly(); verify != (v < 12) {
			t.Errorf("produce v%d: verify_only %v", v, verify)
		}
	}
	ft.code = int32(kerr.ConcurrentTransactions.Code)
	req := produceReq("t", 0, txnBatch())
	req.TransactionID = &tid
	if c := e.do(t, req, 12).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; c != kerr.NotEnoughReplicas.Code {
		t.Errorf("produce v12 while the previous transaction completes: %s", code(c))
	}
}
