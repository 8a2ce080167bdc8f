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
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRaftKafkaTopicConfigs: topic configs on a raft-mode storage cluster (3 nodes).
// A create whose CreateChannel committed but whose answer was lost is replayed by
// creating the partitions' channels natively first (default config); the Kafka
// CreateTopics with configs, as the client's retry, then adopts them, and the
// coordinator's UpdateChannelConfig goes through the metadata group, so every node
// holds the topic's config. An IncrementalAlterConfigs reaches every node too, and so
// does a DeleteRecords.
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

	// DeleteRecords is an entry of the partition's group: every node moves its log
	// start, and a consumer from the start begins there.
	pr := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := 0; i < 10; i++ {
		if err := pr.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Value: []byte(fmt.Sprintf("d%d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	del, err := adm.DeleteRecords(ctxT(t, 20*time.Second), kadm.Offsets{topic: {0: {At: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := del.Lookup(topic, 0); !ok || r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("DeleteRecords: %+v", r)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var last error
		for a, c := range nodes {
			r, err := c.GetChannel(ctxT(t, 5*time.Second), &storagev1.GetChannelRequest{Name: channel.KafkaPartition(topic, 0)})
			if got := r.GetChannel().GetLogStartSequence(); err != nil || got != 5 {
				last = fmt.Errorf("node %s log start sequence %d (%v), want 5 (offset 4)", a, got, err)
			}
		}
		if last == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(last)
		}
	}
	starts, err := adm.ListStartOffsets(ctxT(t, 10*time.Second), topic)
	if o, ok := starts.Lookup(topic, 0); err != nil || !ok || o.Offset != 4 {
		t.Fatalf("ListOffsets earliest after DeleteRecords: %+v %v", o, err)
	}
	c := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	fs := c.PollFetches(ctxT(t, 20*time.Second))
	if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 4 || string(recs[0].Value) != "d4" {
		t.Fatalf("first record read from the start after DeleteRecords: %v (errors %v)", recs, fs.Errors())
	}
}

func configValue(cs []kadm.Config, name string) string {
	for _, c := range cs {
		if c.Key == name {
			return c.MaybeValue()
		}
	}
	return ""
}
