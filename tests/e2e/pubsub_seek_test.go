package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// drain pulls from sub until it has seen want distinct messages (by data), acking
// those ack says to and nacking the others, and returns their data sorted.
func drain(ctx context.Context, t *testing.T, sc pubsubpb.SubscriberClient, sub string, want int, ack func(data string) bool) []string {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < want {
		if ctx.Err() != nil {
			t.Fatalf("%s: saw %v, want %d messages", sub, seen, want)
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := sc.Pull(pctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 10})
		cancel()
		if err != nil {
			continue // the long poll ended empty
		}
		for _, m := range r.GetReceivedMessages() {
			d := string(m.GetMessage().GetData())
			seen[d] = true
			if ack(d) {
				_, err = sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subPath(sub), AckIds: []string{m.GetAckId()}})
			} else {
				_, err = sc.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: subPath(sub), AckIds: []string{m.GetAckId()}})
			}
			if err != nil {
				t.Fatalf("%s: settle %s: %v", sub, d, err)
			}
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// TestPubSubSeekToAnotherSubscriptionsSnapshot: Seek to a snapshot taken of another
// subscription of the same topic restores that subscription's unacked messages here,
// also after the snapshot's subscription was deleted; a snapshot of another topic is
// FAILED_PRECONDITION. The same steps run against the official emulator.
func TestPubSubSeekToAnotherSubscriptionsSnapshot(t *testing.T) {
	s := pubsubStack(t)
	for _, target := range []struct{ name, addr string }{{"gateway", s.PubSubAddrs[0]}, {"emulator", startEmulator(t)}} {
		t.Run(target.name, func(t *testing.T) {
			pub, sc := rawPubSub(t, target.addr)
			ctx := ctxT(t, 90*time.Second)
			topic, other := psID("seek-t"), psID("seek-o")
			a, b, c := psID("seek-a"), psID("seek-b"), psID("seek-c")
			mustCreateTopic(t, pub, topic)
			mustCreateTopic(t, pub, other)
			mustCreateSub(t, sc, a, topic, nil)
			mustCreateSub(t, sc, b, topic, nil)
			mustCreateSub(t, sc, c, other, nil)
			var ms []*pubsubpb.PubsubMessage
			for i := 1; i <= 3; i++ {
				ms = append(ms, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "m%d", i)})
			}
			if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: ms}); err != nil {
				t.Fatal(err)
			}
			drain(ctx, t, sc, a, 3, func(d string) bool { return d == "m1" })
			snap := "projects/" + psProject + "/snapshots/" + psID("seek-s")
			if _, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: snap, Subscription: subPath(a)}); err != nil {
				t.Fatalf("CreateSnapshot: %v", err)
			}
			drain(ctx, t, sc, b, 3, func(string) bool { return true })
			seek := func(sub string) error {
				_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snap}})
				return err
			}
			if err := seek(b); err != nil {
				t.Fatalf("Seek to another subscription's snapshot: %v", err)
			}
			if got := drain(ctx, t, sc, b, 2, func(string) bool { return true }); !slices.Equal(got, []string{"m2", "m3"}) {
				t.Fatalf("after the seek: %v, want [m2 m3] (unacked in the snapshot)", got)
			}
			wantCode(t, "Seek to another topic's snapshot", seek(c), codes.FailedPrecondition)
			if _, err := sc.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subPath(a)}); err != nil {
				t.Fatal(err)
			}
			if err := seek(b); err != nil {
				t.Fatalf("Seek to the snapshot of a deleted subscription: %v", err)
			}
			if got := drain(ctx, t, sc, b, 2, func(string) bool { return true }); !slices.Equal(got, []string{"m2", "m3"}) {
				t.Fatalf("after the second seek: %v, want [m2 m3]", got)
			}
		})
	}
}

// pullNothing fails the test when a Pull of sub returns a message within a few seconds.
func pullNothing(ctx context.Context, t *testing.T, sc pubsubpb.SubscriberClient, sub, what string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := sc.Pull(pctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 10})
		cancel()
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		if err == nil && len(r.GetReceivedMessages()) > 0 {
			var got []string
			for _, m := range r.GetReceivedMessages() {
				got = append(got, string(m.GetMessage().GetData()))
			}
			t.Fatalf("%s: Pull returned %v, want nothing", what, got)
		}
	}
}

// TestPubSubSeekTimeKeepsAcked: Seek to a past time brings back only retained
// messages (Google's Seek): without retain_acked_messages and without topic message
// retention the acked messages stay acked, while unacked ones after the time are
// delivered again; with topic message_retention_duration acked ones come back too.
// The same steps run against the official emulator.
func TestPubSubSeekTimeKeepsAcked(t *testing.T) {
	s := pubsubStack(t)
	for _, target := range []struct{ name, addr string }{{"gateway", s.PubSubAddrs[0]}, {"emulator", startEmulator(t)}} {
		t.Run(target.name, func(t *testing.T) {
			pub, sc := rawPubSub(t, target.addr)
			ctx := ctxT(t, 90*time.Second)
			publish := func(topic string, data ...string) {
				t.Helper()
				var ms []*pubsubpb.PubsubMessage
				for _, d := range data {
					ms = append(ms, &pubsubpb.PubsubMessage{Data: []byte(d)})
				}
				if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: ms}); err != nil {
					t.Fatal(err)
				}
			}
			seekBack := func(sub string) {
				t.Helper()
				if _, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(time.Now().Add(-time.Hour))}}); err != nil {
					t.Fatalf("Seek %s an hour back: %v", sub, err)
				}
			}

			// The emulator's case: publish a, b; pull and ack both; seek an hour back:
			// nothing comes back.
			topic, sub := psID("seekk-t"), psID("seekk-s")
			mustCreateTopic(t, pub, topic)
			mustCreateSub(t, sc, sub, topic, nil)
			publish(topic, "a", "b")
			drain(ctx, t, sc, sub, 2, func(string) bool { return true })
			seekBack(sub)
			pullNothing(ctx, t, sc, sub, "after a seek back with everything acked")
			// An unacked message after the time is delivered again (its lease ended).
			publish(topic, "c")
			drain(ctx, t, sc, sub, 1, func(string) bool { return false })
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			r, err := sc.Pull(pctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 10})
			cancel()
			if err != nil || len(r.GetReceivedMessages()) != 1 {
				t.Fatalf("Pull after a nack = %v, %v; want c", r, err)
			}
			seekBack(sub)
			if got := drain(ctx, t, sc, sub, 1, func(string) bool { return true }); !slices.Equal(got, []string{"c"}) {
				t.Fatalf("after a seek back with c leased: %v, want [c]", got)
			}
			pullNothing(ctx, t, sc, sub, "after acking c")

			// Topic message retention lets subscriptions replay acked messages.
			rtopic, rsub := psID("seekk-rt"), psID("seekk-rs")
			if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(rtopic), MessageRetentionDuration: durationpb.New(time.Hour)}); err != nil {
				t.Fatalf("CreateTopic with retention: %v", err)
			}
			mustCreateSub(t, sc, rsub, rtopic, nil)
			publish(rtopic, "a", "b")
			drain(ctx, t, sc, rsub, 2, func(string) bool { return true })
			seekBack(rsub)
			if got := drain(ctx, t, sc, rsub, 2, func(string) bool { return true }); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("after a seek back on a topic with retention: %v, want [a b]", got)
			}
		})
	}
}
