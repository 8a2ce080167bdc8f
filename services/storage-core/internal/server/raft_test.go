package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestRaftModeLeaderTrailer: three storage-core servers in raft mode (--node-id,
// --peers) on loopback. A call that writes on a node which does not lead answers
// FAILED_PRECONDITION with the leader's address in the trailers; the same call sent
// there succeeds. AppendBatches on a follower answers the per-channel NOT_LEADER with
// the leader's id and address. AppendBatches (an idempotent batch, then its retry) and a pipelined
// AppendStream work on the leader, and every node then serves every record and names
// the leader and its term in GetChannel. A transaction marker for a channel that does
// not exist is redirected by the metadata group's followers and answered
// UNKNOWN_TOPIC_OR_PARTITION by its leader.
func TestRaftModeLeaderTrailer(t *testing.T) {
	addrs := make([]string, 3)
	for i := range addrs {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = lis.Addr().String()
		_ = lis.Close()
	}
	peers := fmt.Sprintf("1=%s,2=%s,3=%s", addrs[0], addrs[1], addrs[2])
	clients := map[string]storagev1.StorageServiceClient{}
	for i, a := range addrs {
		srv, err := New(Config{GRPCAddr: a, HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), NodeID: uint64(i + 1), Peers: peers}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		cc, err := grpcx.Dial(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cc.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
		clients[a] = storagev1.NewStorageServiceClient(cc)
	}
	// call sends f to addr and follows one not-leader answer to the address it names.
	lastAddr := ""
	call := func(addr string, f func(c storagev1.StorageServiceClient, opt grpc.CallOption) error) error {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var tr metadata.MD
			lastAddr = addr
			err := f(clients[addr], grpc.Trailer(&tr))
			if status.Code(err) != codes.FailedPrecondition {
				return err
			}
			leader := tr.Get(grpcx.LeaderTrailer)
			if len(leader) != 1 {
				t.Fatalf("not-leader answer without the %s trailer: %v (trailer %v)", grpcx.LeaderTrailer, err, tr)
			}
			if leader[0] != "" {
				if _, ok := clients[leader[0]]; !ok {
					t.Fatalf("trailer names %q, not a peer", leader[0])
				}
				if leader[0] == addr {
					t.Fatalf("%s answers not-leader naming itself", addr)
				}
				addr = leader[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no leader within 10 s: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ctx := context.Background()
	followed := 0
	for _, a := range addrs {
		err := call(a, func(c storagev1.StorageServiceClient, opt grpc.CallOption) error {
			_, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.raft", IfNotExists: true}, opt)
			return err
		})
		if err != nil {
			t.Fatalf("create via %s: %v", a, err)
		}
	}
	// A marker for a channel a node does not hold is answered
	// UNKNOWN_TOPIC_OR_PARTITION only by the metadata group's leader, after it confirmed
	// the absence: a follower redirects there (it may merely lag behind a create).
	redirected := 0
	for _, a := range addrs {
		var res *storagev1.TxnMarkerResult
		err := call(a, func(c storagev1.StorageServiceClient, opt grpc.CallOption) error {
			r, err := c.WriteTxnMarkers(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{{Channel: "kafka.nosuch", ProducerId: 1, Commit: true}}}, opt)
			if status.Code(err) == codes.FailedPrecondition {
				redirected++
			}
			if err == nil && len(r.GetResults()) == 1 {
				res = r.GetResults()[0]
			}
			return err
		})
		if err != nil || res.GetErrorCode() != 3 {
			t.Fatalf("marker for an absent channel via %s: %v %v, want code 3", a, res, err)
		}
	}
	if redirected != 2 {
		t.Fatalf("%d absent-channel markers were redirected, want 2 (the metadata group's followers)", redirected)
	}
	// Several markers for absent channels (looked up together, one barrier): per-marker
	// UNKNOWN_TOPIC_OR_PARTITION on the metadata group's leader (the last node the
	// redirects reached), NOT_LEADER_OR_FOLLOWER on its followers.
	metaLeader := lastAddr
	two := &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{
		{Channel: "kafka.nosuch", ProducerId: 1, Commit: true}, {Channel: "kafka.nosuch2", ProducerId: 1}}}
	for _, a := range addrs {
		r, err := clients[a].WriteTxnMarkers(ctx, two)
		want := int32(6)
		if a == metaLeader {
			want = 3
		}
		if err != nil || len(r.GetResults()) != 2 || r.GetResults()[0].GetErrorCode() != want || r.GetResults()[1].GetErrorCode() != want {
			t.Fatalf("two absent-channel markers via %s: %v %v, want code %d each", a, r.GetResults(), err, want)
		}
	}
	leader := ""
	for _, a := range addrs {
		var seq int64
		err := call(a, func(c storagev1.StorageServiceClient, opt grpc.CallOption) error {
			var tr metadata.MD
			r, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.raft", Records: []*storagev1.AppendRecord{{Value: []byte("v-" + a)}}}, opt, grpc.Trailer(&tr))
			if status.Code(err) == codes.FailedPrecondition && tr.Get(grpcx.LeaderTrailer)[0] != "" {
				followed++
			}
			seq = r.GetFirstSequence()
			return err
		})
		if leader == "" {
			leader = lastAddr
		}
		if err != nil || seq == 0 {
			t.Fatalf("append via %s: seq %d, %v", a, seq, err)
		}
	}
	if followed != 2 {
		t.Fatalf("%d appends were redirected, want 2 (the followers)", followed)
	}
	// The Kafka path (AppendBatches, an idempotent producer's batch) on the leader;
	// on a follower the per-channel answer is NOT_LEADER naming the leader.
	for _, a := range addrs {
		r, err := clients[a].AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "kafka.raft", Batches: kafkaBatch(t, 5, 0, 0, "v-batch"), SingleBatch: true}}})
		if err != nil {
			t.Fatal(err)
		}
		res := r.GetResults()[0]
		if a == leader {
			if res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED || res.GetFirstSequence() != 4 {
				t.Fatalf("AppendBatches on the leader: %v", res)
			}
		} else if res.GetError() != storagev1.ErrorCode_ERROR_CODE_NOT_LEADER || res.GetLeaderAddress() != leader || addrs[res.GetLeaderId()-1] != leader {
			t.Fatalf("AppendBatches on follower %s: %v (leader %s)", a, res, leader)
		}
	}
	r, err := clients[leader].AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "kafka.raft", Batches: kafkaBatch(t, 5, 0, 0, "v-batch"), SingleBatch: true}}})
	if err != nil || r.GetResults()[0].GetFirstSequence() != 4 {
		t.Fatalf("idempotent retry on the leader: %v %v", r, err)
	}
	// AppendStream (kafka-gateway's path), pipelined: 20 requests in flight on the
	// leader get consecutive sequences in request order.
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := clients[leader].AppendStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := st.Send(&storagev1.AppendStreamRequest{Id: uint64(i), Channels: []*storagev1.ChannelBatches{{Channel: "kafka.raft", Batches: kafkaBatch(t, 6, 0, int32(i), "v-stream"), SingleBatch: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	answered := map[uint64]bool{}
	for i := 0; i < 20; i++ {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		// Responses may arrive out of order; offsets follow the request order.
		id, res := resp.GetId(), resp.GetResults()[0]
		if id >= 20 || answered[id] || res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED || res.GetFirstSequence() != int64(5+id) {
			t.Fatalf("stream response %d: id %d %v", i, id, res)
		}
		answered[id] = true
	}
	_ = st.CloseSend()
	for _, a := range addrs {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := clients[a].Read(ctx, &storagev1.ReadRequest{Channel: "kafka.raft", FromSequence: 1, MaxRecords: 100})
			if err == nil && len(r.GetRecords()) == 24 {
				for i, rec := range r.GetRecords() {
					if !strings.HasPrefix(string(rec.GetValue()), "v-") || rec.GetSequence() != int64(i+1) {
						t.Fatalf("node %s record %d: %v", a, i, rec)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: %v %v", a, r, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Every node has applied entries of the leader's term: it names the leader.
		g, err := clients[a].GetChannel(ctx, &storagev1.GetChannelRequest{Name: "kafka.raft"})
		if ch := g.GetChannel(); err != nil || ch.GetLeaderAddress() != leader || addrs[ch.GetLeaderId()-1] != leader || ch.GetLeaderTerm() < 2 {
			t.Fatalf("GetChannel on %s: %v %v (leader %s)", a, ch, err, leader)
		}
	}
}
