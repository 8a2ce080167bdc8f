package handler

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// wireConn answers Fetch as the gRPC transport does for storageClient: the fake
// storage's answer marshalled and handed to the reply's UnmarshalBuffers (so batches
// land in pooled buffers); other methods are not used.
type wireConn struct {
	grpc.ClientConnInterface
	st storagev1.StorageServiceClient
}

func (c wireConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	out, err := c.st.Fetch(ctx, args.(*storagev1.FetchRequest))
	if err != nil {
		return err
	}
	b, err := proto.Marshal(out)
	if err != nil {
		return err
	}
	return reply.(grpcx.BufferUnmarshaler).UnmarshalBuffers(mem.BufferSlice{mem.SliceBuffer(b)}, nil)
}

// TestFetchPooledBuffersOutliveRelease: Fetch answers served from pooled buffers
// (directly and through fetch-ahead) keep their bytes until Request.Release, however
// many fetches, read-aheads and expiries come meanwhile: a buffer going back to the
// pool early would be overwritten by the next answers.
func TestFetchPooledBuffersOutliveRelease(t *testing.T) {
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	brokers := []Broker{{NodeID: 1, Host: "127.0.0.1", Port: 9092}}
	h := New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1},
		Deps{Storage: storageClient{StorageServiceClient: st, cc: wireConn{st: st}}, Coordinator: co, Brokers: func() []Broker { return brokers }, Log: zaptest.NewLogger(t)})
	e := &env{h: h, st: st, co: co}
	if tp := e.createTopic(t, "pool", 1, nil); tp.ErrorCode != 0 {
		t.Fatalf("create: %d", tp.ErrorCode)
	}
	const n = 8
	for i := range n {
		if p := e.produce(t, "pool", 0, fake.Batch("a", "b")); p.ErrorCode != 0 || p.BaseOffset != int64(2*i) {
			t.Fatalf("produce %d: %+v", i, p)
		}
	}
	type kept struct {
		r    *Request
		off  int64
		copy []byte
		view []byte
	}
	var held []kept
	for round := range 2 {
		for off := int64(0); off < 2*n; off += 2 {
			req := fetchReq("pool", [16]byte{}, 0, off)
			req.Topics[0].Partitions[0].PartitionMaxBytes = 1 // one batch per fetch
			req.SetVersion(12)
			r := &Request{Body: req}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := h.Handle(ctx, r)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
			if p.ErrorCode != 0 || len(p.RecordBatches) < 61 || int64(binary.BigEndian.Uint64(p.RecordBatches)) != off {
				t.Fatalf("round %d fetch %d: code %d, %d bytes", round, off, p.ErrorCode, len(p.RecordBatches))
			}
			held = append(held, kept{r, off, bytes.Clone(p.RecordBatches), p.RecordBatches})
			if round == 1 {
				time.Sleep(fetchAheadTTL / 4) // some read-aheads expire untaken
			}
		}
	}
	for _, k := range held {
		if !bytes.Equal(k.view, k.copy) {
			t.Fatalf("the answer at %d changed before its release", k.off)
		}
	}
	for _, k := range held {
		k.r.Release()
	}
	h.ahead.clear()
}
