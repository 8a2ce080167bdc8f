package grpcx

import (
	"bytes"
	"runtime"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestBufferPoolTiers(t *testing.T) {
	for _, size := range []int{0, 1, 256, 257, 4096, 16384, 16385, 1 << 20, 1<<20 + 1, 1 << 26} {
		bp := BufferPool.Get(size)
		if len(*bp) != size {
			t.Fatalf("Get(%d): len %d", size, len(*bp))
		}
		if c := cap(*bp); c < size || c > max(2*size, 256) {
			t.Fatalf("Get(%d): cap %d", size, c)
		}
		BufferPool.Put(bp)
	}
	// Above the largest tier: allocated, not pooled.
	bp := BufferPool.Get(1<<26 + 1)
	if len(*bp) != 1<<26+1 {
		t.Fatal("big Get")
	}
	BufferPool.Put(bp)
	// A foreign buffer (capacity not a tier) is dropped, not pooled.
	b := make([]byte, 300)
	BufferPool.Put(&b)
	if got := BufferPool.Get(300); cap(*got) != 512 {
		t.Fatalf("Get(300) after a foreign Put: cap %d", cap(*got))
	}
}

// TestBufferPoolKeepsLargeBuffers: a large buffer put back is handed out again after
// garbage collections (which empty a sync.Pool), and the keep lists never hold more
// than keepBudget bytes.
func TestBufferPoolKeepsLargeBuffers(t *testing.T) {
	p := newBufferPool()
	bp := p.Get(3 << 20)
	first := &(*bp)[0]
	p.Put(bp)
	runtime.GC()
	runtime.GC()
	runtime.GC()
	if again := p.Get(3 << 20); &(*again)[0] != first {
		t.Fatal("a 3 MiB buffer put back was not handed out again after garbage collections")
	}
	var held []*[]byte
	for range 2 * keepBudget / (1 << 20) {
		held = append(held, p.Get(1<<20))
	}
	for _, bp := range held {
		p.Put(bp)
	}
	if k := p.kept.Load(); k > keepBudget || k < keepBudget/2 {
		t.Fatalf("keep lists hold %d bytes after %d MiB were put back, want at most the budget %d and most of it", k, len(held), keepBudget)
	}
	// Small buffers are only in the sync.Pool.
	p.Put(p.Get(1 << 10))
	if k := p.kept.Load(); k > keepBudget {
		t.Fatalf("keep lists hold %d bytes", k)
	}
}

type wrapped struct{ m *wrapperspb.BytesValue }

func (w wrapped) MarshalBuffers(mem.BufferPool) (mem.BufferSlice, error) {
	b, err := proto.Marshal(w.m)
	if len(b) < 2 {
		return mem.BufferSlice{mem.SliceBuffer(b)}, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b[:1]), mem.SliceBuffer(b[1:])}, err
}

func (w wrapped) UnmarshalBuffers(data mem.BufferSlice, _ mem.BufferPool) error {
	return proto.Unmarshal(data.Materialize(), w.m)
}

func TestCodecRoundTrip(t *testing.T) {
	for _, n := range []int{0, 10, 5000, 3 << 20} {
		in := wrapperspb.Bytes(bytes.Repeat([]byte{'x'}, n))
		data, err := Codec.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(in)
		if !bytes.Equal(data.Materialize(), want) {
			t.Fatalf("%d bytes: marshalled differently from proto.Marshal", n)
		}
		out := &wrapperspb.BytesValue{}
		if err := Codec.Unmarshal(data, out); err != nil || !proto.Equal(in, out) {
			t.Fatalf("%d bytes: round trip: %v", n, err)
		}
		data.Free()

		// Self-encoding and self-decoding messages are handed the work.
		wd, err := Codec.Marshal(wrapped{in})
		if err != nil || !bytes.Equal(wd.Materialize(), want) || len(want) > 1 && len(wd) != 2 {
			t.Fatalf("%d bytes: BufferMarshaler not used: %v", n, err)
		}
		w := wrapped{&wrapperspb.BytesValue{}}
		if err := Codec.Unmarshal(wd, w); err != nil || !proto.Equal(in, w.m) {
			t.Fatalf("%d bytes: BufferUnmarshaler: %v", n, err)
		}
	}
	if _, err := Codec.Marshal(42); err == nil {
		t.Error("marshalled a non-message")
	}
	if err := Codec.Unmarshal(nil, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("empty message: %v", err)
	}
}
