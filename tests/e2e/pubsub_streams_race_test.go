package e2e

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TestPubSubStreamsRaceAndCancel: StreamingPull limits that are negative, zero or
// huge mean no limit (google/pubsub/v1: "<= 0" is none; MaxInt64 must not overflow the
// window); eight streams on one subscription through two replicas, each with
// max_outstanding_messages 1, half of them cancelled while holding an unacked message,
// never get more than one message in a response, and every message is acked in the
// end (none is lost with a cancelled stream).
func TestPubSubStreamsRaceAndCancel(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	_, sc2 := rawPubSub(t, s.PubSubAddrs[1])
	ctx := ctxT(t, 3*time.Minute)
	publish := func(topic string, n int) {
		msgs := make([]*pubsubpb.PubsubMessage, n)
		for i := range msgs {
			msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i))}
		}
		if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: msgs}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	// Unlimited by negative and huge limits: all come at once.
	for _, lim := range [][2]int64{{-5, -5}, {math.MaxInt64, math.MaxInt64}, {0, math.MinInt64}} {
		topic, sub := psID("hp"), psID("hp-sub")
		mustCreateTopic(t, pub, topic)
		mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 60})
		publish(topic, 50)
		st, err := sc.StreamingPull(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pubsubpb.StreamingPullRequest{Subscription: subPath(sub), StreamAckDeadlineSeconds: 60,
			MaxOutstandingMessages: lim[0], MaxOutstandingBytes: lim[1]}); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < 50 {
			r, err := st.Recv()
			if err != nil {
				t.Fatalf("limits %v: %v after %d", lim, err, got)
			}
			got += len(r.GetReceivedMessages())
		}
		_ = st.CloseSend()
	}
	// Many streams racing (max 1 each), half cancelled mid-delivery without acking:
	// every message is acked in the end, none outstanding beyond the limit.
	topic, sub := psID("hr"), psID("hr-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 10})
	const n = 60
	publish(topic, n)
	var mu sync.Mutex
	acked := map[string]bool{}
	over := 0
	var wg sync.WaitGroup
	allCtx, allDone := context.WithCancel(ctx)
	defer allDone()
	worker := func(i int, c pubsubpb.SubscriberClient, cancelAfter int) {
		defer wg.Done()
		sctx, cancel := context.WithCancel(allCtx)
		defer cancel()
		st, err := c.StreamingPull(sctx)
		if err != nil {
			t.Error(err)
			return
		}
		if err := st.Send(&pubsubpb.StreamingPullRequest{Subscription: subPath(sub), StreamAckDeadlineSeconds: 10,
			MaxOutstandingMessages: 1}); err != nil {
			t.Error(err)
			return
		}
		seen := 0
		for {
			mu.Lock()
			done := len(acked) == n
			mu.Unlock()
			if done {
				return
			}
			r, err := st.Recv()
			if err != nil {
				if sctx.Err() == nil {
					t.Errorf("stream %d: %v", i, err)
				}
				return
			}
			ms := r.GetReceivedMessages()
			if len(ms) == 0 {
				continue
			}
			if len(ms) > 1 {
				mu.Lock()
				over++
				mu.Unlock()
			}
			seen += len(ms)
			if cancelAfter > 0 && seen >= cancelAfter {
				return // cancelled holding a message it never acks
			}
			req := &pubsubpb.StreamingPullRequest{}
			for _, m := range ms {
				req.AckIds = append(req.AckIds, m.GetAckId())
			}
			if err := st.Send(req); err != nil {
				t.Errorf("stream %d ack: %v", i, err)
				return
			}
			mu.Lock()
			for _, m := range ms {
				acked[string(m.GetMessage().GetData())] = true
			}
			if len(acked) == n {
				allDone()
			}
			mu.Unlock()
		}
	}
	start := time.Now()
	for i := range 8 {
		c := sc
		if i%2 == 1 {
			c = sc2
		}
		cancelAfter := 0
		if i < 4 {
			cancelAfter = 2 + i
		}
		wg.Add(1)
		go worker(i, c, cancelAfter)
	}
	// Then plain workers drain what the cancelled streams held (back after its lease).
	wg.Wait()
	for allCtx.Err() == nil && time.Since(start) < 2*time.Minute {
		wg.Add(2)
		go worker(100, sc, 0)
		go worker(101, sc2, 0)
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != n || over > 0 {
		t.Errorf("%d of %d messages acked in %v; %d responses over max_outstanding_messages 1", len(acked), n, time.Since(start), over)
	}
}
