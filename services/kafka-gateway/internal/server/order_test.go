package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// slowFirstStorage delays the first AppendBatches call and records the order of calls.
type slowFirstStorage struct {
	*fake.Storage
	mu    sync.Mutex
	calls int
	order []int
}

func (s *slowFirstStorage) AppendBatches(ctx context.Context, req *storagev1.AppendBatchesRequest, opts ...grpc.CallOption) (*storagev1.AppendBatchesResponse, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.order = append(s.order, len(req.GetChannels()[0].GetBatches()))
	s.mu.Unlock()
	if n == 1 {
		time.Sleep(50 * time.Millisecond) // simulated slow fsync, not a readiness wait
	}
	return s.Storage.AppendBatches(ctx, req, opts...)
}

// AppendStream routes the stream's requests through AppendBatches above.
func (s *slowFirstStorage) AppendStream(ctx context.Context, _ ...grpc.CallOption) (storagev1.StorageService_AppendStreamClient, error) {
	return fake.NewAppendStream(ctx, s.AppendBatches), nil
}

// TestPipelinedProducesReachStorageInOrder: five produce requests sent back to back on
// one connection reach storage in request order even though the first one is slow.
func TestPipelinedProducesReachStorageInOrder(t *testing.T) {
	st := fake.NewStorage()
	slow := &slowFirstStorage{Storage: st}
	co := fake.NewCoordinator(st)
	s := startServer(t, func(c *Config) { c.Storage, c.Coordinator = slow, co })
	rc := dialRaw(t, s.addr)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 4
	tp := kmsg.NewCreateTopicsRequestTopic()
	tp.Topic, tp.NumPartitions, tp.ReplicationFactor = "order", 1, 1
	ct.Topics = append(ct.Topics, tp)
	rc.send(ct, 1)
	if _, _, err := rc.recv(false); err != nil {
		t.Fatal(err)
	}
	// Batches of different sizes identify the requests.
	for i := 0; i < 5; i++ {
		vals := make([]string, i+1)
		for j := range vals {
			vals[j] = "x"
		}
		req := kmsg.NewPtrProduceRequest()
		req.Version = 9
		req.Acks = -1
		req.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "order"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = fake.Batch(vals...)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		rc.send(req, int32(10+i))
	}
	var offsets []int64
	for i := 0; i < 5; i++ {
		corr, body, err := rc.recv(true)
		if err != nil || corr != int32(10+i) {
			t.Fatalf("response %d: corr %d err %v", i, corr, err)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("produce %d: error %d", i, p.ErrorCode)
		}
		offsets = append(offsets, p.BaseOffset)
	}
	// Request i carries i+1 records: base offsets 0, 1, 3, 6, 10 when in order.
	slow.mu.Lock()
	order := append([]int(nil), slow.order...)
	slow.mu.Unlock()
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("storage saw the requests out of order (batch sizes %v)", order)
		}
	}
	want := []int64{0, 1, 3, 6, 10}
	for i := range want {
		if offsets[i] != want[i] {
			t.Fatalf("base offsets %v, want %v (storage call order by batch size: %v)", offsets, want, slow.order)
		}
	}
}
