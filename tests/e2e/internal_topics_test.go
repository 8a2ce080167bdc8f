package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInternalTopicsWithKgo: Kafka's internal topics, listed by Metadata with 50
// partitions, answer kgo and kadm as a Kafka broker does for topics holding nothing
// (our offsets and transactions live in Postgres): DescribeTopicConfigs shows the
// configs Kafka creates them with, set on the topic; every partition's end offset is
// 0; a kgo consumer of __consumer_offsets polls without an error; Produce and
// DeleteRecords are INVALID_TOPIC_EXCEPTION.
func TestInternalTopicsWithKgo(t *testing.T) {
	s := sharedStack(t)
	cl := newClient(t, s.KafkaAddrs, kgo.RecordRetries(2))
	adm := kadm.NewClient(cl)
	ctx := ctxT(t, time.Minute)
	const co, ts = "__consumer_offsets", "__transaction_state"

	rcs, err := adm.DescribeTopicConfigs(ctx, co, ts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ topic, compression string }{{co, "producer"}, {ts, "uncompressed"}} {
		rc, err := rcs.On(want.topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("DescribeTopicConfigs %s: %v %v", want.topic, err, rc.Err)
		}
		set := map[string]string{}
		for _, c := range rc.Configs {
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				set[c.Key] = c.MaybeValue()
			}
		}
		if set["cleanup.policy"] != "compact" || set["compression.type"] != want.compression || set["segment.bytes"] != "104857600" {
			t.Errorf("%s configs set on the topic: %v", want.topic, set)
		}
	}

	ends, err := adm.ListEndOffsets(ctx, co)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) {
		n++
		if o.Err != nil || o.Offset != 0 {
			t.Errorf("%s/%d end offset %d, %v", o.Topic, o.Partition, o.Offset, o.Err)
		}
	})
	if n != 50 {
		t.Errorf("%s: %d end offsets listed, want 50", co, n)
	}

	reader := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{co: {0: kgo.NewOffset().AtStart(), 49: kgo.NewOffset().AtEnd()}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	for pctx.Err() == nil {
		fs := reader.PollFetches(pctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("consuming %s/%d: %v", topic, p, err)
			}
		})
		if fs.NumRecords() != 0 {
			t.Errorf("%d records read from %s", fs.NumRecords(), co)
		}
	}
	cancel()

	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: co, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Errorf("produce to %s: %v, want INVALID_TOPIC_EXCEPTION", co, err)
	}
	var os kadm.Offsets
	os.AddOffset(co, 0, 0, -1)
	del, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := del.Lookup(co, 0); !ok || !errors.Is(r.Err, kerr.InvalidTopicException) {
		t.Errorf("DeleteRecords %s/0: %+v, want INVALID_TOPIC_EXCEPTION", co, r)
	}
}
