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
// topic is usable again. It lists storage-core's "kafka." channels once, then, for each
// topic missing some, re-checks the topic under its lock and creates the missing
// channels with the topic's configs. It returns how many channels it created. Channels
// without a topic are left alone (they are adopted if the topic is created).
func (h *Handler) Reconcile(ctx context.Context) (int, error) {
	topics, err := h.store.AllTopics(ctx)
	if err != nil {
		return 0, err
	}
	if len(topics) == 0 {
		return 0, nil
	}
	list, err := h.storage.ListChannels(ctx, &storagev1.ListChannelsRequest{Prefix: "kafka."})
	if err != nil {
		return 0, fmt.Errorf("%w: list channels: %v", ErrStorage, err)
	}
	have := make(map[string]map[int32]bool)
	for _, c := range list.GetChannels() {
		t, p, ok := channel.ParseKafka(c.GetName())
		if !ok {
			continue
		}
		if have[t] == nil {
			have[t] = map[int32]bool{}
		}
		have[t][p] = true
	}
	created := 0
	for _, t := range topics {
		if !missingAny(have[t.Name], t.Partitions) {
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
				if have[t.Name][p] {
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

func missingAny(have map[int32]bool, partitions int32) bool {
	for p := int32(0); p < partitions; p++ {
		if !have[p] {
			return true
		}
	}
	return false
}
