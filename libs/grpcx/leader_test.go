package grpcx

import (
	"context"
	"net"
	"sync"
	"testing"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// leaderNode stands in for a raft-mode storage-core node: creates are refused with
// the metadata leader's trailer unless it is that leader; appends of a channel likewise
// with the channel's leader.
type leaderNode struct {
	storagev1.UnimplementedStorageServiceServer
	addr       string
	metaLeader string
	chLeader   string
	mu         sync.Mutex
	creates    int
	appends    int
}

func (n *leaderNode) refuse(ctx context.Context, leader string) error {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, leader, LeaderIDTrailer, "9"))
	return status.Error(codes.FailedPrecondition, "not the leader")
}

func (n *leaderNode) CreateChannel(ctx context.Context, in *storagev1.CreateChannelRequest) (*storagev1.CreateChannelResponse, error) {
	if n.metaLeader != n.addr {
		return nil, n.refuse(ctx, n.metaLeader)
	}
	n.mu.Lock()
	n.creates++
	n.mu.Unlock()
	return &storagev1.CreateChannelResponse{Channel: &storagev1.Channel{Name: in.GetName()}, Created: true}, nil
}

func (n *leaderNode) Append(ctx context.Context, in *storagev1.AppendRequest) (*storagev1.AppendResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chLeader != n.addr {
		return nil, n.refuse(ctx, n.chLeader)
	}
	n.appends++
	return &storagev1.AppendResponse{FirstSequence: 1}, nil
}

func (n *leaderNode) GetChannel(_ context.Context, in *storagev1.GetChannelRequest) (*storagev1.GetChannelResponse, error) {
	return &storagev1.GetChannelResponse{Channel: &storagev1.Channel{Name: in.GetName(), LeaderAddress: n.addr}}, nil
}

// TestLeaderConnFollowsLeaders: three nodes, node 3 leads the metadata group and node
// 2 the channel. CreateChannel through a LeaderConn (default node 1) reaches node 3
// and Append reaches node 2, each following one trailer, then straight from the cache.
// With node 1 stopped a read (GetChannel, allowed by retry) is resent to node 2 and
// succeeds; a write to a stopped node fails UNAVAILABLE once and is not resent.
func TestLeaderConnFollowsLeaders(t *testing.T) {
	nodes := make([]*leaderNode, 3)
	srvs := make([]*grpc.Server, 3)
	addrs := make([]string, 3)
	for i := range nodes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = lis.Addr().String()
		nodes[i] = &leaderNode{addr: addrs[i]}
		srvs[i] = grpc.NewServer()
		storagev1.RegisterStorageServiceServer(srvs[i], nodes[i])
		go func() { _ = srvs[i].Serve(lis) }()
		defer srvs[i].Stop()
	}
	for _, n := range nodes {
		n.metaLeader, n.chLeader = addrs[2], addrs[1]
	}
	lc, err := NewLeaderConn(addrs, func(m string) bool { return m == storagev1.StorageService_GetChannel_FullMethodName })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c := storagev1.NewStorageServiceClient(lc)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "ch"}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "ch"}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if nodes[2].creates != 2 || nodes[1].appends != 2 {
		t.Fatalf("metadata leader got %d creates, channel leader %d appends; want 2 each", nodes[2].creates, nodes[1].appends)
	}
	srvs[0].Stop()
	g, err := c.GetChannel(ctx, &storagev1.GetChannelRequest{Name: "other"})
	if err != nil || g.GetChannel().GetLeaderAddress() != addrs[1] {
		t.Fatalf("read with the default node down: %v %v, want node 2's answer", g, err)
	}
	srvs[1].Stop()
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "ch"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("append with its leader down: %v, want UNAVAILABLE (not resent)", err)
	}
	nodes[2].mu.Lock()
	nodes[2].chLeader = addrs[2]
	nodes[2].mu.Unlock()
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "ch"}); err != nil || nodes[2].appends != 1 {
		t.Fatalf("append after the leader moved to node 3: %v (node 3 appends %d)", err, nodes[2].appends)
	}
}
