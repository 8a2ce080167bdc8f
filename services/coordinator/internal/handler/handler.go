// Package handler implements tributary.coordinator.v1.CoordinatorService: the Kafka
// topic registry (kept in Postgres through package store, with one storage-core channel
// per partition) and producer ids.
//
// Per-topic outcomes are Kafka error codes (franz-go kerr numbers) in the response;
// only a failure of the whole call (Postgres unreachable) is a gRPC status.
package handler

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Notifier is told after a topic was created, deleted, grown or reconfigured.
type Notifier interface {
	TopicChanged(topic string)
}

// Handler serves CoordinatorService.
type Handler struct {
	coordinatorv1.UnimplementedCoordinatorServiceServer

	store   *store.Store
	storage storagev1.StorageServiceClient
	notify  Notifier
	pids    *producerIDs
	txns    TxnInit
	log     *zap.Logger
}

// New returns a Handler over st (the registry), storage (storage-core) and notify.
func New(st *store.Store, storage storagev1.StorageServiceClient, notify Notifier, log *zap.Logger) *Handler {
	return &Handler{
		store:   st,
		storage: storage,
		notify:  notify,
		pids:    &producerIDs{store: st},
		log:     log,
	}
}

func code(e *kerr.Error) int32 { return int32(e.Code) }

func topicResult(name string, e *kerr.Error, msg string) *coordinatorv1.TopicResult {
	return &coordinatorv1.TopicResult{Name: name, ErrorCode: code(e), ErrorMessage: msg}
}

func toProto(t *store.Topic) *coordinatorv1.Topic {
	configs := make(map[string]string, len(t.Configs))
	for k, v := range t.Configs {
		configs[k] = v
	}
	return &coordinatorv1.Topic{Name: t.Name, TopicId: t.ID[:], Partitions: t.Partitions, Configs: configs}
}

func (h *Handler) changed(topic string) {
	if h.notify != nil {
		h.notify.TopicChanged(topic)
	}
}

// duplicates returns the names that occur more than once.
func duplicates(names []string) map[string]bool {
	seen := make(map[string]int, len(names))
	for _, n := range names {
		seen[n]++
	}
	dup := map[string]bool{}
	for n, c := range seen {
		if c > 1 {
			dup[n] = true
		}
	}
	return dup
}

// withTopic runs fn under the topic's lock. An error from fn or the lock fails the
// whole call (it is turned into a gRPC status by the caller).
func (h *Handler) withTopic(ctx context.Context, name string, fn func(l *store.Locked) error) error {
	return h.store.WithTopicLock(ctx, name, fn)
}
