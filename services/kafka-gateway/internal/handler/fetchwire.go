package handler

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

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
// client (a gRPC status or context error).
func (c storageClient) Fetch(ctx context.Context, in *storagev1.FetchRequest, opts ...grpc.CallOption) (*storagev1.FetchResponse, error) {
	r := &fetchReply{}
	if err := c.cc.Invoke(ctx, storagev1.StorageService_Fetch_FullMethodName, in, r, opts...); err != nil {
		return nil, err
	}
	return &r.resp, nil
}

// fetchReply is a FetchResponse received through grpcx.Codec with each result's
// Batches a view of one buffer: the message is copied once out of the transport's
// frames, instead of a second time by proto.Unmarshal, which on a consume run was a
// fifth of the gateway's CPU. The buffer is not pooled: the batches live on in the
// Kafka response being written and in fetch-ahead, and the garbage collector frees it.
type fetchReply struct {
	resp storagev1.FetchResponse
}

// UnmarshalBuffers implements grpcx.BufferUnmarshaler: storagewire.DecodeFetchResponse
// for the fields FetchChannelResult has; anything else (unknown fields, wrong wire
// types, bad UTF-8) is left to proto.Unmarshal, which reports the errors it always
// reports.
func (f *fetchReply) UnmarshalBuffers(data mem.BufferSlice, _ mem.BufferPool) error {
	b := data.Materialize()
	if !storagewire.DecodeFetchResponse(b, &f.resp) {
		f.resp.Reset()
		return proto.Unmarshal(b, &f.resp)
	}
	return nil
}
