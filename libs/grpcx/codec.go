package grpcx

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The internal bus moves MiB-sized messages (Kafka produce batches, fetch results). With
// gRPC's defaults every received HTTP/2 frame and every marshalled or reassembled
// message gets a buffer that its pool zeroes first, and the proto codec copies each
// bytes field once more into or out of the message buffer. Profiles of a 1 KiB-record
// produce run put about a third of storage-core's and kafka-gateway's CPU in those
// clears and copies. The pool and codec here remove the clears for every message, and
// let a message type opt into encoding its large bytes fields by reference
// (BufferMarshaler) or decoding them as views of one received buffer
// (BufferUnmarshaler).

// bufferPool is a tiered pool of power-of-two buffers that, unlike gRPC's default
// pool, does not zero a buffer before handing it out. That is safe for gRPC's uses:
// the transport reads a whole frame into the buffer, the codec marshals or copies a
// whole message into it, so every byte is written before it is read.
//
// Buffers of keepMinShift and up are first kept on their tier's free list (keep), up
// to keepBudget bytes over all tiers, which garbage collection does not empty: a
// sync.Pool drops what it holds within two collections, and a process moving MiB-sized
// messages with a small live heap collects often, so its 1-4 MiB buffers were mostly
// allocated afresh (and zeroed, and their pages faulted in): 13% of pubsub-gateway's
// CPU under StreamingPull went to that.
type bufferPool struct {
	tiers [poolTiers]sync.Pool
	keep  [poolTiers]chan *[]byte
	kept  atomic.Int64 // bytes on the keep lists
}

const (
	poolMinShift = 8  // 256 B: smaller buffers are not pooled by gRPC anyway
	poolMaxShift = 26 // 64 MiB: larger ones are allocated and dropped
	poolTiers    = poolMaxShift - poolMinShift + 1
	keepMinShift = 16       // 64 KiB
	keepBudget   = 64 << 20 // bytes the keep lists may hold
)

func newBufferPool() *bufferPool {
	p := &bufferPool{}
	for t := keepMinShift - poolMinShift; t < poolTiers; t++ {
		if n := keepBudget >> (t + poolMinShift); n >= 4 { // up to 16 MiB buffers
			p.keep[t] = make(chan *[]byte, n)
		}
	}
	return p
}

// BufferPool is the pool the internal bus uses for transport and codec buffers
// (see ServerOptions and DialOptions).
var BufferPool mem.BufferPool = newBufferPool()

// tier returns the index of the smallest tier holding size bytes, or -1 when size
// is above the largest tier.
func tier(size int) int {
	if size <= 1<<poolMinShift {
		return 0
	}
	t := bits.Len(uint(size-1)) - poolMinShift
	if t >= poolTiers {
		return -1
	}
	return t
}

func (p *bufferPool) Get(size int) *[]byte {
	t := tier(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if keep := p.keep[t]; keep != nil {
		select {
		case bp := <-keep:
			p.kept.Add(-int64(cap(*bp)))
			*bp = (*bp)[:size]
			return bp
		default:
		}
	}
	if bp, ok := p.tiers[t].Get().(*[]byte); ok {
		*bp = (*bp)[:size]
		return bp
	}
	b := make([]byte, size, 1<<(t+poolMinShift))
	return &b
}

func (p *bufferPool) Put(bp *[]byte) {
	c := cap(*bp)
	t := tier(c)
	if t < 0 || c != 1<<(t+poolMinShift) {
		return // not one of ours (or above the largest tier): let the GC have it
	}
	if keep := p.keep[t]; keep != nil {
		if p.kept.Add(int64(c)) <= keepBudget {
			select {
			case keep <- bp:
				return
			default:
			}
		}
		p.kept.Add(-int64(c))
	}
	p.tiers[t].Put(bp)
}

// BufferMarshaler is implemented by messages that encode themselves as a BufferSlice,
// for example to send large bytes fields by reference instead of copying them into
// the marshalled message. The returned slice may alias the message's memory: the
// caller must not modify the message after SendMsg (gRPC's rule for every message:
// the transport writes the buffers after SendMsg returns).
type BufferMarshaler interface {
	MarshalBuffers(pool mem.BufferPool) (mem.BufferSlice, error)
}

// BufferUnmarshaler is implemented by messages that decode themselves from the
// received bytes (data, in several buffers), for example to keep large bytes fields as
// views of one buffer from pool that the message then owns and returns to pool when
// done, instead of copying them out of it. data is valid only during the call.
type BufferUnmarshaler interface {
	UnmarshalBuffers(data mem.BufferSlice, pool mem.BufferPool) error
}

// codec is gRPC's proto codec (same wire format and name, so peers and tools see no
// difference) using BufferPool for its buffers and honouring BufferMarshaler and
// BufferUnmarshaler.
type codec struct{}

// Codec is the internal bus codec; ServerOptions and DialOptions install it.
var Codec encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(BufferMarshaler); ok {
		return m.MarshalBuffers(BufferPool)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcx codec: cannot marshal %T: not a proto message", v)
	}
	size := proto.Size(m) // caches the sizes MarshalAppend uses
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	bp := BufferPool.Get(size)
	b, err := opts.MarshalAppend((*bp)[:0], m)
	if err != nil {
		BufferPool.Put(bp)
		return nil, err
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, BufferPool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(BufferUnmarshaler); ok {
		return m.UnmarshalBuffers(data, BufferPool)
	}
	buf := data.MaterializeToBuffer(BufferPool)
	defer buf.Free()
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("grpcx codec: cannot unmarshal into %T: not a proto message", v)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// bufferOptions are the server options that put BufferPool and Codec on a server.
func bufferOptions() []grpc.ServerOption {
	return []grpc.ServerOption{experimental.BufferPool(BufferPool), grpc.ForceServerCodecV2(Codec)}
}

// bufferDialOptions are the dial options that put BufferPool and Codec on a client
// connection.
func bufferDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		experimental.WithBufferPool(BufferPool),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec)),
	}
}
