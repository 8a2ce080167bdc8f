package handler

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
)

// NewShareClient returns the storage-core ShareService client for cc (a connection
// with grpcx.Codec) whose ShareFetch decodes answers by reference (shareFetchReply);
// every other method is the generated client's.
func NewShareClient(cc grpc.ClientConnInterface) storagev1.ShareServiceClient {
	return shareClient{ShareServiceClient: storagev1.NewShareServiceClient(cc), cc: cc}
}

type shareClient struct {
	storagev1.ShareServiceClient
	cc grpc.ClientConnInterface
}

// ShareFetch is ShareService.ShareFetch answered into a shareFetchReply. Errors: as
// the generated client. The batches' buffer is left to the garbage collector;
// handleShareFetch uses shareFetchOwned instead.
func (c shareClient) ShareFetch(ctx context.Context, in *storagev1.ShareFetchRequest, opts ...grpc.CallOption) (*storagev1.ShareFetchResponse, error) {
	out, _, err := c.shareFetchOwned(ctx, in, opts...)
	return out, err
}

// shareFetchOwned is ShareFetch also returning the pooled buffer the answer's batches
// view (nil when they view none), which the caller releases once nothing reads them.
func (c shareClient) shareFetchOwned(ctx context.Context, in *storagev1.ShareFetchRequest, opts ...grpc.CallOption) (*storagev1.ShareFetchResponse, *fetchBuf, error) {
	r := &shareFetchReply{}
	if err := c.cc.Invoke(ctx, storagev1.ShareService_ShareFetch_FullMethodName, in, r, opts...); err != nil {
		r.buf.release()
		return nil, nil, err
	}
	return &r.resp, r.buf, nil
}

// shareFetchOwned calls storage's ShareFetch; with the gateway's shareClient the
// answer's batches are views of the returned buffer, with any other client (tests) the
// buffer is nil.
func shareFetchOwned(ctx context.Context, share storagev1.ShareServiceClient, in *storagev1.ShareFetchRequest) (*storagev1.ShareFetchResponse, *fetchBuf, error) {
	if c, ok := share.(shareClient); ok {
		return c.shareFetchOwned(ctx, in)
	}
	out, err := share.ShareFetch(ctx, in)
	return out, nil, err
}

// shareFetchReply is a ShareFetchResponse received through grpcx.Codec with each
// partition's Batches a view of one pooled buffer, as fetchReply is for Fetch: the
// answer is copied once out of the transport's frames instead of a second time by
// proto.Unmarshal (a quarter of the gateway's CPU in the share bench).
type shareFetchReply struct {
	resp storagev1.ShareFetchResponse
	buf  *fetchBuf // one holder: the caller of Invoke; nil when nothing views it
}

// UnmarshalBuffers implements grpcx.BufferUnmarshaler: storagewire.
// DecodeShareFetchResponse, anything it does not handle left to proto.Unmarshal (which
// copies what it keeps, so the buffer goes back at once).
func (f *shareFetchReply) UnmarshalBuffers(data mem.BufferSlice, _ mem.BufferPool) (err error) {
	f.buf, err = unmarshalPooled(data, &f.resp, storagewire.DecodeShareFetchResponse)
	return err
}
