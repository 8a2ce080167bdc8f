package handler

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// routeNode is a storage-core stand-in that leads the channels in leads and answers
// the others as a raft follower does, naming leader.
type routeNode struct {
	storagev1.UnimplementedStorageServiceServer
	addr   string
	leader string
	leads  map[string]bool
	code   storagev1.ErrorCode // when set, every append's answer
	term   atomic.Uint64       // GetChannel's leader_term
	mu     sync.Mutex
	calls  map[string]int // per channel: appends received
}

func (n *routeNode) AppendBatches(_ context.Context, in *storagev1.AppendBatchesRequest) (*storagev1.AppendBatchesResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := &storagev1.AppendBatchesResponse{}
	for _, c := range in.GetChannels() {
		n.calls[c.GetChannel()]++
		r := &storagev1.ChannelAppendResult{Channel: c.GetChannel(), FirstSequence: 1}
		if n.code != 0 {
			r = &storagev1.ChannelAppendResult{Channel: c.GetChannel(), Error: n.code}
		} else if !n.leads[c.GetChannel()] {
			r = &storagev1.ChannelAppendResult{Channel: c.GetChannel(), Error: storagev1.ErrorCode_ERROR_CODE_NOT_LEADER, LeaderAddress: n.leader}
		}
		out.Results = append(out.Results, r)
	}
	return out, nil
}

func (n *routeNode) LookupSequence(ctx context.Context, in *storagev1.LookupSequenceRequest) (*storagev1.LookupSequenceResponse, error) {
	if !n.leads[in.GetChannel()] {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(grpcx.LeaderTrailer, n.leader))
		return nil, status.Error(codes.FailedPrecondition, "not the leader")
	}
	return &storagev1.LookupSequenceResponse{Sequence: 7, Found: true}, nil
}

func (n *routeNode) GetChannel(_ context.Context, in *storagev1.GetChannelRequest) (*storagev1.GetChannelResponse, error) {
	return &storagev1.GetChannelResponse{Channel: &storagev1.Channel{Name: in.GetName(), LeaderAddress: n.leader, LeaderTerm: n.term.Load(), HighWatermark: 3}}, nil
}

// OffsetForLeaderEpoch answers from the epoch index {1: 0, term: 3} and high
// watermark 5, on the channel's leader only.
func (n *routeNode) OffsetForLeaderEpoch(ctx context.Context, in *storagev1.OffsetForLeaderEpochRequest) (*storagev1.OffsetForLeaderEpochResponse, error) {
	if !n.leads[in.GetChannel()] {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(grpcx.LeaderTrailer, n.leader))
		return nil, status.Error(codes.FailedPrecondition, "not the leader")
	}
	term, req := int32(n.term.Load()), in.GetLeaderEpoch()
	out := &storagev1.OffsetForLeaderEpochResponse{LeaderEpoch: -1, EndSequence: -1, CurrentLeaderEpoch: term}
	switch {
	case req < 0 || req > term:
	case req == term:
		out.LeaderEpoch, out.EndSequence = term, 5
	case req < 1:
		out.LeaderEpoch, out.EndSequence = req, 0
	default:
		out.LeaderEpoch, out.EndSequence = 1, 3
	}
	return out, nil
}

func (n *routeNode) Fetch(_ context.Context, in *storagev1.FetchRequest) (*storagev1.FetchResponse, error) {
	out := &storagev1.FetchResponse{}
	for _, c := range in.GetChannels() {
		out.Results = append(out.Results, &storagev1.FetchChannelResult{Channel: c.GetChannel(), HighWatermark: 3, Batches: []byte(n.addr)})
	}
	return out, nil
}

func startRouteNodes(t *testing.T, k int) ([]*routeNode, []*grpc.Server) {
	t.Helper()
	nodes := make([]*routeNode, k)
	srvs := make([]*grpc.Server, k)
	for i := range nodes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &routeNode{addr: lis.Addr().String(), leads: map[string]bool{}, calls: map[string]int{}}
		srvs[i] = grpc.NewServer()
		storagev1.RegisterStorageServiceServer(srvs[i], nodes[i])
		go func() { _ = srvs[i].Serve(lis) }()
		t.Cleanup(srvs[i].Stop)
	}
	return nodes, srvs
}

