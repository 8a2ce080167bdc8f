package consumergroup

// The KIP-932 share group offsets admin (DescribeShareGroupOffsets,
// AlterShareGroupOffsets, DeleteShareGroupOffsets, and the state of a deleted share
// group): the share-partition start offsets live in storage-core's share partitions
// (ShareService); the coordinator answers for the group (its type, its members) and
// changes offsets only while holding the group row lock of an empty group, so no
// member joins in between.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// errNoShareStorage: the coordinator was built without a storage-core connection.
var errNoShareStorage = fmt.Errorf("%w: no storage-core share service", store.ErrNotReady)

// shareStorageTimeout bounds one call to storage-core's ShareService.
const shareStorageTimeout = 10 * time.Second

// shareCode maps storage-core's per-partition ShareError to Kafka's code.
func shareCode(e storagev1.ShareError) int32 {
	switch e {
	case storagev1.ShareError_SHARE_ERROR_UNSPECIFIED:
		return 0
	case storagev1.ShareError_SHARE_ERROR_UNKNOWN_PARTITION:
		return int32(kerr.UnknownTopicOrPartition.Code)
	case storagev1.ShareError_SHARE_ERROR_INVALID_RECORD_STATE:
		return int32(kerr.InvalidRecordState.Code)
	case storagev1.ShareError_SHARE_ERROR_INVALID_REQUEST:
		return int32(kerr.InvalidRequest.Code)
	default:
		return int32(kerr.KafkaStorageError.Code)
	}
}

// partitionsClient returns storage-core's share service, or errNoShareStorage.
func (s *ShareCoordinator) partitionsClient() (storagev1.ShareServiceClient, error) {
	if s.partitions == nil {
		return nil, errNoShareStorage
	}
	return s.partitions, nil
}

func topicsByName(topics []topicInfo) map[string]topicInfo {
	out := make(map[string]topicInfo, len(topics))
	for _, t := range topics {
		out[t.Name] = t
	}
	return out
}

func noState(p int32) *coordinatorv1.ShareOffsetsPartitionResult {
	return &coordinatorv1.ShareOffsetsPartitionResult{Partition: p, StartOffset: -1, Lag: -1}
}

// DescribeShareGroupOffsets implements Kafka's DescribeShareGroupOffsets for one group.
func (s *ShareCoordinator) DescribeShareGroupOffsets(ctx context.Context, req *coordinatorv1.DescribeShareGroupOffsetsRequest) (*coordinatorv1.DescribeShareGroupOffsetsResponse, error) {
	resp := &coordinatorv1.DescribeShareGroupOffsetsResponse{}
	id := req.GetGroupId()
	if id == "" {
		resp.ErrorCode, resp.ErrorMessage = int32(kerr.InvalidGroupID.Code), "GroupId can't be empty."
		return resp, nil
	}
	row, _, err := s.c.store.SnapshotShareGroup(ctx, id)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	if row != nil && row.GroupType != store.GroupTypeShare {
		resp.ErrorCode, resp.ErrorMessage = int32(kerr.GroupIDNotFound.Code), fmt.Sprintf("Group %s is not a share group.", id)
		return resp, nil
	}
	topics, err := s.c.topics(ctx)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	byName := topicsByName(topics)
	part, err := s.partitionsClient()
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	cctx, cancel := context.WithTimeout(ctx, shareStorageTimeout)
	defer cancel()
	if req.GetAllTopics() {
		if row == nil {
			return resp, nil
		}
		out, err := part.ListSharePartitions(cctx, &storagev1.ListSharePartitionsRequest{GroupId: id})
		if err != nil {
			return nil, err
		}
		var cur *coordinatorv1.ShareOffsetsTopicResult
		for _, p := range out.GetPartitions() {
			if cur == nil || cur.Name != p.GetTopic() {
				cur = &coordinatorv1.ShareOffsetsTopicResult{Name: p.GetTopic()}
				if t, ok := byName[p.GetTopic()]; ok {
					cur.TopicId = idBytes(t.ID)
				}
				resp.Topics = append(resp.Topics, cur)
			}
			cur.Partitions = append(cur.Partitions, &coordinatorv1.ShareOffsetsPartitionResult{Partition: p.GetPartition(),
				StartOffset: p.GetStartOffset(), Lag: p.GetLag(), ErrorCode: shareCode(p.GetError()), ErrorMessage: p.GetMessage()})
		}
		return resp, nil
	}
	// Named partitions: those of existing topics are asked in one call; the others
	// have no state (no error, as Kafka).
	sreq := &storagev1.DescribeSharePartitionsRequest{GroupId: id}
	type slot struct{ topic, part int }
	var asked []slot
	for i, rt := range req.GetTopics() {
		t, known := byName[rt.GetName()]
		tr := &coordinatorv1.ShareOffsetsTopicResult{Name: rt.GetName()}
		if known {
			tr.TopicId = idBytes(t.ID)
		}
		for j, p := range rt.GetPartitions() {
			tr.Partitions = append(tr.Partitions, noState(p))
			if known && row != nil && p >= 0 && p < t.Partitions {
				sreq.Partitions = append(sreq.Partitions, &storagev1.SharePartitionRef{Topic: t.Name, Partition: p})
				asked = append(asked, slot{i, j})
			}
		}
		resp.Topics = append(resp.Topics, tr)
	}
	if len(asked) == 0 {
		return resp, nil
	}
	out, err := part.DescribeSharePartitions(cctx, sreq)
	if err != nil {
		return nil, err
	}
	for k, st := range out.GetPartitions() {
		if k >= len(asked) {
			break
		}
		r := resp.Topics[asked[k].topic].Partitions[asked[k].part]
		r.StartOffset, r.Lag, r.ErrorCode, r.ErrorMessage = st.GetStartOffset(), st.GetLag(), shareCode(st.GetError()), st.GetMessage()
	}
	return resp, nil
}

