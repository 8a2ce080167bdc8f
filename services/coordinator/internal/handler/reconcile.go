package handler

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
	"github.com/tributary/tributary/services/coordinator/internal/topicconfig"
)

// Reconcile creates the channels of registered topics that storage-core lacks (e.g.
// after its data directory was lost while Postgres kept the registry), so every visible
// topic is usable again. It lists storage-core's Kafka channels (channel.KafkaPrefix)
// once, then, for each topic missing some, re-checks the topic under its lock and
// creates the missing channels with the topic's configs. It returns how many channels it created. Channels
// without a topic are left alone (they are adopted if the topic is created).
//
// It also pushes the topic's configs to channels whose timestamp limits
// (message.timestamp.before/after.max.ms) differ from them: channels made before
// storage-core enforced the limits hold none, whatever the topic says, until the
// topic's configs are next altered.
func (h *Handler) Reconcile(ctx context.Context) (int, error) {
	topics, err := h.store.AllTopics(ctx)
	if err != nil {
		return 0, err
	}
	if len(topics) == 0 {
		return 0, nil
	}
	list, err := h.storage.ListChannels(ctx, &storagev1.ListChannelsRequest{Prefix: channel.KafkaPrefix})
	if err != nil {
		return 0, fmt.Errorf("%w: list channels: %v", ErrStorage, err)
	}
	have := make(map[string]map[int32]*storagev1.ChannelConfig)
	for _, c := range list.GetChannels() {
		t, p, ok := channel.ParseKafka(c.GetName())
		if !ok {
			continue
		}
		if have[t] == nil {
			have[t] = map[int32]*storagev1.ChannelConfig{}
		}
		cc := c.GetConfig()
		if cc == nil {
			cc = &storagev1.ChannelConfig{}
		}
		have[t][p] = cc
	}
	created := 0
	for _, t := range topics {
		if !missingAny(have[t.Name], t.Partitions) {
			if staleLimits(have[t.Name], topicconfig.ChannelConfig(t.Configs)) {
				// Not fatal: the missing channels of other topics matter more.
				if err := h.refreshLimits(ctx, t.Name, have[t.Name]); err != nil {
					h.log.Warn("could not push timestamp limits to a topic's channels", zap.String("topic", t.Name), zap.Error(err))
				}
			}
			continue
		}
		err := h.withTopic(ctx, t.Name, func(l *store.Locked) error {
			cur, err := l.Get(ctx, t.Name)
			if errors.Is(err, store.ErrTopicNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			cfg := topicconfig.ChannelConfig(cur.Configs)
			for p := int32(0); p < cur.Partitions; p++ {
				if have[t.Name][p] != nil {
					continue
				}
				if err := h.createChannels(ctx, cur.Name, p, p+1, cfg); err != nil {
					return err
				}
				created++
				h.log.Warn("recreated missing channel of a registered topic", zap.String("topic", cur.Name), zap.Int32("partition", p))
			}
			return nil
		})
		if err != nil {
			return created, err
		}
	}
	return created, nil
}

func missingAny(have map[int32]*storagev1.ChannelConfig, partitions int32) bool {
	for p := int32(0); p < partitions; p++ {
		if have[p] == nil {
			return true
		}
	}
	return false
}

// staleLimits reports whether a channel in have has other timestamp limits than want.
func staleLimits(have map[int32]*storagev1.ChannelConfig, want *storagev1.ChannelConfig) bool {
	for _, c := range have {
		if c.GetTimestampBeforeMaxMs() != want.GetTimestampBeforeMaxMs() || c.GetTimestampAfterMaxMs() != want.GetTimestampAfterMaxMs() {
			return true
		}
	}
	return false
}

// refreshLimits pushes topic's configs to its channels (have, as listed) whose
// timestamp limits differ from them, re-reading the topic under its lock.
func (h *Handler) refreshLimits(ctx context.Context, topic string, have map[int32]*storagev1.ChannelConfig) error {
	return h.withTopic(ctx, topic, func(l *store.Locked) error {
		cur, err := l.Get(ctx, topic)
		if errors.Is(err, store.ErrTopicNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		cfg := topicconfig.ChannelConfig(cur.Configs)
		if !staleLimits(have, cfg) {
			return nil
		}
		if err := h.configureChannels(ctx, cur.Name, cur.Partitions, cfg); err != nil {
			return err
		}
		h.log.Info("pushed timestamp limits to a topic's channels", zap.String("topic", cur.Name))
		return nil
	})
}