// TestRouterFollowsLeaders: channel a is led by node 2, b by node 1. One AppendBatches
// with both, sent through the Router (default node 1), gets both appended: b at once,
// a resent to node 2 after node 1's NOT_LEADER; the next call sends a straight to node 2
// (cached). LookupSequence follows the trailer. With node 2 stopped, the append of a is
// NOT_LEADER (retriable) and a Fetch of a is read from another node. A Fetch of a
// channel with no cached leader goes to the one GetChannel names.
func TestRouterFollowsLeaders(t *testing.T) {
	nodes, srvs := startRouteNodes(t, 3)
	for _, n := range nodes {
		n.leader = nodes[1].addr
	}
	nodes[1].leads["a"] = true
	nodes[0].leads["b"] = true
	nodes[0].leader = nodes[1].addr // for a; b is node 1's own
	lc, err := grpcx.NewLeaderConn([]string{nodes[0].addr, nodes[1].addr, nodes[2].addr}, grpcx.StorageReads)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	r := NewRouter(lc)
	ctx := context.Background()
	req := &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "a"}, {Channel: "b"}}}
	for round := 1; round <= 2; round++ {
		out, err := r.AppendBatches(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range out.GetResults() {
			if res.GetChannel() != req.Channels[i].Channel || res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				t.Fatalf("round %d result %d: %v", round, i, res)
			}
		}
	}
	if got := nodes[0].calls["a"]; got != 1 {
		t.Fatalf("node 1 got %d appends of a, want 1 (the first, then the cache)", got)
	}
	if nodes[1].calls["a"] != 2 || nodes[0].calls["b"] != 2 {
		t.Fatalf("leaders got a %d, b %d appends, want 2 each", nodes[1].calls["a"], nodes[0].calls["b"])
	}
	if ls, err := r.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: "c"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("lookup of c (nobody leads; the trailer names node 2, which refuses too): %v %v, want UNAVAILABLE", ls, err)
	}
	nodes[1].leads["c"] = true
	if ls, err := r.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: "c"}); err != nil || ls.GetSequence() != 7 {
		t.Fatalf("lookup of c: %v %v", ls, err)
	}

	// A read of a channel whose leader is not cached goes to the leader GetChannel names.
	f, err := r.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "d"}}})
	if err != nil || string(f.GetResults()[0].GetBatches()) != nodes[1].addr {
		t.Fatalf("fetch of d: %v %v, want it served by node 2", f, err)
	}

	srvs[1].Stop()
	out, err := r.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "a"}}})
	if err != nil || out.GetResults()[0].GetError() != storagev1.ErrorCode_ERROR_CODE_NOT_LEADER {
		t.Fatalf("append of a with its leader down: %v %v, want NOT_LEADER", out, err)
	}
	f, err = r.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "a"}, {Channel: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range f.GetResults() {
		if res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED || string(res.GetBatches()) == nodes[1].addr || res.GetHighWatermark() != 3 {
			t.Fatalf("fetch result %d: %v", i, res)
		}
	}
}

