package grpcx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// LeaderTrailer and LeaderIDTrailer are the trailing metadata of a storage-core node in
// raft mode (--node-id/--peers) that refuses a single-channel call with
// FAILED_PRECONDITION because it does not lead the channel's Raft group (or the
// metadata group, for creates and deletes): the leader's gRPC address ("" while an
// election is under way) and node id. storage-core's internal/server/leader.go sets
// them.
const (
	LeaderTrailer   = "tributary-leader"
	LeaderIDTrailer = "tributary-leader-id"
)

// ErrNoNodes is returned by NewLeaderConn for an empty address list.
var ErrNoNodes = errors.New("no storage-core addresses")

// LeaderConn is a grpc.ClientConnInterface over the nodes of a storage-core cluster in
// raft mode (issue 16). It keeps one connection per node (the configured ones, and any
// leader address a node names), and sends each unary call to the leader of the
// channel the request names (GetChannel()/GetName(); CreateChannel, DeleteChannel and
// UpdateChannelConfig, which storage-core's metadata group orders, and calls naming
// none key on ""), as
// last learned:
//   - a FAILED_PRECONDITION answer carrying LeaderTrailer with an address is followed:
//     the leader is remembered for the channel and the call is sent there (at most
//     MaxHops times);
//   - with LeaderTrailer empty (an election) the call fails UNAVAILABLE at once, so the
//     caller retries later (Kafka: NOT_LEADER_OR_FOLLOWER);
//   - UNAVAILABLE (node down, or no majority) forgets the channel's leader and moves
//     the default node on; a read (Retry says which methods may be resent) is resent
//     to the next node, up to once per node; a write fails with that status.
//
// Streams go to the default node. Safe for concurrent use. One address still routes
// through it; callers wanting today's single-connection behaviour dial one address
// themselves.
type LeaderConn struct {
	dial  func(addr string) (*grpc.ClientConn, error)
	retry func(method string) bool

	mu      sync.Mutex
	nodes   map[string]*grpc.ClientConn
	order   []string // the configured nodes, in order
	next    int      // index in order of the default node
	leaders map[string]string
}

// StorageReads reports whether a StorageService method may be resent to another
// storage-core node after UNAVAILABLE (NewLeaderConn's retry): the reads, which any
// node serves from what it applied.
func StorageReads(method string) bool {
	switch method {
	case storagev1.StorageService_GetChannel_FullMethodName, storagev1.StorageService_ListChannels_FullMethodName,
		storagev1.StorageService_Read_FullMethodName, storagev1.StorageService_LookupSequence_FullMethodName,
		storagev1.StorageService_Fetch_FullMethodName, storagev1.StorageService_DescribeProducers_FullMethodName,
		storagev1.StorageService_OffsetForLeaderEpoch_FullMethodName:
		return true
	}
	return false
}

// MaxHops bounds how many not-leader answers one call follows.
const MaxHops = 3

// NewLeaderConn dials every address of addrs (comma-separated host:port list, or
// entries of a slice) with opts; retry reports whether a method is safe to resend to
// another node after UNAVAILABLE (nil: none). Errors: ErrNoNodes, or a dial error.
func NewLeaderConn(addrs []string, retry func(method string) bool, opts ...grpc.DialOption) (*LeaderConn, error) {
	c := &LeaderConn{nodes: map[string]*grpc.ClientConn{}, leaders: map[string]string{}, retry: retry}
	c.dial = func(addr string) (*grpc.ClientConn, error) { return Dial(addr, opts...) }
	if c.retry == nil {
		c.retry = func(string) bool { return false }
	}
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" || c.nodes[a] != nil {
			continue
		}
		cc, err := c.dial(a)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("dial %s: %w", a, err)
		}
		c.nodes[a] = cc
		c.order = append(c.order, a)
	}
	if len(c.order) == 0 {
		return nil, ErrNoNodes
	}
	return c, nil
}

// SplitAddrs splits a comma-separated address list (a --storage-addr flag value).
func SplitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Conns are the connections of the configured nodes, in order (health checks).
func (c *LeaderConn) Conns() []*grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*grpc.ClientConn, len(c.order))
	for i, a := range c.order {
		out[i] = c.nodes[a]
	}
	return out
}

