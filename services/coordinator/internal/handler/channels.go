package handler

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/topicconfig"
)

// storageParallelism bounds concurrent storage-core calls for one topic.
const storageParallelism = 16

// createChannels creates the log channels of topic's partitions [from, to) with cfg.
// A channel that already exists (left by an earlier failed delete, or created natively
// through the storage API) is adopted: its data is kept and its config set to cfg. On
// failure the channels this call created are deleted again (best effort) and the error
// wraps ErrStorage.
func (h *Handler) createChannels(ctx context.Context, topic string, from, to int32, cfg *storagev1.ChannelConfig) error {
	created := make([]bool, to-from)
	// No shared cancellation: every call runs to its end, so created tells exactly which
	// channels this call made and must remove on failure.
	var g errgroup.Group
	g.SetLimit(storageParallelism)
	gctx := ctx
	for p := from; p < to; p++ {
		name := channel.KafkaPartition(topic, p)
		g.Go(func() error {
			resp, err := h.storage.CreateChannel(gctx, &storagev1.CreateChannelRequest{
				Name: name, Kind: storagev1.ChannelKind_CHANNEL_KIND_LOG, Config: cfg, IfNotExists: true,
			})
			if err != nil {
				return fmt.Errorf("%w: create channel %s: %v", ErrStorage, name, err)
			}
			if resp.GetCreated() {
				created[p-from] = true
				return nil
			}
			if _, err := h.storage.UpdateChannelConfig(gctx, &storagev1.UpdateChannelConfigRequest{
				Name: name, Config: cfg, UpdateMask: topicconfig.StorageMask,
			}); err != nil {
				return fmt.Errorf("%w: configure existing channel %s: %v", ErrStorage, name, err)
			}
			return nil
		})
	}
	err := g.Wait()
	if err == nil {
		return nil
	}
	var undo []int32
	for i, c := range created {
		if c {
			undo = append(undo, from+int32(i))
		}
	}
	if uerr := h.deleteChannels(context.WithoutCancel(ctx), topic, undo); uerr != nil {
		h.log.Warn("could not remove channels after a failed create", zap.String("topic", topic), zap.Error(uerr))
	}
	return err
}

// deleteChannels deletes the channels of the given partitions of topic (missing ones
// are fine). The error wraps ErrStorage and names the first failure.
func (h *Handler) deleteChannels(ctx context.Context, topic string, partitions []int32) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(storageParallelism)
	for _, p := range partitions {
		name := channel.KafkaPartition(topic, p)
		g.Go(func() error {
			if _, err := h.storage.DeleteChannel(gctx, &storagev1.DeleteChannelRequest{Name: name, IfExists: true}); err != nil {
				return fmt.Errorf("%w: delete channel %s: %v", ErrStorage, name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// configureChannels sets cfg on the channels of partitions [0, partitions) of topic.
func (h *Handler) configureChannels(ctx context.Context, topic string, partitions int32, cfg *storagev1.ChannelConfig) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(storageParallelism)
	for p := int32(0); p < partitions; p++ {
		name := channel.KafkaPartition(topic, p)
		g.Go(func() error {
			if _, err := h.storage.UpdateChannelConfig(gctx, &storagev1.UpdateChannelConfigRequest{
				Name: name, Config: cfg, UpdateMask: topicconfig.StorageMask,
			}); err != nil {
				return fmt.Errorf("%w: configure channel %s: %v", ErrStorage, name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func partitionRange(from, to int32) []int32 {
	out := make([]int32, 0, to-from)
	for p := from; p < to; p++ {
		out = append(out, p)
	}
	return out
}
