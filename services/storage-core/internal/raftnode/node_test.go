package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logSM is a state machine that keeps every applied payload in order.
type logSM struct {
	mu    sync.Mutex
	vals  [][]byte
	terms []uint64
}

func (s *logSM) Apply(_, term uint64, p []byte) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals = append(s.vals, append([]byte(nil), p...))
	s.terms = append(s.terms, term)
	return len(s.vals) - 1, nil
}

func (s *logSM) values() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.vals)
}

// member is one node of the in-process cluster: its WAL directory survives a stop.
type member struct {
	id   uint64
	dir  string
	w    *wal.WAL
	n    *Node
	tr   *Transport
	srv  *grpc.Server
	sm   *logSM // of c.group
	sms  map[uint64]*logSM
	live bool
}

// cluster is three storage nodes (WAL + Node + Transport + gRPC server) on loopback
// in this process; cut drops every message between two nodes, both ways.
type cluster struct {
	t     testing.TB
	peers map[uint64]string
	m     map[uint64]*member
	group uint64

	cutMu sync.Mutex
	cuts  map[[2]uint64]bool

	// srvOpts and dialOpts are the gRPC security of every node (mTLS or none).
	srvOpts  []grpc.ServerOption
	dialOpts []grpc.DialOption

	// groups are every group of every node (c.group first); tune adjusts each node's
	// Config; batches and msgs count, per sending node, what its gate let through.
	groups        []uint64
	tune          func(*Config)
	batches, msgs map[uint64]*atomic.Uint64
}

// gate is a member's Sender: it drops what a cut forbids.
type gate struct {
	c    *cluster
	from uint64
	tr   *Transport
}

func (g gate) Send(to uint64, msgs []*storagev1.RaftMessage) {
	if g.c.isCut(g.from, to) {
		return
	}
	g.c.batches[g.from].Add(1)
	g.c.msgs[g.from].Add(uint64(len(msgs)))
	g.tr.Send(to, msgs)
}

func newCluster(t testing.TB, sec ...func(*cluster)) *cluster {
	c := &cluster{t: t, peers: map[uint64]string{}, m: map[uint64]*member{}, group: GroupID("test.log", 7), cuts: map[[2]uint64]bool{},
		batches: map[uint64]*atomic.Uint64{}, msgs: map[uint64]*atomic.Uint64{}}
	c.groups = []uint64{c.group}
	for _, f := range sec {
		f(c)
	}
	for id := uint64(1); id <= 3; id++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.peers[id] = lis.Addr().String()
		_ = lis.Close()
		c.m[id] = &member{id: id, dir: t.TempDir()}
		c.batches[id], c.msgs[id] = new(atomic.Uint64), new(atomic.Uint64)
	}
	for id := range c.m {
		c.start(id)
	}
	t.Cleanup(func() {
		for id, m := range c.m {
			if m.live {
				c.stop(id)
			}
		}
	})
	return c
}