// AnyServing is the health check of a storage-core cluster: nil while one configured
// node answers SERVING (it names the leaders of the rest); else every node's error,
// each node checked as h with its connection and address.
func (c *LeaderConn) AnyServing(ctx context.Context, h HealthCheck) error {
	c.mu.Lock()
	addrs := append([]string(nil), c.order...)
	conns := make([]*grpc.ClientConn, len(addrs))
	for i, a := range addrs {
		conns[i] = c.nodes[a]
	}
	c.mu.Unlock()
	var errs []error
	for i, cc := range conns {
		h.Conn, h.Addr = cc, addrs[i]
		err := h.Check(ctx)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close closes every connection.
func (c *LeaderConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.nodes {
		_ = cc.Close()
	}
	c.nodes = map[string]*grpc.ClientConn{}
}

// Pick is the node a call about key goes to: its leader as last learned, else the
// default node. It returns the address and its connection.
func (c *LeaderConn) Pick(key string) (string, *grpc.ClientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.leaders[key]; ok {
		if cc := c.nodes[a]; cc != nil {
			return a, cc
		}
	}
	a := c.order[c.next%len(c.order)]
	return a, c.nodes[a]
}

// Cached reports whether a leader of key is known.
func (c *LeaderConn) Cached(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.leaders[key]
	return ok
}

// Learn records addr as key's leader (dialing it when it is new). Errors: the dial's.
func (c *LeaderConn) Learn(key, addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[addr] == nil {
		cc, err := c.dial(addr)
		if err != nil {
			return err
		}
		c.nodes[addr] = cc
	}
	if c.leaders[key] != addr {
		c.leaders[key] = addr
	}
	return nil
}

// Forget drops key's leader: the next call about key goes to the default node.
func (c *LeaderConn) Forget(key string) {
	c.mu.Lock()
	delete(c.leaders, key)
	c.mu.Unlock()
}

// ForgetIf drops the leader of every key for which drop is true (a deleted topic's
// channels): the leaders map otherwise keeps every key ever routed.
func (c *LeaderConn) ForgetIf(drop func(key string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.leaders {
		if drop(k) {
			delete(c.leaders, k)
		}
	}
}

// Down records that addr did not answer: every leader learned at it is forgotten and,
// when it is the default node, the default moves to the next configured node.
func (c *LeaderConn) Down(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, a := range c.leaders {
		if a == addr {
			delete(c.leaders, k)
		}
	}
	if c.order[c.next%len(c.order)] == addr {
		c.next = (c.next + 1) % len(c.order)
	}
}

// LeaderOf returns the leader address a not-leader answer named (from its trailer md)
// and whether err is such an answer.
func LeaderOf(err error, md metadata.MD) (string, bool) {
	if status.Code(err) != codes.FailedPrecondition {
		return "", false
	}
	v := md.Get(LeaderTrailer)
	if len(v) != 1 {
		return "", false
	}
	return v[0], true
}

type keyed interface{ GetChannel() string }
type named interface{ GetName() string }

// RequestKey is the channel a request names ("" when none).
func RequestKey(req any) string {
	switch r := req.(type) {
	case keyed:
		return r.GetChannel()
	case named:
		return r.GetName()
	}
	return ""
}

// requestKeyCtx carries the routing key of WithRequestKey.
type requestKeyCtx struct{}

// WithRequestKey routes a LeaderConn call made with the returned context to the leader
// of channel key, for requests that name no single channel themselves (one element of
// a batched request, such as a WriteTxnMarkers of one marker).
func WithRequestKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, requestKeyCtx{}, key)
}

// metaKey is the key of storage-core's creates, deletes and channel config changes,
// which its metadata group orders: they go to that group's leader, not to the
// channel's.
const metaKey = ""

// Invoke sends a unary call to the leader of the channel req names (see LeaderConn).
func (c *LeaderConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	key := RequestKey(args)
	if k, ok := ctx.Value(requestKeyCtx{}).(string); ok {
		key = k
	}
	if strings.HasSuffix(method, "/CreateChannel") || strings.HasSuffix(method, "/DeleteChannel") || strings.HasSuffix(method, "/UpdateChannelConfig") {
		key = metaKey
	}
	tries := 0
	for hop := 0; ; {
		addr, cc := c.Pick(key)
		var md metadata.MD
		err := cc.Invoke(ctx, method, args, reply, append(opts, grpc.Trailer(&md))...)
		if err == nil {
			return nil
		}
		if leader, ok := LeaderOf(err, md); ok {
			if leader == "" || leader == addr || hop >= MaxHops {
				c.Forget(key)
				return status.Errorf(codes.Unavailable, "no storage-core leader for %q yet: %v", key, status.Convert(err).Message())
			}
			hop++
			if lerr := c.Learn(key, leader); lerr != nil {
				return status.Errorf(codes.Unavailable, "dial leader %s: %v", leader, lerr)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		c.Down(addr)
		c.Forget(key)
		tries++
		if !c.retry(method) || tries >= len(c.order) {
			return err
		}
	}
}

// NewStream opens a stream on the default node.
func (c *LeaderConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	_, cc := c.Pick("")
	return cc.NewStream(ctx, desc, method, opts...)
}
