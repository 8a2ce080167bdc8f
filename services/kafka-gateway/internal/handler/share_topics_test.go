package handler

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// shareEnv is a handler with a fake share service and one connection's Session.
type shareEnv struct {
	h    *Handler
	co   *fake.Coordinator
	fs   *fakeShare
	sess *Session
}

func newShareEnv(t *testing.T, deps func(*Deps)) *shareEnv {
	t.Helper()
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	fs := &fakeShare{}
	d := Deps{Storage: st, Coordinator: co, Share: fs, Log: zaptest.NewLogger(t)}
	if deps != nil {
		deps(&d)
	}
	h := New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1}, d)
	return &shareEnv{h: h, co: co, fs: fs, sess: NewSession(false, AnonymousPrincipal)}
}

func (e *shareEnv) do(t *testing.T, req kmsg.Request, v int16) kmsg.Response {
	t.Helper()
	req.SetVersion(v)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.h.Handle(ctx, &Request{Body: req, Session: e.sess})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// topicID creates topic (2 partitions) in the coordinator, past the gateway (as
// another gateway would), and returns its id.
func (e *shareEnv) topicID(t *testing.T, name string) [16]byte {
	t.Helper()
	ctx := context.Background()
	if _, err := e.co.CreateTopics(ctx, &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{{Name: name, Partitions: 2}}}); err != nil {
		t.Fatal(err)
	}
	r, err := e.co.GetTopics(ctx, &coordinatorv1.GetTopicsRequest{Names: []string{name}})
	if err != nil || len(r.Topics) != 1 {
		t.Fatalf("GetTopics %s: %v %v", name, err, r)
	}
	var id [16]byte
	copy(id[:], r.Topics[0].GetTopicId())
	return id
}

func (e *shareEnv) listings() int {
	return e.co.GetTopicsCalls
}

