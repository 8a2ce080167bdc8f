package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// The share-group data path (KIP-932 ShareFetch / ShareAcknowledge) driven with kmsg
// requests over kgo connections: each kgo client is one connection to the gateway, so
// one share session per (group, member) on it, as a Kafka share consumer has.

// shareStack starts a stack whose gateway locks acquired records for 2 s and starts
// new share partitions at the log start.
func shareStack(t *testing.T) *stack.Stack {
	t.Helper()
	testenv.Require(t)
	s, err := stack.Start(ctxT(t, 2*time.Minute), stack.Options{GatewayFlags: []string{
		"--group-share-record-lock-duration-ms=2000", "--share-auto-offset-reset=earliest", "--group-share-delivery-count-limit=3"}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", s.LogTails(60))
		}
		_ = s.Close()
	})
	return s
}

// shareMember is one share consumer speaking ShareFetch/ShareAcknowledge itself.
type shareMember struct {
	t      *testing.T
	cl     *kgo.Client
	group  string
	member string
	epoch  int32
	topic  [16]byte
	// stop ends the heartbeats (newShareMember) and waits for them to end.
	stop func()
}

// newShareMember joins group as member (ShareGroupHeartbeat, subscribed to the topic
// with topicID, or to a topic that does not exist when no topic has it) and keeps
// heartbeating until the test ends: the gateway serves ShareFetch to members only.
func newShareMember(t *testing.T, addrs []string, group, member string, topicID [16]byte) *shareMember {
	t.Helper()
	m := newShareStranger(t, addrs, group, member, topicID)
	md := kmsg.NewPtrMetadataRequest()
	mdr, err := md.RequestWith(ctxT(t, 10*time.Second), m.cl)
	if err != nil {
		t.Fatalf("Metadata: %v", err)
	}
	subscribed := topicName("nosuchtopic")
	for _, mt := range mdr.Topics {
		if mt.TopicID == topicID && mt.Topic != nil {
			subscribed = *mt.Topic
		}
	}
	heartbeat := func(ctx context.Context, epoch int32) (int32, error) {
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.GroupID, req.MemberID, req.MemberEpoch = group, member, epoch
		if epoch == 0 {
			req.SubscribedTopicNames = []string{subscribed}
		}
		resp, err := req.RequestWith(ctx, m.cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			return 0, err
		}
		return resp.MemberEpoch, nil
	}
	epoch, err := heartbeat(ctxT(t, 10*time.Second), 0)
	if err != nil {
		t.Fatalf("member %s joining share group %s: %v", member, group, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
			if e, err := heartbeat(hctx, epoch); err == nil {
				epoch = e
			}
			hcancel()
		}
	}()
	var once sync.Once
	m.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(m.stop)
	return m
}

// leave stops the heartbeats and leaves the group (member epoch -1); the share session
// stays open.
func (m *shareMember) leave() {
	m.t.Helper()
	m.stop()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = m.group, m.member, -1
	resp, err := req.RequestWith(ctxT(m.t, 10*time.Second), m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		m.t.Fatalf("member %s leaving %s: %v", m.member, m.group, err)
	}
}

// newShareStranger is a share consumer that never joins the group.
func newShareStranger(t *testing.T, addrs []string, group, member string, topicID [16]byte) *shareMember {
	return &shareMember{t: t, cl: newClient(t, addrs), group: group, member: member, topic: topicID}
}

type acquired struct {
	partition int32
	offset    int64
	value     string
	count     int16
}

// ack is one acknowledgement: offset, type (1 accept, 2 release, 3 reject).
type ack struct {
	partition int32
	offset    int64
	typ       int8
}

