package handler

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
)

// NewStorageClient returns the storage-core client for cc (a connection with
// grpcx.Codec) whose Fetch decodes answers by reference (fetchReply); every other
// method is the generated client's.
func NewStorageClient(cc grpc.ClientConnInterface) storagev1.StorageServiceClient {
	return storageClient{StorageServiceClient: storagev1.NewStorageServiceClient(cc), cc: cc}
}

type storageClient struct {
	storagev1.StorageServiceClient
	cc grpc.ClientConnInterface
}

// Fetch is StorageService.Fetch answered into a fetchReply. Errors: as the generated
// client (a gRPC status or context error). The batches' buffer is left to the garbage
// collector; handleFetch uses fetchOwned instead.
func (c storageClient) Fetch(ctx context.Context, in *storagev1.FetchRequest, opts ...grpc.CallOption) (*storagev1.FetchResponse, error) {
	out, _, err := c.fetchOwned(ctx, in, opts...)
	return out, err
}

// fetchOwned is Fetch also returning the pooled buffer the answer's batches view (nil
// when they view none), which the caller releases once nothing reads them any more.
func (c storageClient) fetchOwned(ctx context.Context, in *storagev1.FetchRequest, opts ...grpc.CallOption) (*storagev1.FetchResponse, *fetchBuf, error) {
	r := &fetchReply{}
	if err := c.cc.Invoke(ctx, storagev1.StorageService_Fetch_FullMethodName, in, r, opts...); err != nil {
		r.buf.release()
		return nil, nil, err
	}
	return &r.resp, r.buf, nil
}

// fetchOwned calls storage's Fetch; with the gateway's storageClient the answer's
// batches are views of the returned buffer (see storageClient.fetchOwned; a Router's
// when every channel is on one node), with any other client (tests) the buffer is nil.
func fetchOwned(ctx context.Context, storage storagev1.StorageServiceClient, in *storagev1.FetchRequest) (*storagev1.FetchResponse, *fetchBuf, error) {
	switch c := storage.(type) {
	case storageClient:
		return c.fetchOwned(ctx, in)
	case *Router:
		return c.fetchOwned(ctx, in)
	}
	out, err := storage.Fetch(ctx, in)
	return out, nil, err
}

// fetchBuf is a buffer from grpcx.BufferPool that Fetch answers' batches view. It goes
// back to the pool when its last holder releases it: the Kafka response once written
// (Request.Release), fetch-ahead entries when dropped. A holder that never releases
// only leaves the buffer to the garbage collector.
type fetchBuf struct {
	bp   *[]byte
	refs atomic.Int32
}

// release drops a holder; b may be nil.
func (b *fetchBuf) release() {
	if b != nil && b.refs.Add(-1) == 0 {
		grpcx.BufferPool.Put(b.bp)
	}
}

// fetchReply is a FetchResponse received through grpcx.Codec with each result's
// Batches a view of one buffer: the message is copied once out of the transport's
// frames, instead of a second time by proto.Unmarshal, which on a consume run was a
// fifth of the gateway's CPU. The buffer comes from grpcx.BufferPool (warm pages: a
// fresh MiB buffer per answer, faulted in by the copy, was a third of the gateway's
// CPU on a 1-partition consume) and is returned through buf.
type fetchReply struct {
	resp storagev1.FetchResponse
	buf  *fetchBuf // one holder: the caller of Invoke; nil when nothing views it
}

// UnmarshalBuffers implements grpcx.BufferUnmarshaler: storagewire.DecodeFetchResponse
// for the fields FetchChannelResult has; anything else (unknown fields, wrong wire
// types, bad UTF-8) is left to proto.Unmarshal, which reports the errors it always
// reports (and copies what it keeps, so the buffer goes back at once).
func (f *fetchReply) UnmarshalBuffers(data mem.BufferSlice, _ mem.BufferPool) (err error) {
	f.buf, err = unmarshalPooled(data, &f.resp, storagewire.DecodeFetchResponse)
	return err
}

// unmarshalPooled copies data into a grpcx.BufferPool buffer and decodes it into m
// with decode, whose views of the buffer stay valid while the returned fetchBuf (one
// holder) is held. When decode declines (unknown fields, wrong wire types, bad UTF-8)
// m is reset and left to proto.Unmarshal, which copies what it keeps: the buffer goes
// back at once and the fetchBuf is nil. Errors: proto.Unmarshal's.
func unmarshalPooled[M proto.Message](data mem.BufferSlice, m M, decode func([]byte, M) bool) (*fetchBuf, error) {
	bp := grpcx.BufferPool.Get(data.Len())
	b := (*bp)[:data.CopyTo(*bp)]
	if !decode(b, m) {
		proto.Reset(m)
		err := proto.Unmarshal(b, m)
		grpcx.BufferPool.Put(bp)
		return nil, err
	}
	buf := &fetchBuf{bp: bp}
	buf.refs.Store(1)
	return buf, nil
}
