package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestGroupKindsConsumeWhileProducing has three kinds of Kafka group and a native
// reader consume one 3-partition topic while 3,000 records are produced to it: a
// classic group of two kgo consumers, a KIP-848 group of two (kgo.ServerSideBalancer),
// a share group of two kgo share consumers that accept each record, and storage-core
// Subscribe streams on kafka.<topic>, kafka.<topic>~1 and kafka.<topic>~2. Every group
// has its partitions before the first record and every reader has records before the
// last batch is produced, so all of them read while the log grows. Then: the classic
// and the 848 group each see every record, each member a partition's records in
// offset order; the share group sees each record exactly once across its two members
// (delivery count 1), both members get records, and after FlushAcks every share
// partition's start offset is at its high watermark with lag 0; the native reader
// sees every record once, in order, with the key and value the producer wrote at that
// offset.
func TestGroupKindsConsumeWhileProducing(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("kinds3")
	classic, next, share := topicName("k3classic"), topicName("k3next"), topicName("k3share")
	const partitions, batches, perBatch = 3, 30, 100
	const total = batches * perBatch
	createTopic(t, adm, topic, partitions, nil)
	ctx := ctxT(t, 4*time.Minute)

	// The share group starts at offset 0 of each partition: set while it is empty,
	// before its members join (share.auto.offset.reset is latest).
	start := kadm.Offsets{}
	for p := range int32(partitions) {
		start.Add(kadm.Offset{Topic: topic, Partition: p, At: 0})
	}
	if res, err := adm.AlterShareGroupOffsets(ctx, share, start); err != nil || !res.Ok() {
		t.Fatalf("AlterShareGroupOffsets: %v %v", res, err)
	}

	// delivery is one record as one reader got it.
	type delivery struct {
		member   string
		key, val string
		count    int32 // share delivery count
	}
	type reader struct {
		mu   sync.Mutex
		recs map[[2]int64][]delivery    // (partition, offset) -> deliveries
		last map[string]map[int32]int64 // member -> partition -> last offset seen
		back []string                   // offsets that went backwards within a member
		own  map[string]map[int32]bool  // member -> partitions assigned (groups)
	}
	readers := map[string]*reader{}
	for _, name := range []string{"classic", "848", "share", "native"} {
		readers[name] = &reader{recs: map[[2]int64][]delivery{}, last: map[string]map[int32]int64{}, own: map[string]map[int32]bool{}}
	}
	add := func(name, member string, p int32, off int64, key, val []byte, count int32) {
		r := readers[name]
		r.mu.Lock()
		defer r.mu.Unlock()
		k := [2]int64{int64(p), off}
		r.recs[k] = append(r.recs[k], delivery{member, string(key), string(val), count})
		if r.last[member] == nil {
			r.last[member] = map[int32]int64{}
		}
		if last, ok := r.last[member][p]; ok && off <= last {
			r.back = append(r.back, fmt.Sprintf("%s partition %d: offset %d after %d", member, p, off, last))
		}
		r.last[member][p] = off
	}
	assigned := func(name, member string, revoked bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			r := readers[name]
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.own[member] == nil {
				r.own[member] = map[int32]bool{}
			}
			for _, p := range m[topic] {
				r.own[member][p] = !revoked
				if revoked {
					// A partition given back may come again from its committed
					// offset: order is checked from there on.
					delete(r.last[member], p)
				}
			}
		}
	}
	ackErrs := make(chan error, 64)

	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopPolling()
			wg.Wait()
		}
	}
	defer stop()
	poll := func(name, member string, cl *kgo.Client, ack bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pollCtx.Err() == nil {
				fs := cl.PollFetches(pollCtx)
				fs.EachError(func(tp string, p int32, err error) {
					if pollCtx.Err() == nil {
						t.Errorf("%s %s: fetch %s/%d: %v", name, member, tp, p, err)
					}
				})
				for _, r := range fs.Records() {
					add(name, member, r.Partition, r.Offset, r.Key, r.Value, r.DeliveryCount())
					if ack {
						r.Ack(kgo.AckAccept)
					}
				}
			}
		}()
	}
	atStart := kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())
	for i := range 2 {
		m := fmt.Sprintf("classic-%d", i)
		poll("classic", m, newClient(t, s.KafkaAddrs, kgo.ConsumerGroup(classic), kgo.ConsumeTopics(topic), atStart,
			kgo.OnPartitionsAssigned(assigned("classic", m, false)),
			kgo.OnPartitionsRevoked(assigned("classic", m, true)), kgo.OnPartitionsLost(assigned("classic", m, true))), false)
	}
	for i := range 2 {
		m := fmt.Sprintf("848-%d", i)
		poll("848", m, newClient(t, s.KafkaAddrs, kgo.ConsumerGroup(next), kgo.ConsumeTopics(topic), atStart, kgo.ServerSideBalancer(),
			kgo.OnPartitionsAssigned(assigned("848", m, false)),
			kgo.OnPartitionsRevoked(assigned("848", m, true)), kgo.OnPartitionsLost(assigned("848", m, true))), false)
	}
	shares := make([]*kgo.Client, 2)
	for i := range shares {
		shares[i] = newClient(t, s.KafkaAddrs, kgo.ShareGroup(share), kgo.ConsumeTopics(topic),
			kgo.ShareAckCallback(func(_ *kgo.Client, res kgo.ShareAckResults) {
				for _, r := range res {
					if r.Err != nil {
						select {
						case ackErrs <- fmt.Errorf("share-%d %s/%d: %w", i, r.Topic, r.Partition, r.Err):
						default:
						}
					}
				}
			}))
		poll("share", fmt.Sprintf("share-%d", i), shares[i], true)
	}
	st := storageClient(t, s.StorageAddr)
	for p := range int32(partitions) {
		stream, err := st.Subscribe(pollCtx, &storagev1.SubscribeRequest{Channel: channel.KafkaPartition(topic, p), Start: &storagev1.SubscribeRequest_First{First: true}})
		if err != nil {
			t.Fatalf("Subscribe %s: %v", channel.KafkaPartition(topic, p), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msg, err := stream.Recv()
				if err != nil {
					return
				}
				for _, r := range msg.Records {
					add("native", "native", p, r.Sequence-1, r.Key, r.Value, 0)
				}
			}
		}()
	}

	// Both consumer groups own all three partitions, each member at least one, and the
	// share group has two members with partitions, before anything is produced.
	for _, name := range []string{"classic", "848"} {
		r := readers[name]
		waitUntil(t, ctx, name+" group: 2 members own the 3 partitions", func() error {
			r.mu.Lock()
			defer r.mu.Unlock()
			owned := map[int32]int{}
			for m, ps := range r.own {
				n := 0
				for p, ok := range ps {
					if ok {
						owned[p]++
						n++
					}
				}
				if n == 0 {
					return fmt.Errorf("member %s owns nothing: %v", m, r.own)
				}
			}
			if len(r.own) != 2 || len(owned) != partitions {
				return fmt.Errorf("owned %v", r.own)
			}
			for p, c := range owned {
				if c != 1 {
					return fmt.Errorf("partition %d owned by %d members: %v", p, c, r.own)
				}
			}
			return nil
		})
	}
	waitUntil(t, ctx, "share group: 2 members with partitions", func() error {
		d, err := adm.DescribeShareGroups(ctx, share)
		if err != nil {
			return err
		}
		g := d[share]
		if g.Err != nil || len(g.Members) != 2 {
			return fmt.Errorf("group %+v", g)
		}
		for _, m := range g.Members {
			if len(m.Assignment[topic]) == 0 || m.MemberEpoch != g.AssignmentEpoch {
				return fmt.Errorf("member %s epoch %d (assignment epoch %d) owns %v", m.MemberID, m.MemberEpoch, g.AssignmentEpoch, m.Assignment)
			}
		}
		return nil
	})

	// Produce in batches while they read; before the last batch every reader has read.
	producer := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[[2]int64][2]string{} // (partition, offset) -> key, value
	for b := range batches {
		if b == batches-1 {
			waitUntil(t, ctx, "every reader has records before the last batch", func() error {
				for name, r := range readers {
					r.mu.Lock()
					n := len(r.recs)
					r.mu.Unlock()
					if n == 0 {
						return fmt.Errorf("%s has read nothing", name)
					}
				}
				return nil
			})
		}
		recs := make([]*kgo.Record, perBatch)
		for i := range recs {
			n := b*perBatch + i
			recs[i] = &kgo.Record{Topic: topic, Partition: int32(n % partitions), Key: fmt.Appendf(nil, "k%d", n), Value: fmt.Appendf(nil, "v%d-%s", n, topic)}
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce batch %d: %v", b, err)
		}
		for _, r := range recs {
			want[[2]int64{int64(r.Partition), r.Offset}] = [2]string{string(r.Key), string(r.Value)}
		}
		time.Sleep(20 * time.Millisecond) // spread production over the consumers' polls
	}
	// Offsets are dense from 0 on each partition: total/partitions each.
	for p := range int64(partitions) {
		for o := range int64(total / partitions) {
			if _, ok := want[[2]int64{p, o}]; !ok {
				t.Fatalf("producer: partition %d offset %d not written (offsets must be dense)", p, o)
			}
		}
	}

	waitUntil(t, ctx, "every reader has every record", func() error {
		for name, r := range readers {
			r.mu.Lock()
			n := 0
			for k := range want {
				if len(r.recs[k]) > 0 {
					n++
				}
			}
			r.mu.Unlock()
			if n < total {
				return fmt.Errorf("%s has %d of %d records", name, n, total)
			}
		}
		return nil
	})
	for _, cl := range shares {
		if err := cl.FlushAcks(ctx); err != nil {
			t.Fatalf("FlushAcks: %v", err)
		}
	}
	stop()
	close(ackErrs)
	for err := range ackErrs {
		t.Errorf("share ack: %v", err)
	}

	for name, r := range readers {
		members := map[string]int{}
		for k, ds := range r.recs {
			w, ok := want[k]
			if !ok {
				t.Errorf("%s: partition %d offset %d was never produced: %+v", name, k[0], k[1], ds)
				continue
			}
			for _, d := range ds {
				members[d.member]++
				if d.key != w[0] || d.val != w[1] {
					t.Errorf("%s %s: partition %d offset %d is %q=%q, want %q=%q", name, d.member, k[0], k[1], d.key, d.val, w[0], w[1])
				}
			}
			switch name {
			case "share":
				if len(ds) != 1 || ds[0].count != 1 {
					t.Errorf("share group: partition %d offset %d delivered %+v, want once with delivery count 1", k[0], k[1], ds)
				}
			case "native":
				if len(ds) != 1 {
					t.Errorf("native: partition %d offset %d read %d times", k[0], k[1], len(ds))
				}
			}
		}
		for _, b := range r.back {
			t.Errorf("%s: out of partition order: %s", name, b)
		}
		if name != "native" && len(members) != 2 {
			t.Errorf("%s: records went to members %v, want both members reading", name, members)
		}
		t.Logf("%s: %d offsets read, by member %v", name, len(r.recs), members)
	}
	offs, err := adm.DescribeShareGroupOffsets(ctx, share)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(partitions) {
		if o := offs[share].Offsets[topic][p]; o.StartOffset != total/partitions || o.Lag != 0 {
			t.Errorf("share partition %d after the acks: start offset %d lag %d, want %d and 0 (every record accepted)", p, o.StartOffset, o.Lag, total/partitions)
		}
	}
}
