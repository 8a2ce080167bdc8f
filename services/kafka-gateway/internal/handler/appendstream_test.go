package handler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// breakableStorage hands out fake append streams it can break, and can hold an append
// inside the stream (as if storage-core were slow to write it).
type breakableStorage struct {
	*fake.Storage
	mu      sync.Mutex
	streams []*fake.AppendStreamClient
	hold    chan struct{} // when set, the next append blocks until it is closed
	entered chan struct{} // closed when a held append has started
}

func (s *breakableStorage) AppendStream(ctx context.Context, _ ...grpc.CallOption) (storagev1.StorageService_AppendStreamClient, error) {
	c := fake.NewAppendStream(ctx, func(ctx context.Context, req *storagev1.AppendBatchesRequest, opts ...grpc.CallOption) (*storagev1.AppendBatchesResponse, error) {
		s.mu.Lock()
		hold, entered := s.hold, s.entered
		s.hold = nil
		s.mu.Unlock()
		if hold != nil {
			close(entered)
			<-hold
		}
		return s.Storage.AppendBatches(ctx, req, opts...)
	})
	s.mu.Lock()
	s.streams = append(s.streams, c)
	s.mu.Unlock()
	return c, nil
}

func (s *breakableStorage) opened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// TestAppendStreamBreakAndReopen: produces of one connection share one stream; when it
// breaks, the request waiting on it gets a retriable NOT_LEADER_OR_FOLLOWER and the
// next produce opens a new stream and succeeds.
func TestAppendStreamBreakAndReopen(t *testing.T) {
	st := fake.NewStorage()
	bs := &breakableStorage{Storage: st}
	h := New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1},
		Deps{Storage: bs, Coordinator: fake.NewCoordinator(st), Brokers: func() []Broker { return nil }, Log: zaptest.NewLogger(t)})
	connCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var chain TurnChain
	produce := func(v string) kmsg.ProduceResponseTopicPartition {
		req := produceReq("s", 0, fake.Batch(v))
		req.SetVersion(9)
		r := &Request{Body: req, Turn: chain.Next()}
		resp, err := h.Handle(connCtx, r)
		r.Turn.Finish()
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	for i := range 3 {
		if p := produce("a"); p.ErrorCode != 0 || p.BaseOffset != int64(i) {
			t.Fatalf("produce %d: %+v", i, p)
		}
	}
	if n := bs.opened(); n != 1 {
		t.Fatalf("%d streams opened for one connection, want 1", n)
	}

	// A request in flight when the stream breaks fails with a retriable code.
	hold, entered := make(chan struct{}), make(chan struct{})
	bs.mu.Lock()
	bs.hold, bs.entered = hold, entered
	bs.mu.Unlock()
	got := make(chan kmsg.ProduceResponseTopicPartition, 1)
	go func() { got <- produce("b") }()
	<-entered
	bs.mu.Lock()
	first := bs.streams[0]
	bs.mu.Unlock()
	first.Break(status.Error(codes.Unavailable, "storage-core restarted"))
	deadline := time.Now().Add(10 * time.Second)
	for !chain.stream.cur.broken() {
		if time.Now().After(deadline) {
			t.Fatal("stream not marked broken")
		}
		time.Sleep(time.Millisecond)
	}
	close(hold)
	if p := <-got; p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("in-flight produce on a broken stream: code %d, want NOT_LEADER_OR_FOLLOWER", p.ErrorCode)
	}
	// The next produce opens a new stream. The held append was written (its answer was
	// lost with the stream), so this one lands after it.
	if p := produce("c"); p.ErrorCode != 0 || p.BaseOffset != 4 {
		t.Fatalf("produce after the break: %+v", p)
	}
	if n := bs.opened(); n != 2 {
		t.Fatalf("%d streams opened, want 2", n)
	}
}