func (c *cluster) start(id uint64) {
	t := c.t
	m := c.m[id]
	rp := NewReplay()
	w, err := wal.Open(m.dir, wal.Options{ReplayEntry: rp.Entry, ReplayHardState: rp.HardState}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// A small MemoryStorage window, so compaction runs under every test.
	cfg := Config{ID: id, Peers: c.peers, Tick: 10 * time.Millisecond, KeepEntries: 10, CompactTicks: 5}
	if c.tune != nil {
		c.tune(&cfg)
	}
	n, err := New(cfg, w, rp, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(id, c.peers, n, c.dialOpts, nil)
	n.SetSender(gate{c: c, from: id, tr: tr})
	m.sms = map[uint64]*logSM{}
	for _, g := range c.groups {
		m.sms[g] = &logSM{}
		if err := n.AddGroup(g, m.sms[g], Restart{}); err != nil {
			t.Fatal(err)
		}
	}
	m.sm = m.sms[c.group]
	var lis net.Listener
	for i := 0; ; i++ {
		lis, err = net.Listen("tcp", c.peers[id])
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv := grpc.NewServer(append(append(grpcx.BulkServerOptions(), ServerOptions()...), c.srvOpts...)...)
	tr.RegisterOn(srv)
	go func() { _ = srv.Serve(lis) }()
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	n.Start()
	m.w, m.n, m.tr, m.srv, m.live = w, n, tr, srv, true
}

// stop closes a member as a crash would leave it, as far as the others see: its
// streams end and it answers nothing; its WAL keeps what was fsynced.
func (c *cluster) stop(id uint64) {
	m := c.m[id]
	m.tr.Close()
	m.srv.Stop()
	m.n.Close()
	if err := m.w.Close(); err != nil {
		c.t.Error(err)
	}
	m.live = false
}

func (c *cluster) cut(a, b uint64, on bool) {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	c.cuts[[2]uint64{min(a, b), max(a, b)}] = on
}

func (c *cluster) isCut(a, b uint64) bool {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	return c.cuts[[2]uint64{min(a, b), max(a, b)}]
}

// waitLeader waits until the live members, except those in not, agree on one leader
// among them, and returns it.
func (c *cluster) waitLeader(not ...uint64) uint64 {
	c.t.Helper()
	return c.waitLeaderOf(c.group, not...)
}

// waitLeaderOf is waitLeader for group g.
func (c *cluster) waitLeaderOf(g uint64, not ...uint64) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		agreed := uint64(0)
		ok := true
		for id, m := range c.m {
			if !m.live || slices.Contains(not, id) {
				continue
			}
			l, _, _, err := m.n.Leader(g)
			if err != nil || l == 0 || slices.Contains(not, l) || !c.m[l].live || agreed != 0 && l != agreed {
				ok = false
				break
			}
			agreed = l
		}
		if ok && agreed != 0 {
			return agreed
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader of group %d agreed within 10 s", g)
	return 0
}

func (c *cluster) propose(id uint64, v string) (int, error) {
	return c.proposeTo(id, c.group, v)
}

func (c *cluster) proposeTo(id, g uint64, v string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.m[id].n.Propose(ctx, g, []byte(v))
	if err != nil {
		return 0, err
	}
	return res.(int), nil
}

// waitValues waits until every given member applied exactly want, in order.
func (c *cluster) waitValues(want []string, ids ...uint64) {
	c.t.Helper()
	c.waitValuesOf(c.group, want, ids...)
}

// waitValuesOf is waitValues for group g.
func (c *cluster) waitValuesOf(g uint64, want []string, ids ...uint64) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		bad := ""
		for _, id := range ids {
			got := c.m[id].sms[g].values()
			if len(got) != len(want) {
				bad = fmt.Sprintf("node %d applied %d values, want %d", id, len(got), len(want))
				break
			}
			for i := range got {
				if !bytes.Equal(got[i], []byte(want[i])) {
					c.t.Fatalf("node %d value %d = %q, want %q", id, i, got[i], want[i])
				}
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal(bad)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cluster) proposeAll(leader uint64, prefix string, n int, want []string) []string {
	c.t.Helper()
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s-%03d", prefix, i)
		pos, err := c.propose(leader, v)
		if err != nil {
			c.t.Fatalf("propose %s on leader %d: %v", v, leader, err)
		}
		if pos != len(want) {
			c.t.Fatalf("%s applied at position %d, want %d", v, pos, len(want))
		}
		want = append(want, v)
	}
	return want
}

// TestReplicateAndFailover: values proposed on the leader are applied identically on
// all three; after the leader is stopped the other two elect a new one in a later term
// and keep every committed value; the old leader, restarted from its WAL, catches up
// to the same sequence.
func TestReplicateAndFailover(t *testing.T) {
	c := newCluster(t)
	l1 := c.waitLeader()
	want := c.proposeAll(l1, "a", 50, nil)
	c.waitValues(want, 1, 2, 3)
	_, _, term1, _ := c.m[l1].n.Leader(c.group)

	for id := range c.m {
		if id != l1 {
			if _, err := c.propose(id, "x"); !errors.As(err, new(*NotLeaderError)) {
				t.Fatalf("propose on follower %d: %v, want NotLeaderError", id, err)
			}
			var nle *NotLeaderError
			_, err := c.propose(id, "x")
			if errors.As(err, &nle) && (nle.Leader != l1 || nle.Addr != c.peers[l1]) {
				t.Fatalf("NotLeaderError names %d at %s, want %d at %s", nle.Leader, nle.Addr, l1, c.peers[l1])
			}
		}
	}

	l1Last, _ := c.m[l1].n.DurableIndex(c.group)
	c.stop(l1)
	l2 := c.waitLeader(l1)
	_, _, term2, _ := c.m[l2].n.Leader(c.group)
	if l2 == l1 || term2 <= term1 {
		t.Fatalf("new leader %d term %d after leader %d term %d", l2, term2, l1, term1)
	}
	want = c.proposeAll(l2, "b", 50, want)
	// f is the live follower; it is chosen only now, since before the failover
	// either of the two could have become the new leader.
	live, f := []uint64{}, uint64(0)
	for id := range c.m {
		if id != l1 {
			live = append(live, id)
			if id != l2 {
				f = id
			}
		}
	}
	c.waitValues(want, live...)
	if terms := c.m[f].sm.terms; terms[0] != term1 || terms[len(terms)-1] != term2 {
		t.Fatalf("entry terms %d..%d, want %d..%d", terms[0], terms[len(terms)-1], term1, term2)
	}

	// The live follower dropped its applied prefix; the leader kept what the stopped
	// node lacks, so it catches up without a snapshot.
	deadline := time.Now().Add(5 * time.Second)
	for c.m[f].n.FirstIndex(c.group) <= 50 {
		if time.Now().After(deadline) {
			t.Fatalf("follower %d MemoryStorage still starts at %d", f, c.m[f].n.FirstIndex(c.group))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fi := c.m[l2].n.FirstIndex(c.group); fi > l1Last+1 {
		t.Fatalf("leader's MemoryStorage starts at %d, past the stopped node's last entry %d", fi, l1Last)
	}
	c.start(l1)
	c.waitValues(want, 1, 2, 3)
}

// TestUncommittedTailNeverApplied: a leader cut off from both followers keeps
// accepting proposals into its log; none is answered as a success, the other two
// elect a leader and commit other values, and once the link heals the old leader's
// tail is replaced: it applies exactly what the majority committed, also after a
// restart from its WAL (which holds both the tail and its replacement).
func TestUncommittedTailNeverApplied(t *testing.T) {
	c := newCluster(t)
	l1 := c.waitLeader()
	want := c.proposeAll(l1, "a", 5, nil)
	c.waitValues(want, 1, 2, 3)

	for id := range c.m {
		if id != l1 {
			c.cut(l1, id, true)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.propose(l1, fmt.Sprintf("tail-%d", i))
		}()
	}
	wg.Wait()
	logged := 0
	for i, err := range errs {
		if err == nil {
			t.Fatalf("tail proposal %d on the cut-off leader succeeded", i)
		}
		switch {
		case errors.Is(err, ErrLeadershipLost), errors.Is(err, ErrTimeout):
			logged++ // in the old leader's log (and WAL), never committed
		case errors.As(err, new(*NotLeaderError)):
		default:
			t.Fatalf("tail proposal %d: unexpected error %v", i, err)
		}
	}
	if logged == 0 {
		t.Fatal("no tail proposal reached the cut-off leader's log: the test proves nothing")
	}
	l2 := c.waitLeader(l1)
	want = c.proposeAll(l2, "b", 5, want)

	for id := range c.m {
		c.cut(l1, id, false)
	}
	c.waitValues(want, 1, 2, 3)
	c.stop(l1)
	c.start(l1)
	c.waitValues(want, 1, 2, 3)
}

// TestNoQuorumFails: with both followers down the leader cannot commit: a proposal
// fails within its timeout with an outcome-unknown error (never a success); once the
// followers return the group commits again without any manual step.
func TestNoQuorumFails(t *testing.T) {
	c := newCluster(t)
	l1 := c.waitLeader()
	want := c.proposeAll(l1, "a", 3, nil)
	c.waitValues(want, 1, 2, 3)
	for id := range c.m {
		if id != l1 {
			c.stop(id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	start := time.Now()
	_, err := c.m[l1].n.Propose(ctx, c.group, []byte("lonely"))
	cancel()
	if err == nil {
		t.Fatal("a proposal without a quorum succeeded")
	}
	if !errors.Is(err, ErrLeadershipLost) && !errors.Is(err, ErrTimeout) && !errors.As(err, new(*NotLeaderError)) {
		t.Fatalf("unexpected error %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the failure took %v", d)
	}
	if slices.ContainsFunc(c.m[l1].sm.values(), func(v []byte) bool { return string(v) == "lonely" }) {
		t.Fatal("an uncommitted proposal was applied")
	}
	for id := range c.m {
		if id != l1 {
			c.start(id)
		}
	}
	l2 := c.waitLeader()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.propose(l2, "after"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no commit after the followers returned: %v", err)
		}
		l2 = c.waitLeader()
	}
}

func TestReplayReplacesTail(t *testing.T) {
	r := NewReplay()
	for _, e := range []raftpb.Entry{{Index: 2, Term: 1}, {Index: 3, Term: 1}, {Index: 4, Term: 1}, {Index: 3, Term: 2}} {
		if err := r.Entry(9, &e); err != nil {
			t.Fatal(err)
		}
	}
	_ = r.HardState(9, raftpb.HardState{Term: 2, Commit: 3})
	hs, ents := r.take(9)
	if hs.Commit != 3 || len(ents) != 2 || ents[1].Index != 3 || ents[1].Term != 2 {
		t.Fatalf("replay = %+v %+v", hs, ents)
	}
}

func TestGroupID(t *testing.T) {
	a, b := GroupID("kafka.t.0", 5), GroupID("kafka.t.0", 6)
	if a != GroupID("kafka.t.0", 5) || a == b || a <= 1 || b <= 1 {
		t.Fatalf("GroupID: %d %d", a, b)
	}
}

// mutualTLS makes every node serve and dial with certificates of one CA (mTLS).
func mutualTLS(c *cluster) {
	ca := tlsxtest.NewCA(c.t)
	cert, key := ca.Issue(c.t, "node", "storage-core")
	scfg, err := tlsx.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.CertFile, ClientAuth: tlsx.ClientAuthRequired}.Config()
	if err != nil {
		c.t.Fatal(err)
	}
	dial, err := grpcx.DialSecurity{CAFile: ca.CertFile, CertFile: cert, KeyFile: key}.DialOptions()
	if err != nil {
		c.t.Fatal(err)
	}
	c.srvOpts = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(scfg))}
	c.dialOpts = dial
}

// TestTLSTransport: the three nodes replicate over mutually authenticated TLS, and a
// plaintext peer cannot open a stream to them.
func TestTLSTransport(t *testing.T) {
	c := newCluster(t, mutualTLS)
	l := c.waitLeader()
	want := c.proposeAll(l, "tls", 10, nil)
	c.waitValues(want, 1, 2, 3)

	cc, err := grpc.NewClient(c.peers[3], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := storagev1.NewRaftTransportServiceClient(cc).Exchange(ctx)
	if err == nil {
		_ = st.Send(&storagev1.ExchangeRequest{From: 1, To: 3})
		_, err = st.Recv()
	}
	if err == nil {
		t.Fatal("a plaintext peer opened a raft stream to a TLS node")
	}
}

// TestAddGroupAfterClose: a group added once the node is closing (a create entry
// applied while the node shuts down) is refused with ErrClosed, not started with an
// apply goroutine nothing stops (goleak checks).
func TestAddGroupAfterClose(t *testing.T) {
	dir := t.TempDir()
	rp := NewReplay()
	w, err := wal.Open(dir, wal.Options{ReplayEntry: rp.Entry, ReplayHardState: rp.HardState}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	n, err := New(Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1"}, Tick: 10 * time.Millisecond}, w, rp, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	if err := n.AddGroup(GroupID("a", 1), &logSM{}, Restart{}); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if err := n.AddGroup(GroupID("b", 2), &logSM{}, Restart{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddGroup after Close: %v, want ErrClosed", err)
	}
}
