package e2e

import (
	"maps"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TestPubSubUnderscoreAttributes: attribute keys starting with "_" are valid in Pub/Sub
// and reach subscribers unchanged, as on the official emulator, even those naming the
// gateway's reserved headers (which must not change the message's ordering key).
func TestPubSubUnderscoreAttributes(t *testing.T) {
	s := pubsubStack(t)
	for _, target := range []struct{ name, addr string }{{"gateway", s.PubSubAddrs[0]}, {"emulator", startEmulator(t)}} {
		pub, sc := rawPubSub(t, target.addr)
		ctx := ctxT(t, 30*time.Second)
		topic, sub := psID("attrs"), psID("attrs-sub")
		mustCreateTopic(t, pub, topic)
		mustCreateSub(t, sc, sub, topic, nil)
		attrs := map[string]string{"_trace": "1", "_pubsub_ordering_key": "forged", "_tributary_source": "forged", "plain": "2"}
		if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x"), Attributes: attrs}}}); err != nil {
			t.Fatalf("%s: Publish: %v", target.name, err)
		}
		pr, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 1})
		if err != nil || len(pr.GetReceivedMessages()) != 1 {
			t.Fatalf("%s: Pull: %v, %v", target.name, pr, err)
		}
		m := pr.GetReceivedMessages()[0].GetMessage()
		if !maps.Equal(m.GetAttributes(), attrs) || m.GetOrderingKey() != "" {
			t.Errorf("%s: attributes %v, ordering key %q; want %v and none", target.name, m.GetAttributes(), m.GetOrderingKey(), attrs)
		}
	}
}