// shareFetchReq asks for parts (topic id -> partitions) at epoch, acknowledging
// offset 0 of each when ack is set.
func shareFetchReq(member string, epoch int32, parts map[[16]byte][]int32, ack bool) *kmsg.ShareFetchRequest {
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID, req.ShareSessionEpoch, req.MaxRecords = kmsg.StringPtr("g"), kmsg.StringPtr(member), epoch, 10
	for id, ps := range parts {
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = id
		for _, p := range ps {
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rp.Partition = p
			if ack {
				b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
				b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = 0, 0, []int8{1}
				rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

func shareAckReq(member string, epoch int32, parts map[[16]byte][]int32) *kmsg.ShareAcknowledgeRequest {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID, req.ShareSessionEpoch = kmsg.StringPtr("g"), kmsg.StringPtr(member), epoch
	for id, ps := range parts {
		rt := kmsg.NewShareAcknowledgeRequestTopic()
		rt.TopicID = id
		for _, p := range ps {
			rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
			rp.Partition = p
			b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
			b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = 0, 0, []int8{1}
			rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// TestShareUnknownTopicIDsCheap: ShareFetch and ShareAcknowledge naming topic ids no
// topic has answer UNKNOWN_TOPIC_ID for each such partition, as Kafka does, without a
// full topic listing per partition or per request: many unknown ids over many
// requests cost one listing. A topic created since (past this gateway) is found once
// the gateway hears of it (InvalidateTopic, the topics-changed notification) or the
// short negative cache runs out.
func TestShareUnknownTopicIDsCheap(t *testing.T) {
	e := newShareEnv(t, nil)
	known := e.topicID(t, "t")
	parts := map[[16]byte][]int32{known: {0}}
	var unknown [][16]byte
	for i := 0; i < 8; i++ {
		var id [16]byte
		_, _ = rand.Read(id[:])
		unknown = append(unknown, id)
		parts[id] = []int32{0, 1, 2}
	}
	e.do(t, kmsg.NewPtrMetadataRequest(), 12) // every topic cached, as a client's first Metadata
	before := e.listings()
	check := func(what string, code func(id [16]byte, p int32) (int16, bool)) {
		t.Helper()
		for _, id := range unknown {
			for _, p := range []int32{0, 1, 2} {
				c, ok := code(id, p)
				if !ok || c != kerr.UnknownTopicID.Code {
					t.Fatalf("%s: partition %d of an unknown id: %v (answered %v), want UNKNOWN_TOPIC_ID", what, p, kerr.ErrorForCode(c), ok)
				}
			}
		}
	}
	const rounds = 20
	for epoch := int32(0); epoch < 2*rounds; epoch += 2 {
		fr := e.do(t, shareFetchReq("m", epoch, parts, epoch > 0), 1).(*kmsg.ShareFetchResponse)
		if fr.ErrorCode != 0 {
			t.Fatalf("epoch %d: %v", epoch, kerr.ErrorForCode(fr.ErrorCode))
		}
		byID := map[[16]byte]map[int32]kmsg.ShareFetchResponseTopicPartition{}
		for _, rt := range fr.Topics {
			if byID[rt.TopicID] == nil {
				byID[rt.TopicID] = map[int32]kmsg.ShareFetchResponseTopicPartition{}
			}
			for _, rp := range rt.Partitions {
				byID[rt.TopicID][rp.Partition] = rp
			}
		}
		if k := byID[known][0]; k.ErrorCode != 0 || len(k.AcquiredRecords) != 1 {
			t.Fatalf("epoch %d: the known partition: %+v", epoch, k)
		}
		check("ShareFetch", func(id [16]byte, p int32) (int16, bool) { rp, ok := byID[id][p]; return rp.ErrorCode, ok })
		if epoch > 0 {
			check("ShareFetch acknowledgement", func(id [16]byte, p int32) (int16, bool) {
				rp, ok := byID[id][p]
				return rp.AcknowledgeErrorCode, ok
			})
		}
		ar := e.do(t, shareAckReq("m", epoch+1, parts), 1).(*kmsg.ShareAcknowledgeResponse)
		if ar.ErrorCode != 0 {
			t.Fatalf("ShareAcknowledge at %d: %v", epoch+1, kerr.ErrorForCode(ar.ErrorCode))
		}
		ack := map[[16]byte]map[int32]int16{}
		for _, rt := range ar.Topics {
			ack[rt.TopicID] = map[int32]int16{}
			for _, rp := range rt.Partitions {
				ack[rt.TopicID][rp.Partition] = rp.ErrorCode
			}
		}
		check("ShareAcknowledge", func(id [16]byte, p int32) (int16, bool) { c, ok := ack[id][p]; return c, ok })
	}
	if n := e.listings() - before; n > 1 {
		t.Fatalf("%d requests naming %d unknown partitions made %d topic listings; want at most 1", 2*rounds, 3*len(unknown), n)
	}

	// A topic created past this gateway: unknown while the negative cache holds it,
	// found at once after the topics-changed notification.
	fresh := e.topicID(t, "fresh")
	unknownTopic := func(epoch int32) bool {
		t.Helper()
		fr := e.do(t, shareFetchReq("m", epoch, map[[16]byte][]int32{fresh: {0}}, false), 1).(*kmsg.ShareFetchResponse)
		if fr.ErrorCode != 0 || len(fr.Topics) == 0 {
			t.Fatalf("fetch of the new topic: %+v", fr)
		}
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				if rt.TopicID == fresh && rp.Partition == 0 {
					return rp.ErrorCode == kerr.UnknownTopicID.Code
				}
			}
		}
		t.Fatalf("new topic's partition not answered: %+v", fr)
		return false
	}
	e.h.topics.markMissing(fresh) // a lookup raced the creation
	if !unknownTopic(2 * rounds) {
		t.Fatal("an id just found missing was looked up again at once")
	}
	e.h.InvalidateTopic("fresh")
	if unknownTopic(2*rounds + 1) {
		t.Fatal("new topic still unknown after the topics-changed notification")
	}
	// And without a notification, once the negative cache runs out.
	later := e.topicID(t, "later")
	e.h.topics.markMissing(later)
	e.h.topics.mu.Lock()
	e.h.topics.missTTL, e.h.topics.listEvery = 50*time.Millisecond, 50*time.Millisecond
	e.h.topics.mu.Unlock()
	time.Sleep(60 * time.Millisecond)
	fr := e.do(t, shareFetchReq("m", 2*rounds+2, map[[16]byte][]int32{later: {1}}, false), 1).(*kmsg.ShareFetchResponse)
	for _, rt := range fr.Topics {
		for _, rp := range rt.Partitions {
			if rt.TopicID == later && rp.ErrorCode != 0 {
				t.Fatalf("topic created past the gateway still %v after the negative cache ran out", kerr.ErrorForCode(rp.ErrorCode))
			}
		}
	}
}
