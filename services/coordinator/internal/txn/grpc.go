package txn

import (
	"context"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Server serves tributary.coordinator.v1.TransactionCoordinatorService over a
// Coordinator.
type Server struct {
	coordinatorv1.UnimplementedTransactionCoordinatorServiceServer
	c *Coordinator
}

// NewServer returns the gRPC service of c.
func NewServer(c *Coordinator) *Server { return &Server{c: c} }

// AddPartitionsToTxn implements the service; see Coordinator.AddPartitions.
func (s *Server) AddPartitionsToTxn(ctx context.Context, req *coordinatorv1.AddPartitionsToTxnRequest) (*coordinatorv1.AddPartitionsToTxnResponse, error) {
	resp := &coordinatorv1.AddPartitionsToTxnResponse{}
	for _, a := range req.GetTransactions() {
		p := Partitions{TransactionalID: a.GetTransactionalId(), ProducerID: a.GetProducerId(),
			ProducerEpoch: a.GetProducerEpoch(), VerifyOnly: a.GetVerifyOnly()}
		for _, t := range a.GetTopics() {
			for _, n := range t.GetPartitions() {
				p.Topics = append(p.Topics, store.TxnPartition{Topic: t.GetName(), Partition: n})
			}
		}
		codes, err := s.c.AddPartitions(ctx, p)
		if err != nil {
			return nil, rpcerr.Status(err)
		}
		r := &coordinatorv1.TxnAdditionResult{TransactionalId: a.GetTransactionalId()}
		i := 0
		for _, t := range a.GetTopics() {
			rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
			for _, n := range t.GetPartitions() {
				rt.Partitions = append(rt.Partitions, &coordinatorv1.PartitionResult{Partition: n, ErrorCode: int32(codes[i])})
				i++
			}
			r.Topics = append(r.Topics, rt)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// AddOffsetsToTxn implements the service; see Coordinator.AddOffsets.
func (s *Server) AddOffsetsToTxn(ctx context.Context, req *coordinatorv1.AddOffsetsToTxnRequest) (*coordinatorv1.AddOffsetsToTxnResponse, error) {
	code, err := s.c.AddOffsets(ctx, req.GetTransactionalId(), req.GetProducerId(), req.GetProducerEpoch(), req.GetGroupId())
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	return &coordinatorv1.AddOffsetsToTxnResponse{ErrorCode: int32(code)}, nil
}

// EndTxn implements the service; see Coordinator.EndTxn.
func (s *Server) EndTxn(ctx context.Context, req *coordinatorv1.EndTxnRequest) (*coordinatorv1.EndTxnResponse, error) {
	code, pid, epoch, err := s.c.EndTxn(ctx, req.GetTransactionalId(), req.GetProducerId(), req.GetProducerEpoch(), req.GetCommit(), req.GetBumpEpoch())
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	return &coordinatorv1.EndTxnResponse{ErrorCode: int32(code), ProducerId: pid, ProducerEpoch: epoch}, nil
}

// TxnOffsetCommit implements the service; see Coordinator.TxnOffsetCommit.
func (s *Server) TxnOffsetCommit(ctx context.Context, req *coordinatorv1.TxnOffsetCommitRequest) (*coordinatorv1.TxnOffsetCommitResponse, error) {
	oc := OffsetCommit{TransactionalID: req.GetTransactionalId(), Group: req.GetGroupId(), ProducerID: req.GetProducerId(),
		ProducerEpoch: req.GetProducerEpoch(), Generation: req.GetGenerationId(), MemberID: req.GetMemberId(),
		AddGroup: req.GetAddGroup()}
	if req.GroupInstanceId != nil {
		v := req.GetGroupInstanceId()
		oc.InstanceID = &v
	}
	for _, t := range req.GetTopics() {
		for _, p := range t.GetPartitions() {
			oc.Offsets = append(oc.Offsets, store.TxnOffset{Topic: t.GetName(), Partition: p.GetPartition(),
				Offset: p.GetCommittedOffset(), LeaderEpoch: p.GetCommittedLeaderEpoch(), Metadata: p.GetMetadata()})
		}
	}
	codes, err := s.c.TxnOffsetCommit(ctx, oc)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp := &coordinatorv1.TxnOffsetCommitResponse{}
	i := 0
	for _, t := range req.GetTopics() {
		rt := &coordinatorv1.TopicPartitionResults{Name: t.GetName()}
		for _, p := range t.GetPartitions() {
			rt.Partitions = append(rt.Partitions, &coordinatorv1.PartitionResult{Partition: p.GetPartition(), ErrorCode: int32(codes[i])})
			i++
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
