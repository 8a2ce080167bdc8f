package e2e

import (
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPubSubPublishRacingDeleteTopic: publishes racing DeleteTopic either succeed or
// fail NOT_FOUND, never UNAVAILABLE (which clients would retry against a topic that is
// gone): storage-core answers NOT_FOUND for an append whose log is deleted under it,
// also while it waits for its fsync.
func TestPubSubPublishRacingDeleteTopic(t *testing.T) {
	s := pubsubStack(t)
	pub, _ := rawPubSub(t, s.PubSubAddrs[0])
	const rounds, publishers = 40, 8
	racing := 0
	for round := range rounds {
		topic := psID("race")
		mustCreateTopic(t, pub, topic)
		var wg sync.WaitGroup
		started := make(chan struct{}, publishers)
		errs := make(chan error, publishers)
		for range publishers {
			wg.Go(func() {
				ctx := ctxT(t, 30*time.Second)
				for i := 0; ; i++ {
					if i == 1 {
						started <- struct{}{}
					}
					_, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for range publishers {
			<-started
		}
		if _, err := pub.DeleteTopic(ctxT(t, 30*time.Second), &pubsubpb.DeleteTopicRequest{Topic: topicPath(topic)}); err != nil {
			t.Fatalf("DeleteTopic: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			racing++
			if status.Code(err) != codes.NotFound {
				t.Fatalf("round %d: a publish racing DeleteTopic failed %v (%v), want NOT_FOUND", round, status.Code(err), err)
			}
		}
	}
	t.Logf("%d publishes raced DeleteTopic, all NOT_FOUND", racing)
}