func (m *shareMember) request(req kmsg.Request) kmsg.Response {
	m.t.Helper()
	resp, err := m.cl.Broker(0).Request(ctxT(m.t, 30*time.Second), req)
	if err != nil {
		m.t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// fetch sends a ShareFetch at the member's epoch for partitions with acks piggybacked
// and returns the response; the epoch moves on success.
func (m *shareMember) fetch(partitions []int32, acks []ack, maxWait int32) *kmsg.ShareFetchResponse {
	m.t.Helper()
	req := m.fetchReq(partitions, acks, maxWait)
	resp := m.request(req).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode == 0 {
		m.next()
	}
	return resp
}

func (m *shareMember) next() {
	if m.epoch == -1 {
		return
	}
	m.epoch++
}

func (m *shareMember) fetchReq(partitions []int32, acks []ack, maxWait int32) *kmsg.ShareFetchRequest {
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 1
	req.GroupID, req.MemberID = kmsg.StringPtr(m.group), kmsg.StringPtr(m.member)
	req.ShareSessionEpoch = m.epoch
	req.MaxWaitMillis, req.MaxBytes, req.MaxRecords, req.BatchSize = maxWait, 1<<20, 500, 500
	t := kmsg.NewShareFetchRequestTopic()
	t.TopicID = m.topic
	byPart := map[int32]*kmsg.ShareFetchRequestTopicPartition{}
	for _, p := range partitions {
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition = p
		t.Partitions = append(t.Partitions, rp)
	}
	for i := range t.Partitions {
		byPart[t.Partitions[i].Partition] = &t.Partitions[i]
	}
	for _, a := range acks {
		rp := byPart[a.partition]
		if rp == nil {
			t.Partitions = append(t.Partitions, kmsg.NewShareFetchRequestTopicPartition())
			rp = &t.Partitions[len(t.Partitions)-1]
			rp.Partition = a.partition
			for i := range t.Partitions {
				byPart[t.Partitions[i].Partition] = &t.Partitions[i]
			}
			rp = byPart[a.partition]
		}
		b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.offset, a.offset, []int8{a.typ}
		rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
	}
	req.Topics = append(req.Topics, t)
	return req
}

// acknowledge sends a ShareAcknowledge at the member's epoch; it returns the top-level
// code and each partition's.
func (m *shareMember) acknowledge(acks []ack) (int16, map[int32]int16) {
	m.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 1
	req.GroupID, req.MemberID = kmsg.StringPtr(m.group), kmsg.StringPtr(m.member)
	req.ShareSessionEpoch = m.epoch
	t := kmsg.NewShareAcknowledgeRequestTopic()
	t.TopicID = m.topic
	idx := map[int32]int{}
	for _, a := range acks {
		i, ok := idx[a.partition]
		if !ok {
			i = len(t.Partitions)
			idx[a.partition] = i
			p := kmsg.NewShareAcknowledgeRequestTopicPartition()
			p.Partition = a.partition
			t.Partitions = append(t.Partitions, p)
		}
		b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.offset, a.offset, []int8{a.typ}
		t.Partitions[i].AcknowledgementBatches = append(t.Partitions[i].AcknowledgementBatches, b)
	}
	req.Topics = append(req.Topics, t)
	resp := m.request(req).(*kmsg.ShareAcknowledgeResponse)
	if resp.ErrorCode == 0 {
		m.next()
	}
	out := map[int32]int16{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			out[p.Partition] = p.ErrorCode
		}
	}
	return resp.ErrorCode, out
}

// records decodes a ShareFetch response's acquired records (only offsets inside
// AcquiredRecords, as a client keeps) and each partition's acknowledge error.
func records(t *testing.T, resp *kmsg.ShareFetchResponse) ([]acquired, map[int32]int16) {
	t.Helper()
	out, codes, err := decodeShareFetch(resp)
	if err != nil {
		t.Fatal(err)
	}
	return out, codes
}

func decodeShareFetch(resp *kmsg.ShareFetchResponse) ([]acquired, map[int32]int16, error) {
	var out []acquired
	ackCodes := map[int32]int16{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			ackCodes[p.Partition] = p.AcknowledgeErrorCode
			if p.ErrorCode != 0 {
				return nil, nil, fmt.Errorf("partition %d: %w", p.Partition, kerr.ErrorForCode(p.ErrorCode))
			}
			counts := map[int64]int16{}
			for _, ar := range p.AcquiredRecords {
				for o := ar.FirstOffset; o <= ar.LastOffset; o++ {
					counts[o] = ar.DeliveryCount
				}
			}
			// The batches as a consumer decodes them (decompressed, CRC checked);
			// they may hold records not acquired, which it skips.
			n0 := len(out)
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "share", Partition: p.Partition},
				&kmsg.FetchResponseTopicPartition{Partition: p.Partition, RecordBatches: p.Records, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1},
				kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				return nil, nil, fmt.Errorf("partition %d: batches: %w", p.Partition, fp.Err)
			}
			for _, r := range fp.Records {
				if c, ok := counts[r.Offset]; ok {
					out = append(out, acquired{p.Partition, r.Offset, string(r.Value), c})
				}
			}
			if len(out)-n0 != len(counts) {
				return nil, nil, fmt.Errorf("partition %d: %d offsets acquired (%v), %d records of them in the batches", p.Partition, len(counts), p.AcquiredRecords, len(out)-n0)
			}
		}
	}
	return out, ackCodes, nil
}

