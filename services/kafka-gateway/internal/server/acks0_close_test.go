package server

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// heldStorage holds every append until release is closed, failing it with the
// context's error should its context end first (as a cancelled gRPC call is never
// applied). entered receives once per append that started.
type heldStorage struct {
	*fake.Storage
	entered chan struct{}
	release chan struct{}
}

func (s *heldStorage) AppendBatches(ctx context.Context, req *storagev1.AppendBatchesRequest, opts ...grpc.CallOption) (*storagev1.AppendBatchesResponse, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Storage.AppendBatches(ctx, req, opts...)
}

// AppendStream routes the stream's requests through AppendBatches above.
func (s *heldStorage) AppendStream(ctx context.Context, _ ...grpc.CallOption) (storagev1.StorageService_AppendStreamClient, error) {
	return fake.NewAppendStream(ctx, s.AppendBatches), nil
}

// TestAcksZeroProduceStoredAfterClientCloses: an acks=0 producer writes its request
// and closes the connection at once (kcat -X acks=0 exits so). Kafka's broker still
// appends a request it has read; so must the gateway, though the connection ended
// while the append waited for storage.
func TestAcksZeroProduceStoredAfterClientCloses(t *testing.T) {
	st := fake.NewStorage()
	held := &heldStorage{Storage: st, entered: make(chan struct{}, 1), release: make(chan struct{})}
	co := fake.NewCoordinator(st)
	s := startServer(t, func(c *Config) { c.Storage, c.Coordinator = held, co })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := dialRaw(t, s.addr)
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = 0
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "fire"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = fake.Batch("a", "b")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	rc.send(req, 1)
	select {
	case <-held.entered:
	case <-ctx.Done():
		t.Fatal("the produce never reached storage")
	}
	_ = rc.c.Close()
	// Give the gateway time to see the end of the connection (and, before the fix, to
	// cancel the append) before storage answers.
	time.Sleep(300 * time.Millisecond)
	close(held.release)
	ch := channel.KafkaPartition("fire", 0)
	for st.HighWatermark(ch) != 2 {
		if ctx.Err() != nil {
			t.Fatalf("high watermark %d, want 2: the records of a produce read in full were dropped when its connection closed", st.HighWatermark(ch))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