// TestRouterProduceCodes: Produce through a Router gets the Kafka code of each
// raft-mode refusal: success on the leader; NOT_LEADER_OR_FOLLOWER (6) while no node
// names a leader (an election) and while no node answers; NOT_ENOUGH_REPLICAS (19)
// when the leader could not reach a majority.
func TestRouterProduceCodes(t *testing.T) {
	nodes, srvs := startRouteNodes(t, 2)
	lc, err := grpcx.NewLeaderConn([]string{nodes[0].addr, nodes[1].addr}, grpcx.StorageReads)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	brokers := []Broker{{NodeID: 1, Host: "127.0.0.1", Port: 9092}}
	e := &env{h: New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1},
		Deps{Storage: NewRouter(lc), Coordinator: co, Brokers: func() []Broker { return brokers }, Log: zaptest.NewLogger(t)}), st: st, co: co}
	e.createTopic(t, "t", 1, nil)
	produce := func() int16 {
		t.Helper()
		return e.do(t, produceReq("t", 0, fake.Batch("v")), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	nodes[1].leads["kafka.t"] = true
	nodes[0].leader = nodes[1].addr
	if got := produce(); got != 0 {
		t.Fatalf("produce via the leader: code %d", got)
	}
	nodes[1].leads["kafka.t"] = false // an election: nobody names a leader
	if got := produce(); got != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce during an election: code %d, want NOT_LEADER_OR_FOLLOWER", got)
	}
	nodes[0].code, nodes[1].code = storagev1.ErrorCode_ERROR_CODE_NOT_ENOUGH_REPLICAS, storagev1.ErrorCode_ERROR_CODE_NOT_ENOUGH_REPLICAS
	if got := produce(); got != kerr.NotEnoughReplicas.Code {
		t.Fatalf("produce without a majority: code %d, want NOT_ENOUGH_REPLICAS", got)
	}
	srvs[0].Stop()
	srvs[1].Stop()
	if got := produce(); got != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce with every node down: code %d, want NOT_LEADER_OR_FOLLOWER", got)
	}
}