func produceValues(t *testing.T, cl *kgo.Client, topic string, partition int32, values ...string) {
	t.Helper()
	for _, v := range values {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}
		if err := cl.ProduceSync(ctxT(t, 20*time.Second), r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

func topicID(t *testing.T, adm *kadm.Client, topic string) [16]byte {
	t.Helper()
	md, err := adm.Metadata(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	return md.Topics[topic].ID
}

// TestShareFetchAcknowledge: one member acquires every record; ACCEPT is final,
// RELEASE redelivers at once with delivery count 2, REJECT is never redelivered, and
// acknowledging what it does not hold is INVALID_RECORD_STATE; session epochs and bad
// input get Kafka's errors.
func TestShareFetchAcknowledge(t *testing.T) {
	s := shareStack(t)
	pcl := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(pcl)
	topic, group := topicName("share"), topicName("sgrp")
	createTopic(t, adm, topic, 2, nil)
	tid := topicID(t, adm, topic)
	produceValues(t, pcl, topic, 0, "r0", "r1", "r2", "r3", "r4", "r5")

	a := newShareMember(t, s.KafkaAddrs, group, "member-a", tid)
	got, _ := records(t, a.fetch([]int32{0}, nil, 5000))
	if len(got) != 6 {
		t.Fatalf("first fetch acquired %d records: %v", len(got), got)
	}
	for i, r := range got {
		if r.offset != int64(i) || r.value != fmt.Sprintf("r%d", i) || r.count != 1 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	// Piggybacked: 0 accepted, 1 released, 2 rejected. The release comes back at once.
	got, ackCodes := records(t, a.fetch(nil, []ack{{0, 0, 1}, {0, 1, 2}, {0, 2, 3}}, 5000))
	if ackCodes[0] != 0 || len(got) != 1 || got[0].offset != 1 || got[0].count != 2 {
		t.Fatalf("after release: ack code %d, records %+v", ackCodes[0], got)
	}
	if code, parts := a.acknowledge([]ack{{0, 1, 1}, {0, 3, 1}, {0, 4, 1}, {0, 5, 1}}); code != 0 || parts[0] != 0 {
		t.Fatalf("ShareAcknowledge: %d %v", code, parts)
	}
	// Acknowledging the rejected record, or one accepted already: not acquired.
	for _, off := range []int64{2, 0} {
		if code, parts := a.acknowledge([]ack{{0, off, 1}}); code != 0 || parts[0] != kerr.InvalidRecordState.Code {
			t.Fatalf("ack of offset %d: %d %v, want INVALID_RECORD_STATE", off, code, parts)
		}
	}
	// Nothing is left: the rejected record is never redelivered.
	produceValues(t, pcl, topic, 0, "r6")
	got, _ = records(t, a.fetch(nil, nil, 5000))
	if len(got) != 1 || got[0].value != "r6" || got[0].count != 1 {
		t.Fatalf("after everything was done: %+v", got)
	}

	// Session epochs.
	stale := a.fetchReq(nil, nil, 0)
	stale.ShareSessionEpoch = a.epoch + 5
	if resp := a.request(stale).(*kmsg.ShareFetchResponse); resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("wrong epoch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	b := newShareMember(t, s.KafkaAddrs, group, "member-b", tid)
	b.epoch = 1
	if resp := b.request(b.fetchReq([]int32{0}, nil, 0)).(*kmsg.ShareFetchResponse); resp.ErrorCode != kerr.ShareSessionNotFound.Code {
		t.Fatalf("no session: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	b.epoch = 0
	if code, _ := b.acknowledge([]ack{{0, 6, 1}}); code != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("ShareAcknowledge at epoch 0: %v", kerr.ErrorForCode(code))
	}
	if resp := b.request(b.fetchReq([]int32{0}, []ack{{0, 6, 1}}, 0)).(*kmsg.ShareFetchResponse); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("acks at epoch 0: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	// Another member cannot acknowledge a's record.
	records(t, b.fetch([]int32{0}, nil, 0))
	if code, parts := b.acknowledge([]ack{{0, 6, 1}}); code != 0 || parts[0] != kerr.InvalidRecordState.Code {
		t.Fatalf("ack of another member's record: %d %v", code, parts)
	}
	// Bad input: empty member id, unknown topic id, partition outside the topic,
	// unknown acknowledge type.
	noMember := b.fetchReq([]int32{0}, nil, 0)
	noMember.MemberID = kmsg.StringPtr("")
	if resp := b.request(noMember).(*kmsg.ShareFetchResponse); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("empty member id: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	c := newShareMember(t, s.KafkaAddrs, group, "member-c", [16]byte{1, 2, 3})
	resp := c.fetch([]int32{0}, nil, 0)
	if len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown topic id: %+v", resp.Topics)
	}
	// A member id the group does not have, in this group and in one that does not
	// exist: refused before any share state is made.
	for _, g := range []string{group, topicName("nosuchgroup")} {
		x := newShareStranger(t, s.KafkaAddrs, g, "stranger", tid)
		if resp := x.request(x.fetchReq([]int32{0, 1}, nil, 0)).(*kmsg.ShareFetchResponse); resp.ErrorCode != kerr.UnknownMemberID.Code {
			t.Fatalf("ShareFetch from a non-member of %s: %v, want UNKNOWN_MEMBER_ID", g, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	d := newShareMember(t, s.KafkaAddrs, group, "member-d", tid)
	resp = d.fetch([]int32{7}, nil, 0)
	if len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("partition outside the topic: %+v", resp.Topics)
	}
	if code, parts := a.acknowledge([]ack{{0, 6, 9}}); code != 0 || parts[0] != kerr.InvalidRequest.Code {
		t.Fatalf("unknown acknowledge type: %d %v", code, parts)
	}
	// FINAL_EPOCH closes a's session, releasing r6: b gets it, delivery count 2.
	a.epoch = -1
	if code, parts := a.acknowledge(nil); code != 0 || len(parts) != 0 {
		t.Fatalf("final ShareAcknowledge: %d %v", code, parts)
	}
	got, _ = records(t, b.fetch(nil, nil, 5000))
	if len(got) != 1 || got[0].value != "r6" || got[0].count != 2 {
		t.Fatalf("after a's session closed: %+v", got)
	}
	a.epoch = 1
	if resp := a.request(a.fetchReq(nil, nil, 0)).(*kmsg.ShareFetchResponse); resp.ErrorCode != kerr.ShareSessionNotFound.Code {
		t.Fatalf("closed session: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// TestShareLockExpiry: a member that acquires records and goes silent, its connection
// open, loses them when the 2 s lock expires (delivery count 2); one whose connection
// closes (a killed consumer) loses them too (released when the gateway sees the close,
// or when the lock expires); after the delivery count limit (3) a record is archived.
func TestShareLockExpiry(t *testing.T) {
	s := shareStack(t)
	pcl := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(pcl)
	topic, group := topicName("sharelock"), topicName("sgrp")
	createTopic(t, adm, topic, 1, nil)
	tid := topicID(t, adm, topic)
	produceValues(t, pcl, topic, 0, "x0", "x1", "x2")

	silent := newShareMember(t, s.KafkaAddrs, group, "silent", tid)
	if got, _ := records(t, silent.fetch([]int32{0}, nil, 5000)); len(got) != 3 {
		t.Fatalf("silent acquired %+v", got)
	}
	waiter := newShareMember(t, s.KafkaAddrs, group, "waiter", tid)
	got, _ := records(t, waiter.fetch([]int32{0}, nil, 0))
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		rs, _ := records(t, waiter.fetch(nil, nil, 5000))
		got = append(got, rs...)
	}
	if len(got) != 3 {
		t.Fatalf("after the lock expired the waiter got %+v", got)
	}
	for _, r := range got {
		if r.count != 2 {
			t.Fatalf("redelivered with count %d: %+v", r.count, r)
		}
	}
	if code, parts := silent.acknowledge([]ack{{0, 0, 1}}); code != 0 || parts[0] != kerr.InvalidRecordState.Code {
		t.Fatalf("ack after the lock expired: %d %v", code, parts)
	}
	// The waiter's connection closes with its records acquired (count 2): a third
	// member gets them at once, count 3, the limit; released again they are archived.
	waiter.cl.Close()
	third := newShareMember(t, s.KafkaAddrs, group, "third", tid)
	got, _ = records(t, third.fetch([]int32{0}, nil, 5000))
	deadline = time.Now().Add(30 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		rs, _ := records(t, third.fetch(nil, nil, 1000))
		got = append(got, rs...)
	}
	if len(got) != 3 || got[0].count != 3 {
		t.Fatalf("after the waiter's connection closed: %+v", got)
	}
	rs, _ := records(t, third.fetch(nil, []ack{{0, 0, 2}, {0, 1, 2}, {0, 2, 2}}, 1000))
	if len(rs) != 0 {
		t.Fatalf("records past the delivery count limit came back: %+v", rs)
	}
	produceValues(t, pcl, topic, 0, "x3")
	rs, _ = records(t, third.fetch(nil, nil, 5000))
	if len(rs) != 1 || rs[0].value != "x3" {
		t.Fatalf("after archiving: %+v", rs)
	}
}

// TestShareThreeMembersExactlyOnce: three members, each on its own connection, fetch
// all three partitions at once and accept what they get; every record is accepted
// exactly once overall.
func TestShareThreeMembersExactlyOnce(t *testing.T) {
	s := shareStack(t)
	pcl := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(pcl)
	topic, group := topicName("share3"), topicName("sgrp")
	createTopic(t, adm, topic, 3, nil)
	tid := topicID(t, adm, topic)
	const perPartition = 300
	var want []string
	for p := int32(0); p < 3; p++ {
		var recs []*kgo.Record
		for i := 0; i < perPartition; i++ {
			v := fmt.Sprintf("p%d-%d", p, i)
			want = append(want, v)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)})
		}
		if err := pcl.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		m := newShareMember(t, s.KafkaAddrs, group, fmt.Sprintf("m%d", i), tid)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pending []ack
			parts := []int32{0, 1, 2}
			for ctx.Err() == nil {
				req := m.fetchReq(parts, pending, 500)
				req.MaxRecords = 50
				resp, err := req.RequestWith(ctx, m.cl.Broker(0))
				if err != nil || resp.ErrorCode != 0 {
					return
				}
				m.next()
				parts = nil
				pending = nil
				for _, rt := range resp.Topics {
					for _, p := range rt.Partitions {
						if p.AcknowledgeErrorCode != 0 {
							t.Errorf("member %s: acknowledge error %v", m.member, kerr.ErrorForCode(p.AcknowledgeErrorCode))
						}
					}
				}
				got, _, err := decodeShareFetch(resp)
				if err != nil {
					t.Errorf("member %s: %v", m.member, err)
					return
				}
				mu.Lock()
				for _, r := range got {
					seen[r.value]++
					total++
					pending = append(pending, ack{r.partition, r.offset, 1})
				}
				done := total >= len(want)
				mu.Unlock()
				if done && len(pending) == 0 {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	var dup, missing []string
	for _, v := range want {
		switch seen[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			dup = append(dup, v)
		}
	}
	sort.Strings(dup)
	if len(missing) > 0 || len(dup) > 0 || total != len(want) {
		t.Fatalf("%d acquisitions for %d records: missing %d (%v), delivered twice %d (%v)", total, len(want), len(missing), first(missing, 5), len(dup), first(dup, 5))
	}
}

// freezer dials connections that it can freeze all at once: reads and writes then
// block until the connection is closed or the freezer killed (kill: they fail, as a
// dead host's sockets eventually do), as with a host that died without closing its
// sockets (no FIN, no more heartbeats, no acknowledgements).
type freezer struct {
	once, killOnce sync.Once
	frozen, dead   chan struct{}
}

func newFreezer() *freezer { return &freezer{frozen: make(chan struct{}), dead: make(chan struct{})} }

func (f *freezer) freeze() { f.once.Do(func() { close(f.frozen) }) }

func (f *freezer) kill() {
	f.freeze()
	f.killOnce.Do(func() { close(f.dead) })
}

func (f *freezer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f, closed: make(chan struct{})}, nil
}

type frozenConn struct {
	net.Conn
	f      *freezer
	once   sync.Once
	closed chan struct{}
}

func (c *frozenConn) block() error {
	select {
	case <-c.f.frozen:
		select {
		case <-c.closed:
		case <-c.f.dead:
		}
		return net.ErrClosed
	default:
		return nil
	}
}

func (c *frozenConn) Read(b []byte) (int, error) {
	if err := c.block(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if err == nil {
		err = c.block() // frozen while the read waited: the bytes never arrive
		if err != nil {
			n = 0
		}
	}
	return n, err
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if err := c.block(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *frozenConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// shareEvent is what a kgo share consumer saw of one record.
type shareEvent struct {
	member string
	value  string
	count  int32
	ack    kgo.AckStatus
}

// TestShareConsumersKgo: three kgo share consumers of one share group over three
// partitions of 10,000 records each (kgo's default 500 records a fetch). Records named
// "-rel" are released the first time a consumer sees them and come back at once with
// the delivery count one higher; "-rej" records are rejected and never come back;
// every other record is accepted. One consumer, after it has handled (and flushed the
// acknowledgements of) 3,000 records, takes its next fetch and dies without a word
// (its connections frozen): after its locks expire and the group reassigns its
// partition, the others get those records with the delivery count one higher. Overall
// every record but the rejected is accepted exactly once.
func TestShareConsumersKgo(t *testing.T) { testShareConsumersKill(t, 10000, 3000, 500) }

// testShareConsumersKill runs TestShareConsumersKgo: perPartition records a partition,
// the victim dies on its first fetch after handling victimAfter records, maxRecords a
// fetch.
func testShareConsumersKill(t *testing.T, perPartition, victimAfter, maxRecords int) {
	testenv.Require(t)
	s, err := stack.Start(ctxT(t, 2*time.Minute), stack.Options{
		GatewayFlags:     []string{"--group-share-record-lock-duration-ms=2000", "--share-auto-offset-reset=earliest"},
		CoordinatorFlags: []string{"--group-share-session-timeout=6s", "--group-share-heartbeat-interval=1s"},
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", s.LogTails(80))
		}
		_ = s.Close()
	})
	pcl := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(pcl)
	topic, group := topicName("sharekgo"), topicName("sgrp")
	createTopic(t, adm, topic, 3, nil)
	var want []string
	var recs []*kgo.Record
	for p := int32(0); p < 3; p++ {
		for i := 0; i < perPartition; i++ {
			v := fmt.Sprintf("p%d-%d", p, i)
			switch i % 10 {
			case 3:
				v += "-rel"
			case 7:
				v += "-rej"
			}
			want = append(want, v)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)})
		}
	}
	if err := pcl.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var events []shareEvent
	accepted := map[string]int{}
	released := map[string]bool{}
	rejects := 0
	victimHeld := map[string]bool{}
	for _, v := range want {
		if strings.HasSuffix(v, "-rej") {
			rejects++
		}
	}
	done := func() bool { return len(accepted) == len(want)-rejects }

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	fz := newFreezer()
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("c%d", i)
		opts := []kgo.Opt{kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(int32(maxRecords))}
		victim := i == 2
		if victim {
			opts = append(opts, kgo.Dialer(fz.dial))
		}
		cl := newClient(t, s.KafkaAddrs, opts...)
		if victim {
			t.Cleanup(fz.kill) // before the client's Close (cleanups run last first)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			handled := 0
			for ctx.Err() == nil {
				fs := cl.PollRecords(ctx, maxRecords)
				for _, e := range fs.Errors() {
					if ctx.Err() == nil {
						t.Logf("%s: fetch error %v", name, e)
					}
				}
				got := fs.Records()
				mu.Lock()
				if victim && len(got) > 0 && handled >= victimAfter {
					for _, r := range got {
						victimHeld[string(r.Value)] = true
						events = append(events, shareEvent{name, string(r.Value), r.DeliveryCount(), 0})
					}
					mu.Unlock()
					fz.freeze() // dies holding them: no ack, no heartbeat, no close
					return
				}
				for _, r := range got {
					v := string(r.Value)
					st := kgo.AckAccept
					switch {
					case strings.HasSuffix(v, "-rej"):
						st = kgo.AckReject
					case strings.HasSuffix(v, "-rel") && !released[v]:
						st = kgo.AckRelease
						released[v] = true
					}
					if st == kgo.AckAccept {
						accepted[v]++
					}
					events = append(events, shareEvent{name, v, r.DeliveryCount(), st})
					r.Ack(st)
				}
				handled += len(got)
				finished := done()
				mu.Unlock()
				if victim && len(got) > 0 {
					// What it handled is acknowledged before it goes on: only the
					// records of the fetch it dies holding come back.
					if err := cl.FlushAcks(ctx); err != nil && ctx.Err() == nil {
						t.Errorf("%s: FlushAcks: %v", name, err)
					}
				}
				if finished {
					if err := cl.FlushAcks(ctx); err != nil && ctx.Err() == nil {
						t.Errorf("%s: FlushAcks: %v", name, err)
					}
					cancel()
				}
			}
		}()
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(victimHeld) == 0 {
		t.Fatalf("the victim never got a record; events %v", events)
	}
	// Per value: the delivery counts seen, in order.
	seen := map[string][]shareEvent{}
	for _, e := range events {
		seen[e.value] = append(seen[e.value], e)
	}
	for _, v := range want {
		es := seen[v]
		switch {
		case strings.HasSuffix(v, "-rej"):
			if n := len(es); n == 0 || es[n-1].ack != kgo.AckReject {
				t.Errorf("%s: %+v, want delivered until rejected once", v, es)
			}
			for _, e := range es[:max(len(es)-1, 0)] {
				if e.ack == kgo.AckReject {
					t.Errorf("%s: delivered again after its reject: %+v", v, es)
				}
			}
		case accepted[v] != 1:
			t.Errorf("%s accepted %d times: %+v", v, accepted[v], es)
		}
		for i := 1; i < len(es); i++ {
			// kgo fetches ahead of the polls: the victim's next ShareFetch, carrying
			// its RELEASE of a record, may be in flight when it freezes and acquire
			// that record again, a delivery nobody polls (the lock expires). That is
			// the one count allowed to go unseen.
			unseen := es[i-1].member == "c2" && es[i-1].ack == kgo.AckRelease && es[i].count == es[i-1].count+2
			if es[i].count != es[i-1].count+1 && !unseen {
				t.Errorf("%s: delivery counts %+v, want each redelivery one higher", v, es)
			}
		}
		for i, e := range es {
			// What the dead consumer held (no ack) comes back to another, one count
			// higher: 2 when it was the first delivery.
			if e.ack == 0 && (i+1 >= len(es) || es[i+1].member == e.member) {
				t.Errorf("%s held by the dead consumer: %+v, want redelivered to another", v, es)
			}
		}
		if strings.HasSuffix(v, "-rel") {
			if len(es) < 2 || es[0].ack != kgo.AckRelease && es[0].ack != 0 || es[len(es)-1].ack != kgo.AckAccept {
				t.Errorf("%s: %+v, want released then redelivered and accepted", v, es)
			}
		}
	}
	if !done() {
		t.Fatalf("accepted %d of %d records before the deadline", len(accepted), len(want)-rejects)
	}
}

// TestShareStateDeletedAndTopicRecreated: acknowledgements for share state deleted by
// DeleteShareGroupOffsets answer UNKNOWN_TOPIC_OR_PARTITION (ShareAcknowledge and
// piggybacked on the closing ShareFetch), and for a deleted topic UNKNOWN_TOPIC_ID, as
// Kafka answers; a topic deleted and created again with the same name starts its
// share partitions afresh: the new topic's records from offset 0, delivery count 1,
// none of the old topic's.
func TestShareStateDeletedAndTopicRecreated(t *testing.T) {
	s := shareStack(t)
	pcl := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(pcl)
	topic, group, other := topicName("sharedel"), topicName("sgrp"), topicName("sgrp2")
	createTopic(t, adm, topic, 1, nil)
	tid := topicID(t, adm, topic)
	produceValues(t, pcl, topic, 0, "old0", "old1", "old2")

	a := newShareMember(t, s.KafkaAddrs, group, "member-a", tid)
	if got, _ := records(t, a.fetch([]int32{0}, nil, 5000)); len(got) != 3 {
		t.Fatalf("a acquired %+v", got)
	}
	c := newShareMember(t, s.KafkaAddrs, other, "member-c", tid)
	if got, _ := records(t, c.fetch([]int32{0}, nil, 5000)); len(got) != 3 {
		t.Fatalf("c acquired %+v", got)
	}
	// a leaves (its records released); with the group empty its share state of the
	// topic is deleted; a's acknowledgements on its still open session find none.
	a.leave()
	if res, err := adm.DeleteShareGroupOffsets(ctxT(t, 10*time.Second), group, topic); err != nil || res[topic] != nil {
		t.Fatalf("DeleteShareGroupOffsets: %v %v", res, err)
	}
	if code, parts := a.acknowledge([]ack{{0, 0, 1}}); code != 0 || parts[0] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("ShareAcknowledge on deleted share state: %v %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code), parts)
	}
	a.epoch = -1
	if _, codes := records(t, a.fetch(nil, []ack{{0, 1, 1}}, 0)); codes[0] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("closing ShareFetch's acknowledgement on deleted share state: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(codes[0]))
	}

	// The topic deleted (c holding its records in the other group) and created again.
	if _, err := adm.DeleteTopics(ctxT(t, 20*time.Second), topic); err != nil {
		t.Fatal(err)
	}
	if code, parts := c.acknowledge([]ack{{0, 0, 1}}); code != 0 || parts[0] != kerr.UnknownTopicID.Code {
		t.Fatalf("ShareAcknowledge on a deleted topic: %v %v, want UNKNOWN_TOPIC_ID", kerr.ErrorForCode(code), parts)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := adm.CreateTopic(ctxT(t, 20*time.Second), 1, -1, nil, topic)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("re-creating %s: %v", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitTopic(t, adm, topic, 1)
	// kadm's Metadata may answer from the client's cache: ask the gateway itself.
	var nid [16]byte
	for end := time.Now().Add(10 * time.Second); ; {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 10*time.Second), pcl.Broker(0))
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && resp.Topics[0].TopicID != tid {
			nid = resp.Topics[0].TopicID
			break
		}
		if time.Now().After(end) {
			t.Fatalf("metadata of the re-created topic: %+v %v; want a new topic id", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	produceValues(t, pcl, topic, 0, "new0")
	for _, g := range []string{other, group} {
		m := newShareMember(t, s.KafkaAddrs, g, "fresh", nid)
		var got []acquired
		for end := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(end); {
			rs, _ := records(t, m.fetch([]int32{0}, nil, 2000))
			got = append(got, rs...)
		}
		if len(got) != 1 || got[0].offset != 0 || got[0].value != "new0" || got[0].count != 1 {
			t.Fatalf("group %s on the re-created topic acquired %+v; want new0 at offset 0, delivery count 1", g, got)
		}
	}
}
