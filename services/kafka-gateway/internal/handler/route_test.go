package handler

import (
	"context"
	"net"
	"sync"
	"testing"

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
		if !n.leads[c.GetChannel()] {
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
	return &storagev1.LookupSequenceResponse{Sequence: 7}, nil
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
// NOT_LEADER (retriable) and a Fetch of a is read from another node.
func TestRouterFollowsLeaders(t *testing.T) {
	nodes, srvs := startRouteNodes(t, 3)
	for _, n := range nodes {
		n.leader = nodes[1].addr
	}
	nodes[1].leads["a"] = true
	nodes[0].leads["b"] = true
	nodes[0].leader = nodes[1].addr // for a; b is node 1's own
	lc, err := grpcx.NewLeaderConn([]string{nodes[0].addr, nodes[1].addr, nodes[2].addr}, RouterRetry)
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

	srvs[1].Stop()
	out, err := r.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "a"}}})
	if err != nil || out.GetResults()[0].GetError() != storagev1.ErrorCode_ERROR_CODE_NOT_LEADER {
		t.Fatalf("append of a with its leader down: %v %v, want NOT_LEADER", out, err)
	}
	f, err := r.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "a"}, {Channel: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range f.GetResults() {
		if res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED || string(res.GetBatches()) == nodes[1].addr || res.GetHighWatermark() != 3 {
			t.Fatalf("fetch result %d: %v", i, res)
		}
	}
}