// TestRouterLeaderEpochs: through a Router the Kafka leader epoch is the channel's Raft
// term (GetChannel leader_term): Metadata v12 reports it per partition, and after an
// election (a larger term) a larger one; Fetch v12 and ListOffsets v7 read with the
// current epoch or -1, get FENCED_LEADER_EPOCH with the epoch before the election and
// UNKNOWN_LEADER_EPOCH with one no node has reached (an epoch other than the cached
// one is asked again, so a re-created channel's smaller term reads); ListOffsets
// answers the term; OffsetForLeaderEpoch passes on the leader's answer (storage-core
// OffsetForLeaderEpoch: the epoch at or below the one asked and the next epoch's
// start, the current epoch's end at the high watermark, one above it UNDEFINED), and
// checks current_leader_epoch against the term of that answer.
func TestRouterLeaderEpochs(t *testing.T) {
	nodes, _ := startRouteNodes(t, 1)
	n := nodes[0]
	n.leader = n.addr
	n.leads["kafka.ep"] = true
	n.term.Store(4)
	lc, err := grpcx.NewLeaderConn([]string{n.addr}, grpcx.StorageReads)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	brokers := []Broker{{NodeID: 1, Host: "127.0.0.1", Port: 9092}}
	e := &env{h: New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1},
		Deps{Storage: NewRouter(lc), Coordinator: co, Brokers: func() []Broker { return brokers }, Log: zaptest.NewLogger(t)}), st: st, co: co}
	e.createTopic(t, "ep", 1, nil)
	metaEpoch := func() int32 {
		t.Helper()
		return e.do(t, metadataReq("ep"), 12).(*kmsg.MetadataResponse).Topics[0].Partitions[0].LeaderEpoch
	}
	fetch := func(epoch int32) int16 {
		t.Helper()
		req := fetchReq("ep", [16]byte{}, 0, 0)
		req.Topics[0].Partitions[0].CurrentLeaderEpoch = epoch
		return e.do(t, req, 12).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
	}
	listOffsets := func(epoch int32) kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "ep"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = 0, epoch, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return e.do(t, req, 7).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	forEpoch := func(current, requested int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "ep"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, requested
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return e.do(t, req, 4).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	if got := metaEpoch(); got != 4 {
		t.Fatalf("Metadata leader epoch %d, want the term 4", got)
	}
	for _, ep := range []int32{-1, 4} {
		if got := fetch(ep); got != 0 {
			t.Fatalf("fetch with epoch %d: %s", ep, code(got))
		}
		if p := listOffsets(ep); p.ErrorCode != 0 || p.LeaderEpoch != 4 {
			t.Fatalf("ListOffsets with epoch %d: %s, leader epoch %d, want 4", ep, code(p.ErrorCode), p.LeaderEpoch)
		}
	}
	// The leader's answer from its epoch index: epoch 2 lies between 1 and the term.
	if p := forEpoch(4, 2); p.ErrorCode != 0 || p.LeaderEpoch != 1 || p.EndOffset != 3 {
		t.Fatalf("OffsetForLeaderEpoch of epoch 2: %+v, want epoch 1 end offset 3", p)
	}
	if p := forEpoch(-1, 4); p.ErrorCode != 0 || p.LeaderEpoch != 4 || p.EndOffset != 5 {
		t.Fatalf("OffsetForLeaderEpoch of the current epoch 4: %+v, want epoch 4 end offset 5", p)
	}
	if p := forEpoch(-1, 5); p.ErrorCode != 0 || p.LeaderEpoch != -1 || p.EndOffset != -1 {
		t.Fatalf("OffsetForLeaderEpoch of epoch 5 (above the term): %+v, want UNDEFINED", p)
	}

	n.term.Store(6) // an election
	if got := fetch(4); got != 0 {
		t.Fatalf("fetch with epoch 4 before the gateway learned of term 6: %s, want none (not known yet)", code(got))
	}
	if got := metaEpoch(); got != 6 {
		t.Fatalf("Metadata leader epoch after the election %d, want 6", got)
	}
	for _, c := range []struct {
		epoch int32
		want  *kerr.Error
	}{{4, kerr.FencedLeaderEpoch}, {-5, kerr.FencedLeaderEpoch}, {9, kerr.UnknownLeaderEpoch}} {
		if got := fetch(c.epoch); got != c.want.Code {
			t.Fatalf("fetch with epoch %d: %s, want %s", c.epoch, code(got), c.want.Message)
		}
		if p := listOffsets(c.epoch); p.ErrorCode != c.want.Code {
			t.Fatalf("ListOffsets with epoch %d: %s, want %s", c.epoch, code(p.ErrorCode), c.want.Message)
		}
		if p := forEpoch(c.epoch, 4); p.ErrorCode != c.want.Code {
			t.Fatalf("OffsetForLeaderEpoch with current epoch %d: %s, want %s", c.epoch, code(p.ErrorCode), c.want.Message)
		}
	}
	n.term.Store(9) // a client that saw term 9 first: the gateway asks again
	if got := fetch(9); got != 0 {
		t.Fatalf("fetch with epoch 9 after term 9: %s", code(got))
	}
	n.term.Store(2) // the channel re-created: its new group's term is smaller
	if got := fetch(2); got != 0 {
		t.Fatalf("fetch with epoch 2 of the re-created channel: %s, want none (the term asked again)", code(got))
	}
	// A topic change (NATS) drops what was learned of that topic's partitions only.
	r, ch := asRouter(e.h.storage), channel.KafkaPartition("ep", 0)
	e.h.InvalidateTopic("other")
	if _, ok := r.epoch(ch); !ok {
		t.Fatal("another topic's change dropped the epoch of ep")
	}
	// A leader learned without an epoch (as a produce's NOT_LEADER answer teaches it)
	// goes too.
	bare := channel.KafkaPartition("ep", 7)
	if err := r.lc.Learn(bare, r.lc.Conns()[0].Target()); err != nil {
		t.Fatal(err)
	}
	e.h.InvalidateTopic("ep")
	if e, ok := r.epoch(ch); ok {
		t.Fatalf("epoch %d of ep kept after its topic changed", e)
	}
	if r.lc.Cached(bare) || r.lc.Cached(ch) {
		t.Fatal("a leader of ep's partitions kept after its topic changed")
	}
	if got := metaEpoch(); got != 2 {
		t.Fatalf("Metadata leader epoch after the change %d, want 2 (asked again)", got)
	}
}
