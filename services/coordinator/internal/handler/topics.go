package handler

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
	"github.com/tributary/tributary/services/coordinator/internal/topicconfig"
)

// CreateTopics registers topics (Kafka CreateTopics). Per topic: a name given twice is
// INVALID_REQUEST (42); a bad name INVALID_TOPIC_EXCEPTION (17); partitions other than
// -1 (= 1) or 1..256 INVALID_PARTITIONS (37); an unknown config or bad value
// INVALID_CONFIG (40); an existing topic TOPIC_ALREADY_EXISTS (36); a name colliding
// with an existing one ("." vs "_") INVALID_TOPIC_EXCEPTION. The partitions' channels
// are created before the row is inserted, so a topic is usable for Produce as soon as
// it is visible; a storage-core failure is KAFKA_STORAGE_ERROR (56). With validate_only
// nothing is created.
func (h *Handler) CreateTopics(ctx context.Context, req *coordinatorv1.CreateTopicsRequest) (*coordinatorv1.CreateTopicsResponse, error) {
	names := make([]string, len(req.GetTopics()))
	for i, t := range req.GetTopics() {
		names[i] = t.GetName()
	}
	dup := duplicates(names)
	resp := &coordinatorv1.CreateTopicsResponse{Results: make([]*coordinatorv1.TopicResult, 0, len(names))}
	for _, t := range req.GetTopics() {
		if dup[t.GetName()] {
			resp.Results = append(resp.Results, topicResult(t.GetName(), kerr.InvalidRequest, "topic "+t.GetName()+" appears more than once in the request"))
			continue
		}
		res, err := h.createTopic(ctx, t, req.GetValidateOnly())
		if err != nil {
			return nil, statusError(err)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

func (h *Handler) createTopic(ctx context.Context, req *coordinatorv1.CreatableTopic, validateOnly bool) (*coordinatorv1.TopicResult, error) {
	name := req.GetName()
	if err := channel.ValidateKafkaTopic(name); err != nil {
		return topicResult(name, kerr.InvalidTopicException, err.Error()), nil
	}
	partitions := req.GetPartitions()
	if partitions == -1 {
		partitions = 1
	}
	if partitions < 1 || partitions > channel.MaxPartitions {
		return topicResult(name, kerr.InvalidPartitions, fmt.Sprintf("number of partitions must be -1 (default 1) or 1..%d, got %d", channel.MaxPartitions, req.GetPartitions())), nil
	}
	configs, err := topicconfig.ValidateAll(req.GetConfigs())
	if err != nil {
		return topicResult(name, kerr.InvalidConfig, err.Error()), nil
	}
	t := &store.Topic{Name: name, ID: newTopicID(), Partitions: partitions, Configs: configs}

	var res *coordinatorv1.TopicResult
	err = h.withTopic(ctx, name, func(l *store.Locked) error {
		if _, err := l.Get(ctx, name); err == nil {
			res = topicResult(name, kerr.TopicAlreadyExists, "topic "+name+" already exists")
			return nil
		} else if !errors.Is(err, store.ErrTopicNotFound) {
			return err
		}
		if other, ok, err := l.Collision(ctx, name); err != nil {
			return err
		} else if ok {
			res = topicResult(name, kerr.InvalidTopicException, "topic "+name+" collides with existing topic "+other+" (\".\" and \"_\" are interchangeable)")
			return nil
		}
		if validateOnly {
			res = &coordinatorv1.TopicResult{Name: name, Topic: &coordinatorv1.Topic{Name: name, Partitions: partitions, Configs: configs}}
			return nil
		}
		if err := h.createChannels(ctx, name, 0, partitions, topicconfig.ChannelConfig(configs)); err != nil {
			h.log.Warn("create topic: storage-core failed", zap.String("topic", name), zap.Error(err))
			res = topicResult(name, kerr.KafkaStorageError, err.Error())
			return nil
		}
		if err := l.Insert(ctx, t); errors.Is(err, store.ErrTopicExists) {
			res = topicResult(name, kerr.TopicAlreadyExists, "topic "+name+" already exists")
			return nil
		} else if err != nil {
			return err
		}
		res = &coordinatorv1.TopicResult{Name: name, Topic: toProto(t)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !validateOnly && res.GetErrorCode() == 0 {
		h.log.Info("created topic", zap.String("topic", name), zap.Int32("partitions", partitions), zap.String("topic_id", uuid.UUID(t.ID).String()))
		h.changed(name)
	}
	return res, nil
}

// newTopicID returns a random (v4) topic id that is not the zero id and whose Kafka
// string form (unpadded URL-safe base64) does not start with "-", as Kafka's
// Uuid.randomUuid guarantees (such ids look like command-line flags).
func newTopicID() [16]byte {
	for {
		id := uuid.New()
		if id != uuid.Nil && base64.RawURLEncoding.EncodeToString(id[:])[0] != '-' {
			return id
		}
	}
}

// DeleteTopics unregisters topics by name or by id (with the groups' committed offsets
// of them, as Kafka deletes a deleted partition's offsets), then deletes their channels. A
// missing name is UNKNOWN_TOPIC_OR_PARTITION (3); an unknown id UNKNOWN_TOPIC_ID (100);
// a malformed id INVALID_REQUEST (42). Once the row is gone the topic is deleted; a
// storage-core failure after that is logged (the channels are adopted if the topic is
// created again).
func (h *Handler) DeleteTopics(ctx context.Context, req *coordinatorv1.DeleteTopicsRequest) (*coordinatorv1.DeleteTopicsResponse, error) {
	resp := &coordinatorv1.DeleteTopicsResponse{}
	for _, name := range req.GetNames() {
		res, err := h.deleteTopic(ctx, name, nil)
		if err != nil {
			return nil, statusError(err)
		}
		resp.Results = append(resp.Results, res)
	}
	for _, raw := range req.GetTopicIds() {
		id, err := uuid.FromBytes(raw)
		if err != nil {
			resp.Results = append(resp.Results, topicResult("", kerr.InvalidRequest, fmt.Sprintf("topic id must be 16 bytes, got %d", len(raw))))
			continue
		}
		name, err := h.store.TopicNameByID(ctx, id)
		if errors.Is(err, store.ErrTopicNotFound) {
			resp.Results = append(resp.Results, topicResult("", kerr.UnknownTopicID, "no topic has id "+id.String()))
			continue
		}
		if err != nil {
			return nil, statusError(err)
		}
		res, err := h.deleteTopic(ctx, name, (*[16]byte)(&id))
		if err != nil {
			return nil, statusError(err)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

// deleteTopic deletes topic name; when id is set the topic must still have that id
// (else UNKNOWN_TOPIC_ID: it was deleted and re-created meanwhile).
func (h *Handler) deleteTopic(ctx context.Context, name string, id *[16]byte) (*coordinatorv1.TopicResult, error) {
	var res *coordinatorv1.TopicResult
	err := h.withTopic(ctx, name, func(l *store.Locked) error {
		t, err := l.Get(ctx, name)
		if errors.Is(err, store.ErrTopicNotFound) || (err == nil && id != nil && t.ID != *id) {
			if id != nil {
				res = topicResult(name, kerr.UnknownTopicID, "no topic has id "+uuid.UUID(*id).String())
			} else {
				res = topicResult(name, kerr.UnknownTopicOrPartition, "topic "+name+" does not exist")
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.Delete(ctx, name); err != nil {
			return err
		}
		res = &coordinatorv1.TopicResult{Name: name, Topic: toProto(t)}
		if err := h.deleteChannels(ctx, name, partitionRange(0, t.Partitions)); err != nil {
			h.log.Error("deleted topic but not all its channels", zap.String("topic", name), zap.Error(err))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res.GetErrorCode() == 0 {
		h.log.Info("deleted topic", zap.String("topic", name))
		h.changed(name)
	}
	return res, nil
}

// CreatePartitions grows topics (Kafka CreatePartitions). The new count must exceed
// the current one and be at most 256, else INVALID_PARTITIONS (37); a missing topic is
// UNKNOWN_TOPIC_OR_PARTITION (3). New channels are created before the count is raised.
func (h *Handler) CreatePartitions(ctx context.Context, req *coordinatorv1.CreatePartitionsRequest) (*coordinatorv1.CreatePartitionsResponse, error) {
	names := make([]string, len(req.GetTopics()))
	for i, t := range req.GetTopics() {
		names[i] = t.GetName()
	}
	dup := duplicates(names)
	resp := &coordinatorv1.CreatePartitionsResponse{}
	for _, g := range req.GetTopics() {
		if dup[g.GetName()] {
			resp.Results = append(resp.Results, topicResult(g.GetName(), kerr.InvalidRequest, "topic "+g.GetName()+" appears more than once in the request"))
			continue
		}
		res, err := h.growTopic(ctx, g.GetName(), g.GetCount(), req.GetValidateOnly())
		if err != nil {
			return nil, statusError(err)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

func (h *Handler) growTopic(ctx context.Context, name string, count int32, validateOnly bool) (*coordinatorv1.TopicResult, error) {
	if channel.ValidateKafkaTopic(name) != nil {
		return topicResult(name, kerr.UnknownTopicOrPartition, "topic "+name+" does not exist"), nil
	}
	var res *coordinatorv1.TopicResult
	grown := false
	err := h.withTopic(ctx, name, func(l *store.Locked) error {
		t, err := l.Get(ctx, name)
		if errors.Is(err, store.ErrTopicNotFound) {
			res = topicResult(name, kerr.UnknownTopicOrPartition, "topic "+name+" does not exist")
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case count == t.Partitions:
			res = topicResult(name, kerr.InvalidPartitions, fmt.Sprintf("topic already has %d partitions", t.Partitions))
			return nil
		case count < t.Partitions:
			res = topicResult(name, kerr.InvalidPartitions, fmt.Sprintf("topic currently has %d partitions, more than the requested %d: partitions only grow", t.Partitions, count))
			return nil
		case count > channel.MaxPartitions:
			res = topicResult(name, kerr.InvalidPartitions, fmt.Sprintf("a topic has at most %d partitions, %d requested", channel.MaxPartitions, count))
			return nil
		}
		if validateOnly {
			t.Partitions = count
			res = &coordinatorv1.TopicResult{Name: name, Topic: toProto(t)}
			return nil
		}
		if err := h.createChannels(ctx, name, t.Partitions, count, topicconfig.ChannelConfig(t.Configs)); err != nil {
			h.log.Warn("create partitions: storage-core failed", zap.String("topic", name), zap.Error(err))
			res = topicResult(name, kerr.KafkaStorageError, err.Error())
			return nil
		}
		if err := l.SetPartitions(ctx, name, count); err != nil {
			return err
		}
		t.Partitions = count
		res = &coordinatorv1.TopicResult{Name: name, Topic: toProto(t)}
		grown = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if grown {
		h.log.Info("grew topic", zap.String("topic", name), zap.Int32("partitions", count))
		h.changed(name)
	}
	return res, nil
}

// GetTopics returns the named topics in request order (error_code 3 for a missing
// one, 17 for an invalid name), or every topic sorted by name when all is set.
func (h *Handler) GetTopics(ctx context.Context, req *coordinatorv1.GetTopicsRequest) (*coordinatorv1.GetTopicsResponse, error) {
	resp := &coordinatorv1.GetTopicsResponse{}
	if req.GetAll() {
		all, err := h.store.AllTopics(ctx)
		if err != nil {
			return nil, statusError(err)
		}
		for _, t := range all {
			resp.Topics = append(resp.Topics, toProto(t))
		}
		return resp, nil
	}
	found, err := h.store.Topics(ctx, req.GetNames())
	if err != nil {
		return nil, statusError(err)
	}
	for _, name := range req.GetNames() {
		t, ok := found[name]
		switch {
		case ok:
			resp.Topics = append(resp.Topics, toProto(t))
		case channel.ValidateKafkaTopic(name) != nil:
			resp.Topics = append(resp.Topics, &coordinatorv1.Topic{Name: name, ErrorCode: code(kerr.InvalidTopicException)})
		default:
			resp.Topics = append(resp.Topics, &coordinatorv1.Topic{Name: name, ErrorCode: code(kerr.UnknownTopicOrPartition)})
		}
	}
	return resp, nil
}
