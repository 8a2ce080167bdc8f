package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/eclipse/paho.golang/paho"
	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRaftPubSubPublishFollowsLeader: a pubsub-gateway given the three addresses of a
// raft-mode storage cluster (--storage-addr a,b,c). Once the topic's log is led by a
// node other than the first address's (the first node is SIGKILLed and restarted while
// it leads), every Publish succeeds: the gateway's first call meets the first node's
// FAILED_PRECONDITION naming the leader and follows it (grpcx.LeaderConn), and the
// leader's log holds every message. With one address, as before, the gateway would
// hand that refusal to the publisher.
func TestRaftPubSubPublishFollowsLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	s, leader := startRaftStackWith(t, stack.Options{StorageNodes: 3, PubSubGateways: 1, LogLevel: "warn"}, topicName("raft-ps-warm"), 1)
	pub, _ := rawPubSub(t, s.PubSubAddrs[0])
	id := psID("raft-ps")
	mustCreateTopic(t, pub, id)
	ch := channel.PubSubTopic(id)
	lead := leadElsewhere(t, s, leader, ch)
	const n = 50
	for i := 0; i < n; i++ {
		// UNAVAILABLE is retried, as Google's client libraries retry Publish: the
		// gateway's connection to the restarted first node may still be broken
		// ("connection refused": the call reached no node), and it then picks another.
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := pub.Publish(ctxT(t, 20*time.Second), &pubsubpb.PublishRequest{
				Topic: topicPath(id), Messages: []*pubsubpb.PubsubMessage{{Data: []byte(fmt.Sprintf("m-%02d", i))}},
			})
			if status.Code(err) == codes.Unavailable && time.Now().Before(deadline) {
				t.Logf("publish %d: %v (retried)", i, err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err != nil || len(resp.GetMessageIds()) != 1 {
				t.Fatalf("publish %d with %s leading: %v %v", i, lead.Name, resp, err)
			}
			break
		}
	}
	var leadAddr string
	for i, a := range strings.Split(s.StorageAddr, ",") {
		if s.Storages[i] == lead {
			leadAddr = a
		}
	}
	sc, _ := storageClients(t, leadAddr)
	gc, err := sc.GetChannel(ctxT(t, 10*time.Second), &storagev1.GetChannelRequest{Name: ch})
	if err != nil {
		t.Fatal(err)
	}
	if hw := gc.GetChannel().GetHighWatermark(); hw != n {
		t.Fatalf("%s on its leader %s: high watermark %d, want %d (one record per publish)", ch, lead.Name, hw, n)
	}
}

// leadElsewhere makes channel ch be led by a node other than the first address's
// (SIGKILL and restart of that node while it leads) and returns the leader.
func leadElsewhere(t *testing.T, s *stack.Stack, leader func(ch string) *stack.Proc, ch string) *stack.Proc {
	t.Helper()
	first := s.Storages[0]
	for i := 0; leader(ch) == first; i++ {
		if i == 3 {
			t.Fatalf("%s still leads %s after %d restarts", first.Name, ch, i)
		}
		t.Logf("%s leads %s: SIGKILL and restart", first.Name, ch)
		if err := s.Kill(first.Name, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("new leader %s", leader(ch).Name)
		if err := s.Restart(ctxT(t, 60*time.Second), first.Name); err != nil {
			t.Fatal(err)
		}
	}
	lead := leader(ch)
	if lead == first {
		t.Fatalf("%s leads %s again", first.Name, ch)
	}
	return lead
}

// TestRaftMQTTListenerFollowsLeader: an mqtt-bridge given the three addresses of a
// raft-mode storage cluster (storage-addr: a,b,c), its embedded listener mapping
// dev/# to a Kafka topic whose partition is led by a node other than the first
// address's: every QoS 1 publish gets PUBACK 0 (the append followed the first node's
// not-leader answer to the leader) and Kafka holds each message once.
func TestRaftMQTTListenerFollowsLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	testenv.Require(t)
	topic := topicName("raft-mqtt")
	s, leader := startRaftStack(t, topic, 1)
	lead := leadElsewhere(t, s, leader, channel.KafkaPartition(topic, 0))
	lis := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-raft", fmt.Sprintf(`
id: raft
store-timeout: 5s
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: devices
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %[2]s
`, lis, topic))
	ctx := ctxT(t, 2*time.Minute)
	c, err := pahoConnect(ctx, lis, "dev-raft", "")
	if err != nil {
		t.Fatalf("connect to the listener: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	const n = 20
	want := map[string]bool{}
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("r-%02d", i)
		resp, err := c.Publish(ctxT(t, 20*time.Second), &paho.Publish{QoS: 1, Topic: "dev/raft/temp", Payload: []byte(v)})
		if err != nil || resp.ReasonCode != 0 {
			t.Fatalf("publish %s with %s leading: %v %v", v, lead.Name, resp, err)
		}
		want[v] = true
	}
	recs := consumeAll(t, s.KafkaAddrs, topic)
	got := map[string]int{}
	for _, r := range recs {
		got[string(r.Value)]++
	}
	for v := range want {
		if got[v] != 1 {
			t.Fatalf("%s is in Kafka %d times, want once (records %v)", v, got[v], got)
		}
	}
	if len(recs) != n {
		t.Fatalf("%d records in Kafka, want %d", len(recs), n)
	}
}
