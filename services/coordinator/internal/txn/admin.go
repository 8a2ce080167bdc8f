package txn

import (
	"context"
	"time"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
)

// codeTransactionalIDNotFound is Kafka's TRANSACTIONAL_ID_NOT_FOUND.
const codeTransactionalIDNotFound = 105

// knownStates are the state names ListTransactions filters by (Kafka's
// TransactionState names, PrepareEpochFence included: it matches nothing here).
var knownStates = map[string]bool{
	StateEmpty: true, StateOngoing: true, StatePrepareCommit: true, StatePrepareAbort: true,
	StateCompleteCommit: true, StateCompleteAbort: true, StateDead: true, "PrepareEpochFence": true,
}

// DescribeTransactions implements the service: each id's state, producer, timeout,
// the start of its open transaction (-1 when none) and its partitions; an unknown id
// is TRANSACTIONAL_ID_NOT_FOUND, an empty one INVALID_REQUEST (Kafka's
// TransactionCoordinator.handleDescribeTransactions).
func (s *Server) DescribeTransactions(ctx context.Context, req *coordinatorv1.DescribeTransactionsRequest) (*coordinatorv1.DescribeTransactionsResponse, error) {
	rows, err := s.c.store.DescribeTxns(ctx, req.GetTransactionalIds())
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp := &coordinatorv1.DescribeTransactionsResponse{}
	for _, id := range req.GetTransactionalIds() {
		r := rows[id]
		d := &coordinatorv1.TransactionDescription{TransactionalId: id, StartTimeMs: -1, ProducerId: -1, ProducerEpoch: -1}
		resp.Transactions = append(resp.Transactions, d)
		if id == "" {
			d.ErrorCode = codeInvalidRequest
			continue
		}
		if r == nil {
			d.ErrorCode = codeTransactionalIDNotFound
			continue
		}
		d.State, d.TimeoutMs, d.ProducerId, d.ProducerEpoch = r.State, r.TimeoutMs, r.ProducerID, r.ProducerEpoch
		if !r.StartedAt.IsZero() {
			d.StartTimeMs = r.StartedAt.UnixMilli()
		}
		for _, p := range r.Partitions {
			if n := len(d.Topics); n == 0 || d.Topics[n-1].GetName() != p.Topic {
				d.Topics = append(d.Topics, &coordinatorv1.TxnTopic{Name: p.Topic})
			}
			last := d.Topics[len(d.Topics)-1]
			last.Partitions = append(last.Partitions, p.Partition)
		}
	}
	return resp, nil
}

// ListTransactions implements the service. State names Kafka does not know are
// returned as unknown and match nothing (a filter of only unknown names lists
// nothing); min_duration_ms >= 0 keeps the transactions open at least that long.
func (s *Server) ListTransactions(ctx context.Context, req *coordinatorv1.ListTransactionsRequest) (*coordinatorv1.ListTransactionsResponse, error) {
	resp := &coordinatorv1.ListTransactionsResponse{}
	var states []string
	for _, st := range req.GetStates() {
		if knownStates[st] {
			states = append(states, st)
		} else {
			resp.UnknownStates = append(resp.UnknownStates, st)
		}
	}
	if len(req.GetStates()) > 0 && len(states) == 0 {
		return resp, nil
	}
	var since time.Time
	if d := req.GetMinDurationMs(); d >= 0 {
		since = s.c.now().Add(-time.Duration(d) * time.Millisecond)
	}
	rows, err := s.c.store.ListTxns(ctx, states, req.GetProducerIds(), since)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	for _, r := range rows {
		resp.Transactions = append(resp.Transactions, &coordinatorv1.TransactionListing{TransactionalId: r.ID,
			ProducerId: r.ProducerID, State: r.State})
	}
	return resp, nil
}
