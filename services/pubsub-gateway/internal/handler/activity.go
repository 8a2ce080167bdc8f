package handler

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Subscription activity, for the expiration policy. Google: "A subscription is
// considered active as long as any connected subscriber is successfully consuming
// messages from the subscription or is issuing operations on the subscription."
// Counted here: Pull, every StreamingPull request (the stream's first request and the
// client's acks, modacks and 30 s keepalives while it stays open), Acknowledge,
// ModifyAckDeadline, Seek and a successful push. Updates (UpdateSubscription,
// ModifyPushConfig) restart the clock in the coordinator. Publishing to the topic does
// not count: it is topic activity, not subscriber activity.
//
// Reports are batched: touch only marks the subscription, and the flush loop sends the
// marked ones in one RecordPubSubActivity call every activityFlush, skipping a
// subscription reported less than activityEvery ago. So the coordinator sees at most
// one report a minute per subscription and replica, and the expiration clock is at
// most activityEvery+activityFlush behind (TTLs are at least a day).
const (
	activityEvery = time.Minute
	activityFlush = 5 * time.Second
)

// activity is the book of subscriptions to report.
type activity struct {
	mu       sync.Mutex
	pending  map[string]bool
	reported map[string]time.Time // last successful report
}

func newActivity() *activity {
	return &activity{pending: map[string]bool{}, reported: map[string]time.Time{}}
}

// touch marks subscription id active now.
func (h *Subscriber) touch(id string) {
	a := h.act
	now := h.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, ok := a.reported[id]; ok && now.Sub(at) < activityEvery {
		return
	}
	a.pending[id] = true
}

// RunActivity reports activity until ctx ends, then once more.
func (h *Subscriber) RunActivity(ctx context.Context) {
	t := time.NewTicker(activityFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			h.flushActivity(fctx)
			cancel()
			return
		case <-t.C:
			h.flushActivity(ctx)
		}
	}
}

// flushActivity sends the pending reports; on failure they stay pending.
func (h *Subscriber) flushActivity(ctx context.Context) {
	a := h.act
	now := h.now()
	a.mu.Lock()
	for id, at := range a.reported {
		if now.Sub(at) >= activityEvery {
			delete(a.reported, id)
		}
	}
	if len(a.pending) == 0 {
		a.mu.Unlock()
		return
	}
	ids := make([]string, 0, len(a.pending))
	for id := range a.pending {
		ids = append(ids, id)
	}
	clear(a.pending)
	a.mu.Unlock()
	_, err := h.reg.RecordPubSubActivity(ctx, &coordinatorv1.RecordPubSubActivityRequest{SubscriptionIds: ids})
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		h.log.Debug("could not report subscription activity; retrying", zap.Int("subscriptions", len(ids)), zap.Error(err))
		for _, id := range ids {
			a.pending[id] = true
		}
		return
	}
	for _, id := range ids {
		a.reported[id] = now
	}
}

// expirationTTLMs is the registry's expiration TTL of s: 0 (never) when the policy has
// no ttl. normalizeSub has set the default policy.
func expirationTTLMs(s *pubsubpb.Subscription) int64 {
	if ttl := s.GetExpirationPolicy().GetTtl(); ttl != nil {
		return ttl.AsDuration().Milliseconds()
	}
	return 0
}
