package server

import (
	"context"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kafkaGroupIDNotFound is Kafka's GROUP_ID_NOT_FOUND (69), as the coordinator reports it.
const kafkaGroupIDNotFound = 69

// GetCommittedOffsets answers with a consumer group's committed offsets, read from the
// coordinator (never changing the group), as channels and sequences with each channel's
// lag. Errors: INVALID_ARGUMENT (empty group or invalid topic), NOT_FOUND (no such
// group), FAILED_PRECONDITION (no --coordinator-addr), UNAVAILABLE (coordinator down).
func (s *service) GetCommittedOffsets(ctx context.Context, req *storagev1.GetCommittedOffsetsRequest) (_ *storagev1.GetCommittedOffsetsResponse, err error) {
	defer func() { s.count("GetCommittedOffsets", err) }()
	if req.GetGroup() == "" {
		return nil, status.Error(codes.InvalidArgument, "group is empty")
	}
	if t := req.GetTopic(); t != "" {
		if err := channel.ValidateKafkaTopic(t); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if s.groups == nil {
		return nil, status.Error(codes.FailedPrecondition, "storage-core runs without --coordinator-addr: committed offsets live in the coordinator")
	}
	resp, err := s.groups.ReadCommittedOffsets(ctx, &coordinatorv1.ReadCommittedOffsetsRequest{GroupId: req.GetGroup(), Topic: req.GetTopic()})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "coordinator: %s", status.Convert(err).Message())
	}
	switch resp.GetErrorCode() {
	case 0:
	case kafkaGroupIDNotFound:
		return nil, status.Errorf(codes.NotFound, "group %q has no state and no committed offsets", req.GetGroup())
	default:
		return nil, status.Errorf(codes.Unavailable, "coordinator answered Kafka error %d", resp.GetErrorCode())
	}
	out := &storagev1.GetCommittedOffsetsResponse{Group: req.GetGroup(), State: resp.GetState()}
	for _, o := range resp.GetOffsets() {
		name := channel.KafkaPartition(o.GetTopic(), o.GetPartition())
		p := &storagev1.CommittedPosition{
			Channel:         name,
			Topic:           o.GetTopic(),
			Partition:       o.GetPartition(),
			NextSequence:    o.GetCommittedOffset() + 1,
			CommittedOffset: o.GetCommittedOffset(),
			Metadata:        o.GetMetadata(),
			CommitTimeMs:    o.GetCommitTimeMs(),
			Lag:             -1,
		}
		if l, err := s.st.Get(name); err == nil {
			// High watermark (sequence of the last record) minus the committed offset
			// (sequence of the last consumed record).
			p.Lag = max(l.HighWatermark()-o.GetCommittedOffset(), 0)
		}
		out.Positions = append(out.Positions, p)
	}
	return out, nil
}