// AlterShareGroupOffsets implements Kafka's AlterShareGroupOffsets: the group (created
// Empty when missing, as Kafka) must have no members.
func (s *ShareCoordinator) AlterShareGroupOffsets(ctx context.Context, req *coordinatorv1.AlterShareGroupOffsetsRequest) (*coordinatorv1.AlterShareGroupOffsetsResponse, error) {
	resp := &coordinatorv1.AlterShareGroupOffsetsResponse{}
	id := req.GetGroupId()
	code, msg, err := s.inEmptyShareGroup(ctx, id, true, "Group %s is not a share group.", func(part storagev1.ShareServiceClient, byName map[string]topicInfo) (bool, error) {
		sreq := &storagev1.AlterSharePartitionsRequest{GroupId: id}
		var asked []*coordinatorv1.ShareOffsetsPartitionResult
		for _, rt := range req.GetTopics() {
			t, known := byName[rt.GetName()]
			tr := &coordinatorv1.ShareOffsetsTopicResult{Name: rt.GetName()}
			if known {
				tr.TopicId = idBytes(t.ID)
			}
			for _, p := range rt.GetPartitions() {
				r := &coordinatorv1.ShareOffsetsPartitionResult{Partition: p.GetPartition()}
				tr.Partitions = append(tr.Partitions, r)
				if !known || p.GetPartition() < 0 || p.GetPartition() >= t.Partitions {
					r.ErrorCode, r.ErrorMessage = int32(kerr.UnknownTopicOrPartition.Code), "This server does not host this topic-partition."
					continue
				}
				sreq.Partitions = append(sreq.Partitions, &storagev1.SharePartitionOffset{Topic: t.Name, Partition: p.GetPartition(), StartOffset: p.GetStartOffset()})
				asked = append(asked, r)
			}
			resp.Topics = append(resp.Topics, tr)
		}
		if len(asked) > 0 {
			cctx, cancel := context.WithTimeout(ctx, shareStorageTimeout)
			out, err := part.AlterSharePartitions(cctx, sreq)
			cancel()
			if err != nil {
				return false, err
			}
			for k, st := range out.GetPartitions() {
				if k < len(asked) {
					asked[k].StartOffset, asked[k].ErrorCode, asked[k].ErrorMessage = st.GetStartOffset(), shareCode(st.GetError()), st.GetMessage()
				}
			}
		}
		// Saved so that a group created here stays.
		return true, nil
	})
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp.ErrorCode, resp.ErrorMessage = code, msg
	return resp, nil
}

