package e2e

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// TestFullRestart: all three processes are stopped (SIGTERM) and started again on the
// same data directory and database; topics, configs and records are all there, and
// new records continue at the old high watermark.
func TestFullRestart(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic := topicName("restart")
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 3, map[string]*string{"retention.ms": kadm.StringPtr("3600000")})
	td := waitTopic(t, adm, topic, 3)
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	produceKeyed(t, cl, topic, "before", 3000)
	before := snapshot(consumeAll(t, s.KafkaAddrs, topic))
	ends := endOffsets(t, adm, topic)
	cl.Close()

	if err := s.StopAll(); err != nil {
		t.Errorf("graceful stop (SIGTERM) of the stack: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.StartAll(ctx); err != nil {
		t.Fatalf("start again: %v", err)
	}

	adm2 := newAdmin(t, s.KafkaAddrs)
	td2 := waitTopic(t, adm2, topic, 3)
	if td2.ID != td.ID {
		t.Errorf("topic id changed across restart: %v -> %v", td.ID, td2.ID)
	}
	cfgs, err := adm2.DescribeTopicConfigs(ctxT(t, 20*time.Second), topic)
	if err != nil {
		t.Fatalf("DescribeConfigs: %v", err)
	}
	rc, err := cfgs.On(topic, nil)
	if err != nil {
		t.Fatalf("DescribeConfigs %s: %v", topic, err)
	}
	retention := ""
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.Value != nil {
			retention = *c.Value
		}
	}
	if retention != "3600000" {
		t.Errorf("retention.ms after restart = %q, want 3600000", retention)
	}
	if got := endOffsets(t, adm2, topic); !reflect.DeepEqual(got, ends) {
		t.Fatalf("end offsets after restart %v, want %v", got, ends)
	}
	after := snapshot(consumeAll(t, s.KafkaAddrs, topic))
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("records changed across the restart: %d before, %d after", len(before), len(after))
	}

	cl2 := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	more := produceKeyed(t, cl2, topic, "after", 300)
	next := map[int32]int64{}
	for p, o := range ends {
		next[p] = o
	}
	for _, r := range more {
		if r.Offset != next[r.Partition] {
			t.Fatalf("record produced after restart at %d/%d, want offset %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	all := consumeAll(t, s.KafkaAddrs, topic)
	checkDense(t, all)
	if len(all) != len(before)+len(more) {
		t.Fatalf("%d records after restart and more produce, want %d", len(all), len(before)+len(more))
	}
}
