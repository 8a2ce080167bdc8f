package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const (
	// maxQueued is the number of batches queued per peer while its stream is down or
	// slow; past it the oldest are dropped (raft retransmits) and the peer is reported
	// unreachable.
	maxQueued = 256
	// maxRequestBytes bounds one ExchangeRequest (gRPC's default receive limit is
	// 4 MiB; a raft message is at most MaxSizePerMsg, 1 MiB, plus its entries' sizes).
	maxRequestBytes = 2 << 20
	backoffMin      = 50 * time.Millisecond
	backoffMax      = time.Second
	// connectTimeout bounds one connection attempt to a peer (TCP and TLS).
	connectTimeout = 5 * time.Second
)

// Transport is the RaftTransportService of one node: one Exchange stream per node pair
// (the lower id dials, both directions ride it), every group's messages batched per
// pass of the node's loop. Register it on the node's gRPC server (RegisterOn) and give
// it to the Node as its Sender.
type Transport struct {
	storagev1.UnimplementedRaftTransportServiceServer
	id       uint64
	peers    map[uint64]string
	node     *Node
	log      *zap.Logger
	dialOpts []grpc.DialOption

	links  map[uint64]*link
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*grpc.ClientConn

	// requests and messages count what was sent to peers.
	requests, messages atomic.Uint64
}

type link struct {
	peer uint64
	mu   sync.Mutex
	q    [][]*storagev1.RaftMessage
	// cancel ends the stream currently serving the link (server side), so a
	// reconnecting dialer replaces a stale one.
	cancel context.CancelFunc
	kick   chan struct{}
}

// NewTransport returns node id's transport to peers (every node of the cluster, id
// included, by address). dial are the options peers are dialed with (TLS and a token:
// grpcx.DialSecurity.DialOptions); none dials plaintext. The server side is the node's
// gRPC server, with its own TLS and authentication.
func NewTransport(id uint64, peers map[uint64]string, node *Node, dial []grpc.DialOption, log *zap.Logger) *Transport {
	if log == nil {
		log = zap.NewNop()
	}
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{id: id, peers: peers, node: node, log: log.With(zap.Uint64("node", id)), dialOpts: dial,
		links: map[uint64]*link{}, ctx: ctx, cancel: cancel}
	for p := range peers {
		if p != id {
			t.links[p] = &link{peer: p, kick: make(chan struct{}, 1)}
		}
	}
	return t
}

// RegisterOn registers the service on s.
func (t *Transport) RegisterOn(s *grpc.Server) { storagev1.RegisterRaftTransportServiceServer(s, t) }

// Start dials the peers with a higher id, retrying a failed connection after at most
// 1 s (backoffMax). Errors: a peer address grpc cannot parse.
func (t *Transport) Start() error {
	for p, l := range t.links {
		if p < t.id {
			continue
		}
		opts := append(append(append([]grpc.DialOption(nil), t.dialOpts...), grpcx.BulkDialOptions()...), dialOptions()...)
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcx.MaxMessageBytes), grpc.MaxCallSendMsgSize(grpcx.MaxMessageBytes)),
			// gRPC's own reconnect backoff (1 s growing to 2 minutes by default) would
			// keep a peer that was down for minutes out of every group for up to 2
			// minutes after it is back; the stream's retries are at most 1 s apart,
			// and so are the connection's.
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: connectTimeout,
				Backoff: backoff.Config{BaseDelay: backoffMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: backoffMax}}))
		cc, err := grpc.NewClient(t.peers[p], opts...)
		if err != nil {
			return fmt.Errorf("raft transport: peer %d at %q: %w", p, t.peers[p], err)
		}
		t.conns = append(t.conns, cc)
		t.wg.Add(1)
		go t.dial(l, storagev1.NewRaftTransportServiceClient(cc))
	}
	return nil
}

// Close ends every stream and stops dialing.
func (t *Transport) Close() {
	t.cancel()
	t.wg.Wait()
	for _, cc := range t.conns {
		_ = cc.Close()
	}
}

// Stats are the ExchangeRequests (network round trips' worth of packets) and raft
// messages this transport sent to its peers since it was made.
func (t *Transport) Stats() (requests, messages uint64) {
	return t.requests.Load(), t.messages.Load()
}

