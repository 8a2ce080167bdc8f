package handler

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
	"github.com/tributary/tributary/services/coordinator/internal/topicconfig"
)

// DescribeTopicConfigs returns, per named topic, every known topic config (or only
// config_names; unknown names are left out, as Kafka does) with its value in force and
// its source: TOPIC when set on the topic, DEFAULT otherwise. Kafka's internal topics
// (channel.KafkaInternalTopics) are described with the configs Kafka creates them
// with. A missing topic is UNKNOWN_TOPIC_OR_PARTITION (3).
func (h *Handler) DescribeTopicConfigs(ctx context.Context, req *coordinatorv1.DescribeTopicConfigsRequest) (*coordinatorv1.DescribeTopicConfigsResponse, error) {
	found, err := h.store.Topics(ctx, req.GetNames())
	if err != nil {
		return nil, statusError(err)
	}
	for _, name := range req.GetNames() {
		if it, ok := channel.KafkaInternal(name); ok {
			found[name] = &store.Topic{Name: name, Partitions: it.Partitions, Configs: it.Configs}
		}
	}
	want := map[string]bool{}
	for _, n := range req.GetConfigNames() {
		want[n] = true
	}
	resp := &coordinatorv1.DescribeTopicConfigsResponse{}
	for _, name := range req.GetNames() {
		t, ok := found[name]
		if !ok {
			resp.Topics = append(resp.Topics, &coordinatorv1.TopicConfigs{
				Name: name, ErrorCode: code(kerr.UnknownTopicOrPartition), ErrorMessage: "topic " + name + " does not exist",
			})
			continue
		}
		tc := &coordinatorv1.TopicConfigs{Name: name}
		for _, d := range topicconfig.All() {
			if len(want) > 0 && !want[d.Name] {
				continue
			}
			e := &coordinatorv1.ConfigEntry{Name: d.Name, Value: d.Default, Source: coordinatorv1.ConfigSource_CONFIG_SOURCE_DEFAULT, Type: d.Type, Documentation: d.Doc}
			if v, set := t.Configs[d.Name]; set {
				e.Value, e.Source = v, coordinatorv1.ConfigSource_CONFIG_SOURCE_TOPIC
			}
			tc.Entries = append(tc.Entries, e)
		}
		resp.Topics = append(resp.Topics, tc)
	}
	return resp, nil
}

// AlterTopicConfigs changes topic configs with Kafka IncrementalAlterConfigs semantics
// (SET, DELETE, APPEND, SUBTRACT; APPEND and SUBTRACT on lists only), or with replace
// those of the non-incremental AlterConfigs (the SETs become the whole set of overrides;
// any other op is INVALID_REQUEST), validated the same way. A missing topic is
// UNKNOWN_TOPIC_OR_PARTITION (3); an unknown config, a bad value or APPEND/SUBTRACT on
// a non-list INVALID_CONFIG (40); an unknown op, a config named twice or a topic named
// twice INVALID_REQUEST (42). With validate_only nothing changes. Otherwise the new
// configs are stored, then the storage-relevant ones are pushed to every partition's
// channel; a push failure is KAFKA_STORAGE_ERROR (56) and a retry re-pushes.
func (h *Handler) AlterTopicConfigs(ctx context.Context, req *coordinatorv1.AlterTopicConfigsRequest) (*coordinatorv1.AlterTopicConfigsResponse, error) {
	names := make([]string, len(req.GetTopics()))
	for i, t := range req.GetTopics() {
		names[i] = t.GetName()
	}
	dup := duplicates(names)
	resp := &coordinatorv1.AlterTopicConfigsResponse{}
	for _, ta := range req.GetTopics() {
		if dup[ta.GetName()] {
			resp.Results = append(resp.Results, topicResult(ta.GetName(), kerr.InvalidRequest, "topic "+ta.GetName()+" appears more than once in the request"))
			continue
		}
		res, err := h.alterTopic(ctx, ta, req.GetValidateOnly(), req.GetReplace())
		if err != nil {
			return nil, statusError(err)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

func (h *Handler) alterTopic(ctx context.Context, ta *coordinatorv1.TopicAlteration, validateOnly, replace bool) (*coordinatorv1.TopicResult, error) {
	name := ta.GetName()
	alts := make([]topicconfig.Alteration, len(ta.GetAlterations()))
	for i, a := range ta.GetAlterations() {
		alts[i] = topicconfig.Alteration{Name: a.GetName(), Op: a.GetOp(), Value: a.GetValue()}
	}
	var res *coordinatorv1.TopicResult
	stored := false
	err := h.withTopic(ctx, name, func(l *store.Locked) error {
		t, err := l.Get(ctx, name)
		if errors.Is(err, store.ErrTopicNotFound) {
			res = topicResult(name, kerr.UnknownTopicOrPartition, "topic "+name+" does not exist")
			return nil
		}
		if err != nil {
			return err
		}
		var next map[string]string
		if replace {
			next, err = topicconfig.Replace(alts)
		} else {
			next, err = topicconfig.Alter(t.Configs, alts)
		}
		if err != nil {
			e := kerr.InvalidConfig
			if errors.Is(err, topicconfig.ErrInvalidRequest) {
				e = kerr.InvalidRequest
			}
			res = topicResult(name, e, err.Error())
			return nil
		}
		t.Configs = next
		if validateOnly {
			res = &coordinatorv1.TopicResult{Name: name, Topic: toProto(t)}
			return nil
		}
		if err := l.SetConfigs(ctx, name, next); err != nil {
			return err
		}
		stored = true
		if err := h.configureChannels(ctx, name, t.Partitions, topicconfig.ChannelConfig(next)); err != nil {
			h.log.Warn("alter configs: stored but not pushed to storage-core", zap.String("topic", name), zap.Error(err))
			res = topicResult(name, kerr.KafkaStorageError, "configs stored but not applied to every partition, retry: "+err.Error())
			return nil
		}
		res = &coordinatorv1.TopicResult{Name: name, Topic: toProto(t)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if stored {
		h.log.Info("altered topic configs", zap.String("topic", name))
		h.changed(name)
	}
	return res, nil
}
