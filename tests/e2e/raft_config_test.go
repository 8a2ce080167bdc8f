package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRaftKafkaTopicConfigs: topic configs on a raft-mode storage cluster (3 nodes).
// A create whose CreateChannel committed but whose answer was lost is replayed by
// creating the partitions' channels natively first (default config); the Kafka
// CreateTopics with configs, as the client's retry, then adopts them, and the
// coordinator's UpdateChannelConfig goes through the metadata group, so every node
// holds the topic's config. An IncrementalAlterConfigs reaches every node too.
func TestRaftKafkaTopicConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	s, _ := startRaftStack(t, topicName("raft-cfg-first"), 1)
	addrs := strings.Split(s.StorageAddr, ",")
	lc, err := grpcx.NewLeaderConn(addrs, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	sc := storagev1.NewStorageServiceClient(lc)
	const partitions = 2
	topic := topicName("raft-cfg")
	for p := int32(0); p < partitions; p++ {
		if _, err := sc.CreateChannel(ctxT(t, 10*time.Second), &storagev1.CreateChannelRequest{
			Name: channel.KafkaPartition(topic, p), Kind: storagev1.ChannelKind_CHANNEL_KIND_LOG,
		}); err != nil {
			t.Fatalf("native create of partition %d: %v", p, err)
		}
	}
	adm := newAdmin(t, s.KafkaAddrs)
	retention, maxBytes := "3600000", "524288"
	rs, err := adm.CreateTopic(ctxT(t, 20*time.Second), partitions, -1,
		map[string]*string{"retention.ms": &retention, "max.message.bytes": &maxBytes}, topic)
	if err != nil || rs.Err != nil {
		t.Fatalf("CreateTopics over existing channels: %v %v", err, rs.Err)
	}
	waitTopic(t, adm, topic, partitions)
	nodes := map[string]storagev1.StorageServiceClient{}
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		nodes[a] = storagev1.NewStorageServiceClient(cc)
	}
	everyNode := func(wantRetention int64, wantMax int32) {
		t.Helper()
		var last error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			last = nil
			for a, c := range nodes {
				for p := int32(0); p < partitions; p++ {
					r, err := c.GetChannel(ctxT(t, 5*time.Second), &storagev1.GetChannelRequest{Name: channel.KafkaPartition(topic, p)})
					if err != nil {
						last = fmt.Errorf("node %s partition %d: %v", a, p, err)
						continue
					}
					if cfg := r.GetChannel().GetConfig(); cfg.GetRetentionMs() != wantRetention || cfg.GetMaxMessageBytes() != wantMax {
						last = fmt.Errorf("node %s partition %d: retention_ms %d max_message_bytes %d, want %d %d",
							a, p, cfg.GetRetentionMs(), cfg.GetMaxMessageBytes(), wantRetention, wantMax)
					}
				}
			}
			if last == nil {
				return
			}
		}
		t.Fatal(last)
	}
	everyNode(3600000, 524288)
	described, err := adm.DescribeTopicConfigs(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := described.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := configValue(rc.Configs, "retention.ms"); got != retention {
		t.Fatalf("DescribeConfigs retention.ms %q, want %q", got, retention)
	}
	alter, err := adm.AlterTopicConfigs(ctxT(t, 20*time.Second),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")}}, topic)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := alter.On(topic, nil); err != nil || r.Err != nil {
		t.Fatalf("IncrementalAlterConfigs: %v %v", err, r.Err)
	}
	everyNode(7200000, 524288)
}

func configValue(cs []kadm.Config, name string) string {
	for _, c := range cs {
		if c.Key == name {
			return c.MaybeValue()
		}
	}
	return ""
}
