package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
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