// Send queues a batch for node to (Sender); an empty batch is sent as an
// ExchangeRequest without messages (the node's liveness heartbeat).
func (t *Transport) Send(to uint64, msgs []*storagev1.RaftMessage) {
	l := t.links[to]
	if l == nil {
		return
	}
	l.mu.Lock()
	if len(msgs) == 0 && len(l.q) > 0 {
		// A liveness batch behind queued ones says nothing they do not: while the
		// peer's stream is down, liveness alone never fills the queue.
		l.mu.Unlock()
		return
	}
	dropped := false
	if len(l.q) >= maxQueued {
		n := copy(l.q, l.q[1:])
		l.q = l.q[:n]
		dropped = true
	}
	l.q = append(l.q, msgs)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	if dropped {
		t.node.Unreachable(to)
	}
}

// dial keeps a stream to l.peer open, reconnecting with backoff.
func (t *Transport) dial(l *link, c storagev1.RaftTransportServiceClient) {
	defer t.wg.Done()
	backoff := backoffMin
	for t.ctx.Err() == nil {
		start := time.Now()
		err := t.runClient(l, c)
		if t.ctx.Err() != nil {
			return
		}
		t.node.Unreachable(l.peer)
		if time.Since(start) > backoffMax {
			backoff = backoffMin
		}
		t.log.Debug("raft stream to peer ended", zap.Uint64("peer", l.peer), zap.Error(err))
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

func (t *Transport) runClient(l *link, c storagev1.RaftTransportServiceClient) error {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	st, err := c.Exchange(ctx, grpc.CallContentSubtype(codecName))
	if err != nil {
		return err
	}
	if err := st.Send(&storagev1.ExchangeRequest{From: t.id, To: l.peer}); err != nil {
		return err
	}
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- t.recv(l.peer, st.Recv)
		cancel()
	}()
	err = t.sendLoop(ctx, l, st.Send)
	cancel()
	rerr := <-recvDone
	return errors.Join(err, rerr)
}

// Exchange serves a stream dialed by a peer with a lower id (RaftTransportService).
func (t *Transport) Exchange(st storagev1.RaftTransportService_ExchangeServer) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	from := first.GetFrom()
	l := t.links[from]
	if l == nil || from >= t.id || first.GetTo() != t.id {
		return status.Errorf(codes.InvalidArgument, "raft transport: node %d (to %d) may not open a stream to node %d", from, first.GetTo(), t.id)
	}
	t.node.Receive(from, first.GetMessages())
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	l.mu.Lock()
	if l.cancel != nil {
		l.cancel()
	}
	l.cancel = cancel
	l.mu.Unlock()
	sendDone := make(chan error, 1)
	go func() {
		sendDone <- t.sendLoop(ctx, l, st.Send)
		cancel()
	}()
	go func() {
		_ = t.recv(from, st.Recv)
		cancel()
	}()
	<-ctx.Done()
	err = <-sendDone
	if t.ctx.Err() != nil {
		return status.Error(codes.Unavailable, "raft transport: node closing")
	}
	t.node.Unreachable(from)
	return err
}

func (t *Transport) recv(from uint64, recv func() (*storagev1.ExchangeRequest, error)) error {
	for {
		req, err := recv()
		if err != nil {
			return err
		}
		if req.GetFrom() != from || req.GetTo() != t.id {
			return fmt.Errorf("raft transport: batch from %d to %d on the stream of node %d", req.GetFrom(), req.GetTo(), from)
		}
		t.node.Receive(from, req.GetMessages())
	}
}

// sendLoop sends l's queued batches, merged into requests of at most maxRequestBytes
// (queued empty batches alone make one empty request), until ctx ends or a send fails.
func (t *Transport) sendLoop(ctx context.Context, l *link, send func(*storagev1.ExchangeRequest) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.kick:
		}
		l.mu.Lock()
		q := l.q
		l.q = nil
		l.mu.Unlock()
		req := &storagev1.ExchangeRequest{From: t.id, To: l.peer}
		size := 0
		sent := false
		for _, b := range q {
			for _, m := range b {
				if size > 0 && size+len(m.Message)+len(m.Entries) > maxRequestBytes {
					if err := t.send(send, req); err != nil {
						return err
					}
					sent = true
					req = &storagev1.ExchangeRequest{From: t.id, To: l.peer}
					size = 0
				}
				req.Messages = append(req.Messages, m)
				size += len(m.Message) + len(m.Entries) + 16
			}
		}
		if len(req.Messages) > 0 || !sent && len(q) > 0 {
			if err := t.send(send, req); err != nil {
				return err
			}
		}
	}
}

func (t *Transport) send(send func(*storagev1.ExchangeRequest) error, req *storagev1.ExchangeRequest) error {
	if err := send(req); err != nil {
		return err
	}
	t.requests.Add(1)
	t.messages.Add(uint64(len(req.Messages)))
	return nil
}
