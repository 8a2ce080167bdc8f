package raftnode

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Buffer pool of the raft streams. gRPC's default pool has tiers of 256 B, 4, 16 and
// 32 KiB and 1 MiB and zeroes a buffer's whole capacity on every Get, so each raft
// message above 32 KiB (a MsgApp carrying a produce request) cleared a fresh 1 MiB
// buffer on each side, which dominated the replication's CPU. This pool has a tier at
// every power of two from 4 KiB to 8 MiB and does not zero: gRPC writes every buffer it
// gets (a read from the socket, a marshal, a copy) before it reads it, as its own
// transport read pool assumes.
const (
	poolMinShift = 12
	poolMaxShift = 23
)

type bufferPool struct {
	tiers [poolMaxShift - poolMinShift + 1]sync.Pool
}

var raftBufferPool = &bufferPool{}

// tier is the index of the smallest tier holding n bytes, -1 above the largest.
func tier(n int) int {
	if n <= 1<<poolMinShift {
		return 0
	}
	s := bits.Len(uint(n - 1))
	if s > poolMaxShift {
		return -1
	}
	return s - poolMinShift
}

func (p *bufferPool) Get(n int) *[]byte {
	t := tier(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+poolMinShift))
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	t := tier(c)
	if t < 0 || c != 1<<(t+poolMinShift) {
		return // not one of the pool's
	}
	*b = (*b)[:0]
	p.tiers[t].Put(b)
}

var _ mem.BufferPool = (*bufferPool)(nil)

// ServerOptions are the options of a node's gRPC server in raft mode (it serves the
// raft streams): the raft streams' buffer pool.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{experimental.BufferPool(raftBufferPool)}
}

// dialOptions are the transport's dial options to its peers beyond security.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{experimental.WithBufferPool(raftBufferPool)}
}
