package fake

import (
	"context"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// AppendFunc is a unary append, e.g. (*Storage).AppendBatches or a test's wrapper.
type AppendFunc func(context.Context, *storagev1.AppendBatchesRequest, ...grpc.CallOption) (*storagev1.AppendBatchesResponse, error)

// AppendStream implements storagev1.StorageServiceClient over AppendBatches.
func (s *Storage) AppendStream(ctx context.Context, _ ...grpc.CallOption) (storagev1.StorageService_AppendStreamClient, error) {
	return NewAppendStream(ctx, s.AppendBatches), nil
}

// NewAppendStream returns an AppendStream client that applies each request with fn
// inside Send (so in stream order, as storage-core does) and answers from a separate
// goroutine (answers may come out of order). An error from fn breaks the stream: Recv
// returns it from then on, and Send returns io.EOF, as gRPC does. The stream ends
// (Recv returns ctx's error as a status) when ctx ends.
func NewAppendStream(ctx context.Context, fn AppendFunc) *AppendStreamClient {
	return &AppendStreamClient{ctx: ctx, fn: fn, out: make(chan *storagev1.AppendStreamResponse, 1024)}
}

// AppendStreamClient is the fake stream; see NewAppendStream.
type AppendStreamClient struct {
	grpc.ClientStream
	ctx context.Context
	fn  AppendFunc
	out chan *storagev1.AppendStreamResponse

	mu  sync.Mutex
	err error
}

// Break ends the stream with err (a gRPC status): Recv returns it, Send io.EOF.
func (c *AppendStreamClient) Break(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	select {
	case c.out <- nil: // wake Recv
	default:
	}
}

func (c *AppendStreamClient) broken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Send applies the request and queues its answer.
func (c *AppendStreamClient) Send(req *storagev1.AppendStreamRequest) error {
	if c.broken() != nil || c.ctx.Err() != nil {
		return io.EOF
	}
	resp, err := c.fn(c.ctx, &storagev1.AppendBatchesRequest{Channels: req.GetChannels()})
	if err != nil {
		c.Break(err)
		return nil
	}
	select {
	case c.out <- &storagev1.AppendStreamResponse{Id: req.GetId(), Results: resp.GetResults()}:
	case <-c.ctx.Done():
	}
	return nil
}

// SendMsg is Send for a request wrapped for grpcx.Codec (kafka-gateway's appendWire,
// which the handler sends instead of the bare message).
func (c *AppendStreamClient) SendMsg(m any) error {
	switch v := m.(type) {
	case *storagev1.AppendStreamRequest:
		return c.Send(v)
	case interface {
		AppendStreamRequest() *storagev1.AppendStreamRequest
	}:
		return c.Send(v.AppendStreamRequest())
	}
	return fmt.Errorf("fake append stream: cannot send %T", m)
}

// Recv returns the next answer.
func (c *AppendStreamClient) Recv() (*storagev1.AppendStreamResponse, error) {
	for {
		if err := c.broken(); err != nil {
			return nil, err
		}
		select {
		case r := <-c.out:
			if r != nil {
				return r, nil
			}
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		}
	}
}

// CloseSend does nothing.
func (c *AppendStreamClient) CloseSend() error { return nil }

// Context is the stream's context.
func (c *AppendStreamClient) Context() context.Context { return c.ctx }

// Header returns no metadata.
func (c *AppendStreamClient) Header() (metadata.MD, error) { return nil, nil }

// Trailer returns no metadata.
func (c *AppendStreamClient) Trailer() metadata.MD { return nil }
