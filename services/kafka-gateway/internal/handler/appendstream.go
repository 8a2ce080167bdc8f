package handler

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
)

// appendWire sends an AppendStreamRequest through grpcx.Codec without copying its
// batches into the marshalled message (storagewire.AppendStreamRequestBuffers). The
// batches are the Kafka request's own bytes (kmsg views of the request body), which
// are never modified or reused after the request is read, so gRPC may write them
// after SendMsg returns.
type appendWire struct {
	m *storagev1.AppendStreamRequest
}

// AppendStreamRequest is the wrapped message.
func (w appendWire) AppendStreamRequest() *storagev1.AppendStreamRequest { return w.m }

// MarshalBuffers implements grpcx.BufferMarshaler. Errors: storagewire.ErrInvalidUTF8
// for a channel name proto.Marshal would refuse.
func (w appendWire) MarshalBuffers(mem.BufferPool) (mem.BufferSlice, error) {
	return storagewire.AppendStreamRequestBuffers(w.m)
}

// appendStream is one Kafka connection's pipelined AppendStream to storage-core.
// storage-core applies a stream's requests in the order they were sent, so a produce
// handler only needs its Turn until its request is sent; the answer (after fsync)
// arrives later, and several requests of the connection share fsyncs. A broken stream
// (storage-core restart, network) fails every request waiting on it with its status;
// the next request opens a new stream.
type appendStream struct {
	mu     sync.Mutex // serializes open and Send
	cur    *streamConn
	nextID uint64
}

// streamConn is one open stream and the requests waiting for their answers.
type streamConn struct {
	cs     storagev1.StorageService_AppendStreamClient
	ctx    context.Context // the stream's; ends with the context it was opened with
	cancel context.CancelFunc

	mu      sync.Mutex
	waiting map[uint64]chan appendReply
	err     error // set once the stream broke; waiting is nil then
}

// appendReply is a request's answer, or the error that broke its stream.
type appendReply struct {
	results []*storagev1.ChannelAppendResult
	err     error
}

// appendTicket is a submitted request awaiting its answer.
type appendTicket struct {
	sc *streamConn
	id uint64
	ch chan appendReply
}

// submit sends channels as one request on the stream, opening it first when none is
// open (with ctx, the connection's context: the stream lives until the connection ends
// or the stream breaks). The caller must hold the connection's produce Turn, so
// requests go out in arrival order. Errors: opening or sending failed (a gRPC status
// or context error); the request may not be retried on this stream.
func (a *appendStream) submit(ctx context.Context, client storagev1.StorageServiceClient, channels []*storagev1.ChannelBatches) (*appendTicket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sc := a.cur
	if sc != nil && (sc.broken() || sc.ctx.Err() != nil) {
		sc = nil // broken, or opened by a request whose context has ended
	}
	if sc == nil {
		sctx, cancel := context.WithCancel(ctx)
		cs, err := client.AppendStream(sctx)
		if err != nil {
			cancel()
			return nil, err
		}
		sc = &streamConn{cs: cs, ctx: sctx, cancel: cancel, waiting: map[uint64]chan appendReply{}}
		a.cur = sc
		go sc.recvLoop()
	}
	a.nextID++
	t := &appendTicket{sc: sc, id: a.nextID, ch: make(chan appendReply, 1)}
	sc.mu.Lock()
	if sc.err != nil {
		err := sc.err
		sc.mu.Unlock()
		return nil, err
	}
	sc.waiting[t.id] = t.ch
	sc.mu.Unlock()
	if err := sc.cs.SendMsg(appendWire{&storagev1.AppendStreamRequest{Id: t.id, Channels: channels}}); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream ended; recvLoop delivers its status to every waiter, t included.
			return t, nil
		}
		t.forget()
		return nil, err
	}
	return t, nil
}

// wait returns the request's per-channel results, or the error that broke the stream,
// or ctx's error (the answer is then abandoned).
func (t *appendTicket) wait(ctx context.Context) ([]*storagev1.ChannelAppendResult, error) {
	select {
	case r := <-t.ch:
		return r.results, r.err
	case <-ctx.Done():
		t.forget()
		return nil, ctx.Err()
	}
}

func (t *appendTicket) forget() {
	t.sc.mu.Lock()
	delete(t.sc.waiting, t.id)
	t.sc.mu.Unlock()
}

func (sc *streamConn) broken() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.err != nil
}

// recvLoop hands answers to their waiters until the stream ends.
func (sc *streamConn) recvLoop() {
	for {
		resp, err := sc.cs.Recv()
		if err != nil {
			sc.fail(err)
			return
		}
		sc.mu.Lock()
		ch := sc.waiting[resp.GetId()]
		delete(sc.waiting, resp.GetId())
		sc.mu.Unlock()
		if ch != nil {
			ch <- appendReply{results: resp.GetResults()}
		}
	}
}

// fail marks the stream broken and fails every waiting request with err (a clean end
// of stream becomes UNAVAILABLE: the answers are missing either way).
func (sc *streamConn) fail(err error) {
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "storage-core ended the append stream")
	}
	sc.mu.Lock()
	sc.err = err
	w := sc.waiting
	sc.waiting = nil
	sc.mu.Unlock()
	sc.cancel()
	for _, ch := range w {
		ch <- appendReply{err: err}
	}
}
