package handler

// AddPartitionsToTxn (API key 24), versions 0-5.
//
// Behaviour: passed to the coordinator's transaction coordinator (Postgres), which
// adds the partitions to the producer's transaction and makes it Ongoing. v0-3 (what
// clients send) carry one transaction and answer per partition; v4+ (KIP-890, what
// brokers send) batch transactions, each answered on its own, and may be verify_only:
// each partition answers NONE when it is in that producer's Ongoing transaction and
// INVALID_TXN_STATE otherwise, and nothing changes. Per-partition codes:
// UNKNOWN_TOPIC_OR_PARTITION (the others then OPERATION_NOT_ATTEMPTED, nothing added),
// INVALID_PRODUCER_ID_MAPPING (unknown transactional id or another producer id),
// PRODUCER_FENCED (another epoch; INVALID_PRODUCER_EPOCH before v2, KIP-588),
// CONCURRENT_TRANSACTIONS (the previous transaction is still being completed:
// retriable). Coordinator outage: COORDINATOR_NOT_AVAILABLE. With the authorizer on:
// v0-3 need WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
// everywhere) and WRITE on each topic (else TOPIC_AUTHORIZATION_FAILED, the others
// OPERATION_NOT_ATTEMPTED, nothing added); v4+ (broker to broker) CLUSTER_ACTION on
// the cluster, else a top-level CLUSTER_AUTHORIZATION_FAILED.
//
// KIPs: KIP-98, KIP-482 (flexible v3+), KIP-588 (PRODUCER_FENCED v2+), KIP-890 (v4+
// batched and verify-only, v5 TRANSACTION_ABORTABLE: not answered).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.AddPartitionsToTxn.Int16(), 0, 5, (*Handler).handleAddPartitionsToTxn) }

func (h *Handler) handleAddPartitionsToTxn(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	x := h.access(ctx, r)
	if req.Version >= 4 && !x.cluster(kafkaacl.OpClusterAction) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	if req.Version < 4 && x != nil {
		if codes := txnAddAuthorization(x, req); codes != nil {
			for ti, t := range req.Topics {
				rt := kmsg.NewAddPartitionsToTxnResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p, codes[ti]
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil
		}
	}
	creq := &coordinatorv1.AddPartitionsToTxnRequest{}
	if req.Version < 4 {
		a := &coordinatorv1.TxnAddition{TransactionalId: req.TransactionalID, ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch)}
		for _, t := range req.Topics {
			a.Topics = append(a.Topics, &coordinatorv1.TxnTopic{Name: t.Topic, Partitions: t.Partitions})
		}
		creq.Transactions = append(creq.Transactions, a)
	}
	for _, tx := range req.Transactions {
		a := &coordinatorv1.TxnAddition{TransactionalId: tx.TransactionalID, ProducerId: tx.ProducerID,
			ProducerEpoch: int32(tx.ProducerEpoch), VerifyOnly: tx.VerifyOnly}
		for _, t := range tx.Topics {
			a.Topics = append(a.Topics, &coordinatorv1.TxnTopic{Name: t.Topic, Partitions: t.Partitions})
		}
		creq.Transactions = append(creq.Transactions, a)
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.AddPartitionsToTxn(cctx, creq)
	var failed int16
	if err != nil {
		failed = h.txnCode("AddPartitionsToTxn", err)
	}
	// result returns the code of partition pi of topic ti of transaction xi.
	result := func(xi, ti, pi int) int16 {
		if err != nil {
			return failed
		}
		rs := out.GetResults()
		if xi >= len(rs) || ti >= len(rs[xi].GetTopics()) || pi >= len(rs[xi].GetTopics()[ti].GetPartitions()) {
			return kerr.CoordinatorNotAvailable.Code
		}
		return fenced(rs[xi].GetTopics()[ti].GetPartitions()[pi].GetErrorCode(), req.Version, 2)
	}
	if req.Version < 4 {
		for ti, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for pi, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, result(0, ti, pi)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	for xi, tx := range req.Transactions {
		rx := kmsg.NewAddPartitionsToTxnResponseTransaction()
		rx.TransactionalID = tx.TransactionalID
		for ti, t := range tx.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rt.Topic = t.Topic
			for pi, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				rp.Partition, rp.ErrorCode = p, result(xi, ti, pi)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rx.Topics = append(rx.Topics, rt)
		}
		resp.Transactions = append(resp.Transactions, rx)
	}
	return resp, nil
}

// txnAddAuthorization returns, per topic of a v0-3 request, the code its partitions
// get when the request may not go on (Kafka's handleAddPartitionToTxnRequest), or nil
// when everything is authorized.
func txnAddAuthorization(x *access, req *kmsg.AddPartitionsToTxnRequest) []int16 {
	codes := make([]int16, len(req.Topics))
	if !x.txnID(kafkaacl.OpWrite, req.TransactionalID) {
		for i := range codes {
			codes[i] = kerr.TransactionalIDAuthorizationFailed.Code
		}
		return codes
	}
	denied := false
	for i, t := range req.Topics {
		if !x.topic(kafkaacl.OpWrite, t.Topic) {
			codes[i], denied = kerr.TopicAuthorizationFailed.Code, true
		}
	}
	if !denied {
		return nil
	}
	for i := range codes {
		if codes[i] == 0 {
			codes[i] = kerr.OperationNotAttempted.Code
		}
	}
	return codes
}
