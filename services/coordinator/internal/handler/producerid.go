package handler

import (
	"context"
	"math"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// producerIDs serves producer ids from a block reserved in Postgres, reserving the
// next block when one is used up. Ids of a block not used up before a restart are
// skipped, never handed out again.
type producerIDs struct {
	store *store.Store

	mu   sync.Mutex // guards next, end; held across the block reservation
	next int64
	end  int64
}

// Next returns a fresh producer id.
func (p *producerIDs) Next(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.end {
		first, err := p.store.NextProducerIDBlock(ctx)
		if err != nil {
			return 0, err
		}
		p.next, p.end = first, first+store.ProducerIDBlockSize
	}
	id := p.next
	p.next++
	return id, nil
}

// TxnInit serves InitProducerId for transactional ids (package txn).
type TxnInit interface {
	InitProducerID(ctx context.Context, tid string, timeoutMs int32, expPID int64, expEpoch int32) (code int16, pid int64, epoch int32, err error)
}

// SetTransactions routes InitProducerId calls with a transactional id to t. Call it
// before serving; without it they are INVALID_REQUEST.
func (h *Handler) SetTransactions(t TxnInit) { h.txns = t }

// NextProducerID returns a fresh producer id from the Postgres blocks.
func (h *Handler) NextProducerID(ctx context.Context) (int64, error) { return h.pids.Next(ctx) }

// InitProducerId hands out producer ids (Kafka InitProducerId). A transactional id is
// served by the transaction coordinator (SetTransactions). For idempotent producers a
// new producer (producer_id -1) gets a fresh id with epoch 0. An existing one
// (producer_id >= 0, epoch >= 0; KIP-360) gets the same id with the epoch bumped, or a
// fresh id with epoch 0 once the epoch is exhausted (32766, as Kafka). Other
// combinations are INVALID_REQUEST.
func (h *Handler) InitProducerId(ctx context.Context, req *coordinatorv1.InitProducerIdRequest) (*coordinatorv1.InitProducerIdResponse, error) { //nolint:revive // name from the proto
	invalid := &coordinatorv1.InitProducerIdResponse{ErrorCode: code(kerr.InvalidRequest), ProducerId: -1, ProducerEpoch: -1}
	if tid := req.GetTransactionalId(); tid != "" {
		if h.txns == nil {
			return invalid, nil
		}
		c, pid, epoch, err := h.txns.InitProducerID(ctx, tid, req.GetTransactionTimeoutMs(), req.GetProducerId(), req.GetProducerEpoch())
		if err != nil {
			return nil, statusError(err)
		}
		return &coordinatorv1.InitProducerIdResponse{ErrorCode: int32(c), ProducerId: pid, ProducerEpoch: epoch}, nil
	}
	pid, epoch := req.GetProducerId(), req.GetProducerEpoch()
	switch {
	case pid == -1:
	case pid >= 0 && epoch >= 0 && epoch < math.MaxInt16-1:
		return &coordinatorv1.InitProducerIdResponse{ProducerId: pid, ProducerEpoch: epoch + 1}, nil
	case pid >= 0 && epoch >= math.MaxInt16-1 && epoch <= math.MaxInt16:
	default:
		return invalid, nil
	}
	id, err := h.pids.Next(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}, nil
}
