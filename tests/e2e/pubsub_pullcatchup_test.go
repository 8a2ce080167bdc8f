package e2e

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// Publish a, publish b (each answered), then one unary Pull returns both: the test
// suites users run against the emulator count on it ("publish N, pull once, expect
// N"). The gateway's Pull asks storage-core to catch up with the topic first (the copy
// from topic log to subscription queue is asynchronous). Pulls alternate between the
// replicas and a few return immediately.
func TestPubSubPullReadsWrites(t *testing.T) {
	s := pubsubStack(t)
	pub, _ := rawPubSub(t, s.PubSubAddrs[0])
	_, sc0 := rawPubSub(t, s.PubSubAddrs[0])
	_, sc1 := rawPubSub(t, s.PubSubAddrs[1])
	pullReadsWrites(t, pub, []pubsubpb.SubscriberClient{sc0, sc1})
}

// The same against Google's emulator, the reference.
func TestPubSubPullReadsWritesVsEmulator(t *testing.T) {
	pub, sc := rawPubSub(t, startEmulator(t))
	pullReadsWrites(t, pub, []pubsubpb.SubscriberClient{sc})
}

func pullReadsWrites(t *testing.T, pub pubsubpb.PublisherClient, scs []pubsubpb.SubscriberClient) {
	topic, sub := psID("ryw"), psID("ryw-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, scs[0], sub, topic, nil)
	ctx := ctxT(t, 2*time.Minute)
	short := 0
	for i := range 20 {
		want := []string{"a" + strconv.Itoa(i), "b" + strconv.Itoa(i)}
		for _, v := range want {
			if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic),
				Messages: []*pubsubpb.PubsubMessage{{Data: []byte(v)}}}); err != nil {
				t.Fatalf("round %d: publish %s: %v", i, v, err)
			}
		}
		sc := scs[i%len(scs)]
		//lint:ignore SA1019 deprecated, but clients still send it
		r, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 10, ReturnImmediately: i%4 == 3})
		if err != nil {
			t.Fatalf("round %d: pull: %v", i, err)
		}
		var got, ids []string
		for _, m := range r.GetReceivedMessages() {
			got = append(got, string(m.GetMessage().GetData()))
			ids = append(ids, m.GetAckId())
		}
		if len(ids) > 0 {
			if _, err := sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subPath(sub), AckIds: ids}); err != nil {
				t.Fatalf("round %d: ack: %v", i, err)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("round %d: one Pull returned %v, want %v", i, got, want)
			short++
			// Drain what is left, so the next round starts empty.
			for len(got) < len(want) {
				r, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 10})
				if err != nil {
					t.Fatalf("round %d: drain: %v", i, err)
				}
				ids = ids[:0]
				for _, m := range r.GetReceivedMessages() {
					got = append(got, string(m.GetMessage().GetData()))
					ids = append(ids, m.GetAckId())
				}
				if _, err := sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subPath(sub), AckIds: ids}); err != nil {
					t.Fatalf("round %d: ack: %v", i, err)
				}
			}
		}
	}
	if short > 0 {
		t.Errorf("%d of 20 Pulls missed a message published before them", short)
	}
}