// DeleteShareGroupOffsets implements Kafka's DeleteShareGroupOffsets: every partition
// of each named topic loses its share state; the group must exist and be empty.
func (s *ShareCoordinator) DeleteShareGroupOffsets(ctx context.Context, req *coordinatorv1.DeleteShareGroupOffsetsRequest) (*coordinatorv1.DeleteShareGroupOffsetsResponse, error) {
	resp := &coordinatorv1.DeleteShareGroupOffsetsResponse{}
	id := req.GetGroupId()
	code, msg, err := s.inEmptyShareGroup(ctx, id, false, "Group %s not found.", func(part storagev1.ShareServiceClient, byName map[string]topicInfo) (bool, error) {
		for _, name := range req.GetTopics() {
			tr := &coordinatorv1.ShareOffsetsTopicResult{Name: name}
			resp.Topics = append(resp.Topics, tr)
			t, known := byName[name]
			if !known {
				tr.ErrorCode, tr.ErrorMessage = int32(kerr.UnknownTopicOrPartition.Code), "This server does not host this topic-partition."
				continue
			}
			tr.TopicId = idBytes(t.ID)
			sreq := &storagev1.DeleteSharePartitionsRequest{GroupId: id}
			for p := range t.Partitions {
				sreq.Partitions = append(sreq.Partitions, &storagev1.SharePartitionRef{Topic: name, Partition: p})
			}
			code, msg, err := s.deletePartitions(ctx, part, sreq)
			if err != nil {
				return false, err
			}
			tr.ErrorCode, tr.ErrorMessage = code, msg
		}
		return false, nil
	})
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp.ErrorCode, resp.ErrorMessage = code, msg
	return resp, nil
}

// inEmptyShareGroup runs fn, with storage-core's share service and the topics by
// name, under the row lock of share group id (created Empty first when create, as
// Kafka's AlterShareGroupOffsets does) when that group exists and has no members;
// fn's bool says whether to save the row. Otherwise it returns the Kafka code and
// message to answer: INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND
// (notFound, formatted with the id) for no share group, NON_EMPTY_GROUP when it has
// members. err is a storage-core or Postgres failure (or fn's), for rpcerr.Status.
func (s *ShareCoordinator) inEmptyShareGroup(ctx context.Context, id string, create bool, notFound string, fn func(part storagev1.ShareServiceClient, byName map[string]topicInfo) (bool, error)) (int32, string, error) {
	if id == "" {
		return int32(kerr.InvalidGroupID.Code), "GroupId can't be empty.", nil
	}
	part, err := s.partitionsClient()
	if err != nil {
		return 0, "", err
	}
	topics, err := s.c.topics(ctx)
	if err != nil {
		return 0, "", err
	}
	byName := topicsByName(topics)
	var code int32
	var msg string
	err = s.c.lockDoc(ctx, shareKind, id, create, func(d *doc, _ time.Time) (bool, error) {
		switch {
		case d == nil:
			code, msg = int32(kerr.GroupIDNotFound.Code), fmt.Sprintf(notFound, id)
			return false, nil
		case len(d.Members) > 0:
			code, msg = int32(kerr.NonEmptyGroup.Code), "The group has active members."
			return false, nil
		}
		return fn(part, byName)
	})
	return code, msg, err
}

// deletePartitions deletes the share state sreq names and returns the first
// per-partition error as a Kafka code and message.
func (s *ShareCoordinator) deletePartitions(ctx context.Context, part storagev1.ShareServiceClient, sreq *storagev1.DeleteSharePartitionsRequest) (int32, string, error) {
	cctx, cancel := context.WithTimeout(ctx, shareStorageTimeout)
	defer cancel()
	out, err := part.DeleteSharePartitions(cctx, sreq)
	if err != nil {
		return 0, "", err
	}
	for _, st := range out.GetPartitions() {
		if c := shareCode(st.GetError()); c != 0 {
			return c, st.GetMessage(), nil
		}
	}
	return 0, "", nil
}

// DeleteShareState removes every share partition of group id from storage-core (Kafka's
// DeleteGroups of a share group deletes its share state first). The group coordinator
// calls it under the group row lock, before it deletes the row.
func (s *ShareCoordinator) DeleteShareState(ctx context.Context, id string) error {
	part, err := s.partitionsClient()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, shareStorageTimeout)
	defer cancel()
	out, err := part.ListSharePartitions(cctx, &storagev1.ListSharePartitionsRequest{GroupId: id})
	if err != nil {
		return err
	}
	if len(out.GetPartitions()) == 0 {
		return nil
	}
	sreq := &storagev1.DeleteSharePartitionsRequest{GroupId: id}
	for _, p := range out.GetPartitions() {
		sreq.Partitions = append(sreq.Partitions, &storagev1.SharePartitionRef{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	code, msg, err := s.deletePartitions(ctx, part, sreq)
	if err == nil && code != 0 {
		err = errors.New("delete share state: " + msg)
	}
	return err
}
