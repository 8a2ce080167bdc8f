package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
)

// Fetch answers are mostly stored batches. Read plainly, each batch is read from the
// segment into a zeroed buffer and then copied into the marshalled message; profiles of
// a consume run put a quarter of storage-core's CPU in that clear and copy. Here a
// Fetch served over gRPC reads into buffers from grpcx.BufferPool (not zeroed) and its
// answer is marshalled with the batches by reference: the transport writes them from
// those buffers and returns them to the pool when written.

// fetchBuffers hands out the read buffers of one Fetch call and remembers them, so the
// answer can pass them to the transport and the rest (reads of long-poll rounds that
// were not answered) can go back to the pool.
type fetchBuffers struct {
	bufs []*[]byte
}

type fetchBuffersKey struct{}

// readAlloc returns the allocator for Log.ReadRawTo of the Fetch call ctx belongs to,
// or nil (plain make) outside a gRPC Fetch.
func readAlloc(ctx context.Context) func(int) []byte {
	fb, _ := ctx.Value(fetchBuffersKey{}).(*fetchBuffers)
	if fb == nil {
		return nil
	}
	return func(n int) []byte {
		bp := grpcx.BufferPool.Get(n)
		fb.bufs = append(fb.bufs, bp)
		return *bp
	}
}

// take returns the buffer b is a prefix of, trimmed to len(b), and forgets it; nil when
// b is not from one of the call's buffers.
func (fb *fetchBuffers) take(b []byte) *[]byte {
	if len(b) == 0 {
		return nil
	}
	for i, bp := range fb.bufs {
		if bp != nil && cap(*bp) > 0 && &(*bp)[:1][0] == &b[0] {
			fb.bufs[i] = nil
			*bp = (*bp)[:len(b)]
			return bp
		}
	}
	return nil
}

// release returns every buffer not taken to the pool.
func (fb *fetchBuffers) release() {
	for i, bp := range fb.bufs {
		if bp != nil {
			grpcx.BufferPool.Put(bp)
			fb.bufs[i] = nil
		}
	}
}

// fetchByReference is the unary interceptor that serves StorageService.Fetch with
// pooled read buffers and answers with a fetchWire; other methods pass through.
func fetchByReference(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod != storagev1.StorageService_Fetch_FullMethodName {
		return handler(ctx, req)
	}
	fb := &fetchBuffers{}
	resp, err := handler(context.WithValue(ctx, fetchBuffersKey{}, fb), req)
	m, ok := resp.(*storagev1.FetchResponse)
	if err != nil || !ok {
		fb.release()
		return resp, err
	}
	return fetchWire{m: m, fb: fb}, nil
}

// fetchWire marshals a FetchResponse as proto.Marshal would, with each result's
// batches by reference (pooled buffers handed to the transport, which frees them once
// written; others as plain slices).
type fetchWire struct {
	m  *storagev1.FetchResponse
	fb *fetchBuffers
}

// MarshalBuffers implements grpcx.BufferMarshaler: storagewire.FetchResponseBuffers,
// each result's batches in the pooled buffer they were read into when there is one.
func (w fetchWire) MarshalBuffers(mem.BufferPool) (mem.BufferSlice, error) {
	defer w.fb.release()
	return storagewire.FetchResponseBuffers(w.m, func(batches []byte) mem.Buffer {
		if bp := w.fb.take(batches); bp != nil {
			return mem.NewBuffer(bp, grpcx.BufferPool)
		}
		return nil
	})
}
