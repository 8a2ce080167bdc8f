package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestShareConsumers3x3 runs three kgo share consumers (kgo.ShareGroup) in one share
// group over a 3-partition topic: once the three are members with one partition each
// (ShareGroupDescribe) and the share partitions started (DescribeShareGroupOffsets
// start offset 0), 3,000 records are produced; every record is delivered exactly once
// over the three consumers with delivery count 1, and after the consumers flush their
// acceptances every share partition's start offset is at its high watermark with lag 0
// (each record accepted once). Which consumer gets a partition's records is not
// checked: a ShareFetch long poll a consumer sent before its assignment moved may
// still acquire records of the partition it gave up, as in Kafka.
func TestShareConsumers3x3(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic, group := topicName("share3"), topicName("share3g")
	const partitions, perPartition = 3, 1000
	createTopic(t, adm, topic, partitions, nil)
	ctx := ctxT(t, 3*time.Minute)

	type delivery struct {
		consumer int
		count    int32
	}
	var (
		mu        sync.Mutex
		delivered = map[[2]int64][]delivery{} // (partition, offset) -> deliveries
		ackErrs   []error
	)
	consumers := make([]*kgo.Client, 3)
	for i := range consumers {
		consumers[i] = newClient(t, s.KafkaAddrs, kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
			kgo.ShareAckCallback(func(_ *kgo.Client, res kgo.ShareAckResults) {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range res {
					if r.Err != nil {
						ackErrs = append(ackErrs, fmt.Errorf("consumer %d %s/%d: %w", i, r.Topic, r.Partition, r.Err))
					}
				}
			}))
	}
	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, cl := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pollCtx.Err() == nil {
				fs := cl.PollFetches(pollCtx)
				for _, r := range fs.Records() {
					mu.Lock()
					k := [2]int64{int64(r.Partition), r.Offset}
					delivered[k] = append(delivered[k], delivery{i, r.DeliveryCount()})
					mu.Unlock()
					r.Ack(kgo.AckAccept)
				}
			}
		}()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopPolling()
			wg.Wait()
		}
	}
	defer stop()

	// Wait for three members with one partition each, and for the share partitions
	// to have started (the consumers' first ShareFetch initializes them at the high
	// watermark, 0: share.auto.offset.reset latest).
	waitUntil(t, ctx, "3 members, one partition each, share partitions started", func() error {
		d, err := adm.DescribeShareGroups(ctx, group)
		if err != nil {
			return err
		}
		g := d[group]
		if g.Err != nil || len(g.Members) != 3 {
			return fmt.Errorf("group %+v", g)
		}
		for _, m := range g.Members {
			if len(m.Assignment[topic]) != 1 || m.MemberEpoch != g.AssignmentEpoch {
				return fmt.Errorf("member %s epoch %d (assignment epoch %d) owns %v", m.MemberID, m.MemberEpoch, g.AssignmentEpoch, m.Assignment)
			}
		}
		offs, err := adm.DescribeShareGroupOffsets(ctx, group)
		if err != nil {
			return err
		}
		for p := range int32(partitions) {
			if o, ok := offs[group].Offsets[topic][p]; !ok || o.StartOffset != 0 {
				return fmt.Errorf("partition %d start offset %+v", p, o)
			}
		}
		return nil
	})

	producer := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range int32(partitions) {
		for i := range perPartition {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)})
		}
	}
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	waitUntil(t, ctx, "every record delivered", func() error {
		mu.Lock()
		defer mu.Unlock()
		if n := len(delivered); n < partitions*perPartition {
			return fmt.Errorf("%d of %d records delivered", n, partitions*perPartition)
		}
		return nil
	})
	for _, cl := range consumers {
		if err := cl.FlushAcks(ctx); err != nil {
			t.Fatalf("FlushAcks: %v", err)
		}
	}
	stop()

	mu.Lock()
	defer mu.Unlock()
	for k, ds := range delivered {
		if len(ds) != 1 || ds[0].count != 1 {
			t.Errorf("partition %d offset %d delivered %v, want once with delivery count 1", k[0], k[1], ds)
		}
		if k[1] < 0 || k[1] >= perPartition {
			t.Errorf("partition %d offset %d outside the %d produced", k[0], k[1], perPartition)
		}
	}
	for _, err := range ackErrs {
		t.Errorf("ack: %v", err)
	}
	offs, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(partitions) {
		if o := offs[group].Offsets[topic][p]; o.StartOffset != perPartition || o.Lag != 0 {
			t.Errorf("partition %d after the acks: start offset %d lag %d, want %d and 0", p, o.StartOffset, o.Lag, perPartition)
		}
	}
}

// waitUntil polls cond until it returns nil, failing the test when ctx ends first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() error) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-tick.C:
		}
	}
}
