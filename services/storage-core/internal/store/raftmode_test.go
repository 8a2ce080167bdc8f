package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// raftCluster is three stores in raft mode, each with its own gRPC server on
// loopback serving the raft transport, in this process.
type raftCluster struct {
	t     testing.TB
	peers map[uint64]string
	dirs  map[uint64]string
	st    map[uint64]*Store
	srv   map[uint64]*grpc.Server
	mu    sync.Mutex // held by tests that stop and start nodes under concurrent users
	// tweak, if set, changes each node's Options before it opens.
	tweak func(*Options)
}

func newRaftCluster(t testing.TB) *raftCluster { return newRaftClusterWith(t, nil) }

// newRaftClusterWith is newRaftCluster with tweak applied to every node's Options.
func newRaftClusterWith(t testing.TB, tweak func(*Options)) *raftCluster {
	c := &raftCluster{t: t, peers: map[uint64]string{}, dirs: map[uint64]string{}, st: map[uint64]*Store{}, srv: map[uint64]*grpc.Server{}, tweak: tweak}
	for id := uint64(1); id <= 3; id++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.peers[id] = lis.Addr().String()
		_ = lis.Close()
		c.dirs[id] = t.TempDir()
	}
	for id := range c.peers {
		c.start(id)
	}
	t.Cleanup(func() {
		for id := range c.st {
			c.stop(id)
		}
	})
	return c
}

func (c *raftCluster) start(id uint64) {
	o := Options{Raft: &RaftOptions{NodeID: id, Peers: c.peers, Tick: 10 * time.Millisecond, ProposeTimeout: 3 * time.Second}, RetentionInterval: -1, minSegmentBytes: 14, Cleaner: CleanerOptions{Threads: -1}}
	if c.tweak != nil {
		c.tweak(&o)
	}
	s, err := Open(c.dirs[id], o, zap.NewNop())
	if err != nil {
		c.t.Fatal(err)
	}
	var lis net.Listener
	for i := 0; ; i++ {
		if lis, err = net.Listen("tcp", c.peers[id]); err == nil {
			break
		}
		if i == 50 {
			c.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv := grpc.NewServer(append(grpcx.BulkServerOptions(), raftnode.ServerOptions()...)...)
	s.RaftTransport().RegisterOn(srv)
	go func() { _ = srv.Serve(lis) }()
	c.st[id], c.srv[id] = s, srv
}

func (c *raftCluster) stop(id uint64) {
	c.srv[id].Stop()
	if err := c.st[id].Close(); err != nil {
		c.t.Error(err)
	}
	delete(c.st, id)
	delete(c.srv, id)
}

// leader waits for a leader of group (via node 'via' or any live node) that is live.
func (c *raftCluster) leader(group uint64) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.st {
			l, _, _, err := s.raft.node.Leader(group)
			if err == nil && l != 0 && c.st[l] != nil {
				if ll, _, _, _ := c.st[l].raft.node.Leader(group); ll == l {
					return l
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader of group %d", group)
	return 0
}

func (c *raftCluster) create(name string) uint64 {
	c.t.Helper()
	return c.createWith(name, ChannelConfig{})
}

// createWith creates channel name with config cfg through the metadata group's
// leader, waits until every live node holds it and returns its group id.
func (c *raftCluster) createWith(name string, cfg ChannelConfig) uint64 {
	c.t.Helper()
	for i := 0; ; i++ {
		_, _, err := c.st[c.leader(metaGroup)].Create(name, cfg, false)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotLeader) || i == 20 {
			c.t.Fatalf("create %s: %v", name, err)
		}
	}
	var group uint64
	c.eventually(func() error {
		for id, s := range c.st {
			l, err := s.Get(name)
			if err != nil {
				return fmt.Errorf("node %d: %v", id, err)
			}
			if group != 0 && l.wal.group != group {
				c.t.Fatalf("node %d has group %d for %s, another node %d", id, l.wal.group, name, group)
			}
			group = l.wal.group
		}
		return nil
	})
	return group
}

// restartFollower stops and starts again a node other than lead and returns its id.
func (c *raftCluster) restartFollower(lead uint64) uint64 {
	for id := range c.st {
		if id != lead {
			c.stop(id)
			c.start(id)
			return id
		}
	}
	return 0
}

func (c *raftCluster) eventually(f func() error) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// appendOn appends one record batch holding v through node id.
func (c *raftCluster) appendOn(id uint64, name, v string, p *Producer) (AppendResult, error) {
	l, err := c.st[id].Get(name)
	if err != nil {
		return AppendResult{}, err
	}
	res, _, err := l.AppendProduced([]NewRecord{{Value: []byte(v)}}, p)
	return res, err
}

// sameBytes waits until every live node holds want records of name and their raw
// appendValues appends n records "<prefix><i>" (i from 0) to channel name through the
// leader of its group, one append each, failing the test on an error.
func (c *raftCluster) appendValues(group uint64, name, prefix string, n int) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		if _, err := c.appendOn(c.leader(group), name, fmt.Sprintf("%s%d", prefix, i), nil); err != nil {
			c.t.Fatal(err)
		}
	}
}

// bytes are identical; it returns them.
func (c *raftCluster) sameBytes(name string, want int64) []byte {
	c.t.Helper()
	var ref []byte
	c.eventually(func() error {
		ref = nil
		for id, s := range c.st {
			l, err := s.Get(name)
			if err != nil {
				return err
			}
			if hw := l.HighWatermark(); hw != want {
				return fmt.Errorf("node %d high watermark %d, want %d", id, hw, want)
			}
			b, err := l.ReadRaw(0, 64<<20)
			if err != nil {
				return err
			}
			if ref != nil && !bytes.Equal(b, ref) {
				c.t.Fatalf("node %d holds other bytes than another node (%d vs %d bytes)", id, len(b), len(ref))
			}
			ref = b
		}
		return nil
	})
	return ref
}

// checkReplicas stops every live node and checks with CheckReplicas that the three
// data directories agree over the prefix they all hold; it fails the test on any
// difference and returns each channel's compared range.
func (c *raftCluster) checkReplicas() map[string]ChannelRange {
	c.t.Helper()
	for id := range c.st {
		c.stop(id)
	}
	rep, err := CheckReplicas([]string{c.dirs[1], c.dirs[2], c.dirs[3]})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, d := range rep.Diffs {
		c.t.Errorf("replicas differ: %+v", d)
	}
	out := map[string]ChannelRange{}
	for _, r := range rep.Channels {
		out[r.Channel] = r
	}
	return out
}

// epochs lists each batch's partitionLeaderEpoch in raw.
func epochs(raw []byte) []uint32 {
	var out []uint32
	for p := 0; p+batchHeaderLen <= len(raw); {
		n, err := frameLen(raw[p:])
		if err != nil {
			break
		}
		out = append(out, binary.BigEndian.Uint32(raw[p+12:]))
		p += n
	}
	return out
}

// TestRaftModeReplicates: a channel created through the metadata group exists on all
// three nodes with one group id; appends on its leader are answered with contiguous
// offsets, every node holds the same bytes with the Raft term in each batch's
// partitionLeaderEpoch, an idempotent retry is a duplicate everywhere; after the
// leader stops a new one (later term) keeps appending on the committed prefix; the old
// leader, restarted, rebuilds its channels from its WAL and catches up byte for byte.
// With two nodes down an append fails within the timeout and never succeeds.
func TestRaftModeReplicates(t *testing.T) {
	c := newRaftCluster(t)
	if _, _, err := c.st[c.leader(metaGroup)].CreateKind("raft.queue", KindQueue, ChannelConfig{}, false); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("queue create in raft mode: %v, want ErrInvalidArgument", err)
	}
	group := c.create("raft.log")
	derived := false
	for idx := uint64(2); idx < 10; idx++ {
		derived = derived || group == raftnode.GroupID("raft.log", idx)
	}
	if !derived {
		t.Fatalf("group %d is not GroupID(name, create index)", group)
	}
	l1 := c.leader(group)
	for id := range c.st {
		if id == l1 {
			continue
		}
		_, err := c.appendOn(id, "raft.log", "x", nil)
		var nle *raftnode.NotLeaderError
		if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nle) {
			t.Fatalf("append on follower %d: %v, want ErrNotLeader", id, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "channel raft.log") || strings.Contains(msg, "raftnode") || strings.Contains(msg, "group") {
			t.Fatalf("follower %d's refusal %q should name the channel, not raft internals", id, msg)
		}
	}
	prod := &Producer{ID: 7, Epoch: 0}
	for i := 0; i < 20; i++ {
		prod.BaseSequence = int32(i)
		res, err := c.appendOn(l1, "raft.log", fmt.Sprintf("a%d", i), prod)
		if err != nil || res.BaseOffset != int64(i) || res.Duplicate {
			t.Fatalf("append %d: %+v %v", i, res, err)
		}
	}
	prod.BaseSequence = 19
	if res, err := c.appendOn(l1, "raft.log", "a19", prod); err != nil || !res.Duplicate || res.BaseOffset != 19 {
		t.Fatalf("idempotent retry: %+v %v", res, err)
	}
	raw := c.sameBytes("raft.log", 20)
	_, _, term1, _ := c.st[l1].raft.node.Leader(group)
	for i, e := range epochs(raw) {
		if uint64(e) != term1 {
			t.Fatalf("batch %d partitionLeaderEpoch %d, want term %d", i, e, term1)
		}
	}

	c.stop(l1)
	l2 := c.leader(group)
	_, _, term2, _ := c.st[l2].raft.node.Leader(group)
	if term2 <= term1 {
		t.Fatalf("term %d after %d", term2, term1)
	}
	for i := 20; i < 30; i++ {
		res, err := c.appendOn(l2, "raft.log", fmt.Sprintf("b%d", i), nil)
		if err != nil || res.BaseOffset != int64(i) {
			t.Fatalf("append %d on the new leader: %+v %v", i, res, err)
		}
	}
	raw2 := c.sameBytes("raft.log", 30)
	if !bytes.HasPrefix(raw2, raw) {
		t.Fatal("the committed prefix changed after the failover")
	}
	if e := epochs(raw2); uint64(e[len(e)-1]) != term2 {
		t.Fatalf("last batch epoch %d, want %d", e[len(e)-1], term2)
	}
	c.start(l1)
	c.sameBytes("raft.log", 30)

	// Two of three down: no false success.
	for id := range c.st {
		if id != l2 {
			c.stop(id)
		}
	}
	start := time.Now()
	_, err := c.appendOn(l2, "raft.log", "lonely", nil)
	if err == nil {
		t.Fatal("append without a quorum succeeded")
	}
	if !errors.Is(err, ErrNotReplicated) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("append without a quorum: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the failure took %v", d)
	}
	l, _ := c.st[l2].Get("raft.log")
	if hw := l.HighWatermark(); hw != 30 {
		t.Fatalf("high watermark %d after the failed append", hw)
	}
	if r := c.checkReplicas()["raft.log"]; r.From != 0 || r.To != 30 || r.Batches != 30 {
		t.Fatalf("replicas compared over %+v, want offsets [0, 30) in 30 batches", r)
	}
}

// BenchmarkRaftAppend compares durable appends of 16 x 1 KiB batches by 8 parallel
// producers to one channel: rf=1 is the default store (its own segment fsync, group
// commit), rf=3 raft mode with three in-process nodes (commit = two of three WAL
// fsyncs, plus the transport on loopback), in one run.
func BenchmarkRaftAppend(b *testing.B) {
	vals := make([]string, 16)
	for i := range vals {
		vals[i] = strings.Repeat("v", 1024)
	}
	batch := kbatch(&testing.T{}, batchOpt{}, vals...)
	run := func(b *testing.B, l *Log) {
		b.SetBytes(int64(len(batch)))
		b.ReportAllocs()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, len(batch))
			for pb.Next() {
				copy(buf, batch)
				if _, err := l.AppendBatches(buf); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("rf=1", func(b *testing.B) {
		s, err := Open(b.TempDir(), Options{RetentionInterval: -1}, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		l, _, err := s.Create("bench", ChannelConfig{}, false)
		if err != nil {
			b.Fatal(err)
		}
		run(b, l)
	})
	b.Run("rf=3", func(b *testing.B) {
		c := newRaftCluster(b)
		group := c.create("bench")
		l, err := c.st[c.leader(group)].Get("bench")
		if err != nil {
			b.Fatal(err)
		}
		run(b, l)
	})
}

// TestRaftModeTxnMarkers: in raft mode a transaction marker is an entry of the
// channel's group: a follower refuses it with ErrNotLeader, the leader's is written
// by every replica at the same offset (the term in its partitionLeaderEpoch), each
// replica's LSO and aborted index move alike, a retried marker is a duplicate, and a
// stale epoch is ErrInvalidProducerEpoch; a restarted node rebuilds the same
// transaction state from its WAL.
func TestRaftModeTxnMarkers(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.txn")
	lead := c.leader(group)
	ll, err := c.st[lead].Get("raft.txn")
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 5, epoch: 2, seq: 0, txn: true}, "t0", "t1")) // 0-1
	mustAppend(t, ll, kbatch(t, batchOpt{}, "plain2"))                                      // 2
	c.sameBytes("raft.txn", 3)
	for id, s := range c.st {
		l, _ := s.Get("raft.txn")
		if got := l.LastStable(); got != 0 {
			t.Fatalf("node %d LSO %d with the transaction open, want 0", id, got)
		}
		if id == lead {
			continue
		}
		if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: 5, ProducerEpoch: 2}); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("marker on follower %d: %v, want ErrNotLeader", id, err)
		}
	}
	if _, err := ll.WriteTxnMarker(TxnMarker{ProducerID: 5, ProducerEpoch: 1}); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("stale marker: %v, want ErrInvalidProducerEpoch", err)
	}
	if r := mustMarker(t, ll, TxnMarker{ProducerID: 5, ProducerEpoch: 2, CoordinatorEpoch: 0}); r.Duplicate || r.BaseOffset != 3 {
		t.Fatalf("abort marker %+v, want offset 3", r)
	}
	if r := mustMarker(t, ll, TxnMarker{ProducerID: 5, ProducerEpoch: 2}); !r.Duplicate {
		t.Fatalf("retried marker %+v, want a duplicate", r)
	}
	raw := c.sameBytes("raft.txn", 4)
	_, _, term, _ := c.st[lead].raft.node.Leader(group)
	if e := epochs(raw); uint64(e[len(e)-1]) != term {
		t.Fatalf("marker partitionLeaderEpoch %d, want term %d", e[len(e)-1], term)
	}
	check := func() {
		t.Helper()
		c.eventually(func() error {
			for id, s := range c.st {
				l, err := s.Get("raft.txn")
				if err != nil {
					return err
				}
				if got := l.LastStable(); got != 4 {
					return fmt.Errorf("node %d LSO %d, want 4", id, got)
				}
				ab := l.AbortedTxns(0, 4)
				if len(ab) != 1 || ab[0].ProducerID != 5 || ab[0].FirstOffset != 0 {
					return fmt.Errorf("node %d aborted index %+v, want producer 5 from 0", id, ab)
				}
				if got := committedValues(t, l, 0); len(got) != 1 || got[0] != "plain2" {
					return fmt.Errorf("node %d read_committed %v, want [plain2]", id, got)
				}
			}
			return nil
		})
	}
	check()
	c.restartFollower(lead)
	c.sameBytes("raft.txn", 4)
	check()
}

// TestRaftModeConfigChange: a channel config change is an entry of the metadata group:
// refused on a follower of that group (ErrNotLeader), applied on every replica by its
// leader, a masked change keeps the other fields, a bad mask or value is
// ErrInvalidArgument, and a restarted node rebuilds the config from its WAL.
func TestRaftModeConfigChange(t *testing.T) {
	c := newRaftCluster(t)
	c.create("raft.cfg")
	meta := c.leader(metaGroup)
	for id, s := range c.st {
		if id == meta {
			continue
		}
		l, _ := s.Get("raft.cfg")
		if err := l.UpdateConfig(ChannelConfig{RetentionMs: 1}); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("config change on follower %d: %v, want ErrNotLeader", id, err)
		}
	}
	lm, _ := c.st[meta].Get("raft.cfg")
	if err := lm.UpdateConfig(ChannelConfig{RetentionMs: 60000, MaxMessageBytes: 2048}); err != nil {
		t.Fatal(err)
	}
	if err := lm.UpdateConfigFields(ChannelConfig{RetentionMs: 120000, MaxMessageBytes: 1}, []string{"retention_ms"}); err != nil {
		t.Fatal(err)
	}
	if err := lm.UpdateConfigFields(ChannelConfig{}, []string{"bogus"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown mask field: %v, want ErrInvalidArgument", err)
	}
	if err := lm.UpdateConfig(ChannelConfig{RetentionMs: -2}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("retention_ms -2: %v, want ErrInvalidArgument", err)
	}
	want := ChannelConfig{RetentionMs: 120000, MaxMessageBytes: 2048}
	same := func() error {
		for id, s := range c.st {
			l, err := s.Get("raft.cfg")
			if err != nil {
				return err
			}
			if got := l.Config(); got != want {
				return fmt.Errorf("node %d config %+v, want %+v", id, got, want)
			}
		}
		return nil
	}
	c.eventually(same)
	var follower uint64
	for id := range c.st {
		if id != meta {
			follower = id
		}
	}
	c.stop(follower)
	c.start(follower)
	c.eventually(same)
}

// TestRaftModeGetConfirmed: a replica cut off from its peers has not applied a channel
// the metadata group created: Get says ErrNotFound, but GetConfirmed, which writes act
// on, answers ErrNotLeader (the metadata group's leader alone can tell). On that leader
// GetConfirmed finds the channel, and answers ErrNotFound only for one that does not
// exist.
func TestRaftModeGetConfirmed(t *testing.T) {
	c := newRaftCluster(t)
	c.create("raft.before")
	meta := c.leader(metaGroup)
	var lagging uint64
	for id := range c.st {
		if id != meta {
			lagging = id
		}
	}
	// Cut it off: its server (the streams the others dialed) and its transport (the
	// streams it dialed itself, which carry both directions). A server stop alone left
	// a lower-id node reachable, and the test then raced the create's apply there.
	c.srv[lagging].Stop()
	c.st[lagging].raft.tr.Close()
	if _, _, err := c.st[meta].Create("raft.lag", ChannelConfig{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st[lagging].Get("raft.lag"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on the cut-off replica: %v, want ErrNotFound (the case under test)", err)
	}
	if _, err := c.st[lagging].GetConfirmed("raft.lag"); !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNotFound) {
		t.Fatalf("GetConfirmed on the cut-off replica: %v, want ErrNotLeader", err)
	}
	if _, err := c.st[lagging].GetConfirmed("raft.before"); err != nil {
		t.Fatalf("GetConfirmed of a channel the replica holds: %v", err)
	}
	if l, err := c.st[meta].GetConfirmed("raft.lag"); err != nil || l.Name() != "raft.lag" {
		t.Fatalf("GetConfirmed on the metadata leader: %v", err)
	}
	if _, err := c.st[meta].GetConfirmed("raft.none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetConfirmed of an absent channel on the metadata leader: %v, want ErrNotFound", err)
	}
}

// TestRaftModeDeleteRecords: DeleteRecords is an entry of the channel's group: refused
// on a follower (ErrNotLeader), checked on the leader (ErrOutOfRange past the end),
// and applied by every replica to the same log start, -1 meaning the end of the log
// at that entry; a stale one changes nothing; a restarted replica rebuilds the log
// start from its WAL; appends go on after it.
func TestRaftModeDeleteRecords(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.trim")
	lead := c.leader(group)
	ll, err := c.st[lead].Get("raft.trim")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		mustAppend(t, ll, kbatch(t, batchOpt{}, fmt.Sprintf("v%d", i)))
	}
	c.sameBytes("raft.trim", 5)
	starts := func(want int64) {
		t.Helper()
		c.eventually(func() error {
			for id, s := range c.st {
				l, err := s.Get("raft.trim")
				if err != nil {
					return err
				}
				if got := l.LogStart(); got != want {
					return fmt.Errorf("node %d log start %d, want %d", id, got, want)
				}
				if _, err := l.ReadRaw(want-1, 1<<20); want > 0 && !errors.Is(err, ErrOutOfRange) {
					return fmt.Errorf("node %d read below the log start: %v, want ErrOutOfRange", id, err)
				}
			}
			return nil
		})
	}
	for id, s := range c.st {
		if id == lead {
			continue
		}
		l, _ := s.Get("raft.trim")
		if _, err := l.DeleteRecords(2); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("DeleteRecords on follower %d: %v, want ErrNotLeader", id, err)
		}
	}
	if _, err := ll.DeleteRecords(6); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("DeleteRecords past the end: %v, want ErrOutOfRange", err)
	}
	if got, err := ll.DeleteRecords(2); err != nil || got != 2 {
		t.Fatalf("DeleteRecords(2): %d %v", got, err)
	}
	starts(2)
	if got, err := ll.DeleteRecords(1); err != nil || got != 2 {
		t.Fatalf("stale DeleteRecords(1): %d %v, want 2", got, err)
	}
	mustAppend(t, ll, kbatch(t, batchOpt{}, "v5"))
	if got, err := ll.DeleteRecords(-1); err != nil || got != 6 {
		t.Fatalf("DeleteRecords(-1): %d %v, want 6", got, err)
	}
	starts(6)
	c.restartFollower(lead)
	starts(6)
	if r := mustAppend(t, ll, kbatch(t, batchOpt{}, "v6")); r.BaseOffset != 6 {
		t.Fatalf("append after DeleteRecords at %d, want 6", r.BaseOffset)
	}
	c.eventually(func() error {
		var ref []byte
		for id, s := range c.st {
			l, _ := s.Get("raft.trim")
			b, err := l.ReadRaw(6, 1<<20)
			if err != nil || l.HighWatermark() != 7 || len(b) == 0 {
				return fmt.Errorf("node %d: high watermark %d, %d bytes from 6, %v", id, l.HighWatermark(), len(b), err)
			}
			if ref != nil && !bytes.Equal(b, ref) {
				t.Fatalf("node %d holds other bytes from offset 6", id)
			}
			ref = b
		}
		return nil
	})
}

// TestRaftModeRetention: time and size retention run on a channel's leader only,
// which proposes the log start its segments leave; every replica then drops the same
// records, whatever its own segments.
func TestRaftModeRetention(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.ret")
	meta := c.leader(metaGroup)
	ml, _ := c.st[meta].Get("raft.ret")
	if err := ml.UpdateConfigFields(ChannelConfig{SegmentBytes: 200, RetentionBytes: 1, RetentionMs: -1}, []string{"segment_bytes", "retention_bytes", "retention_ms"}); err != nil {
		t.Fatal(err)
	}
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.ret")
	c.eventually(func() error {
		if got := ll.Config().SegmentBytes; got != 200 {
			return fmt.Errorf("leader segment_bytes %d", got)
		}
		return nil
	})
	for i := 0; i < 10; i++ {
		mustAppend(t, ll, kbatch(t, batchOpt{}, fmt.Sprintf("value-%02d", i)))
	}
	c.sameBytes("raft.ret", 10)
	for id, s := range c.st {
		if id != lead {
			s.RunRetention()
		}
	}
	for id, s := range c.st {
		if l, _ := s.Get("raft.ret"); l.LogStart() != 0 {
			t.Fatalf("node %d log start %d after a follower's retention, want 0", id, l.LogStart())
		}
	}
	c.st[lead].RunRetention()
	want := ll.LogStart()
	if want == 0 || want > 10 {
		t.Fatalf("leader log start %d after size retention, want 1..10", want)
	}
	c.eventually(func() error {
		for id, s := range c.st {
			l, _ := s.Get("raft.ret")
			if got := l.LogStart(); got != want {
				return fmt.Errorf("node %d log start %d, want %d", id, got, want)
			}
			if _, err := l.ReadRaw(want-1, 1<<20); !errors.Is(err, ErrOutOfRange) {
				return fmt.Errorf("node %d read below the log start: %v", id, err)
			}
		}
		return nil
	})
}

// TestRaftModeCompaction: a compacted channel on a raft cluster is cleaned by each
// replica's cleaner: every node keeps exactly the newest record of each key below its
// active segment, at the offsets the leader gave; appends go on after the clean, and a
// restarted replica ends, cleaned, with the same records.
func TestRaftModeCompaction(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.compact")
	ml, _ := c.st[c.leader(metaGroup)].Get("raft.compact")
	if err := ml.UpdateConfigFields(ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 8 << 10, MinCleanableDirtyRatio: -1},
		[]string{"cleanup_policy", "segment_bytes", "min_cleanable_dirty_ratio"}); err != nil {
		t.Fatal(err)
	}
	c.eventually(func() error {
		for id, s := range c.st {
			if l, _ := s.Get("raft.compact"); !l.Config().Compacted() {
				return fmt.Errorf("node %d not compacted yet", id)
			}
		}
		return nil
	})
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.compact")
	clk := &clock{}
	clk.ms.Store(time.Now().UnixMilli())
	written := compactWorkload(t, ll, clk, 100, 8)
	c.sameBytes("raft.compact", int64(len(written)))
	// cleanAll runs every node's cleaner and checks what each then holds; with
	// mustClean each must have run a pass.
	cleanAll := func(mustClean bool) {
		t.Helper()
		for id, s := range c.st {
			// The cleaner stays below the checkpointed end (raftckpt.go).
			if err := s.RunRaftCheckpoint(); err != nil {
				t.Fatal(err)
			}
			if n := s.RunCleaner(); n == 0 && mustClean {
				t.Fatalf("node %d ran no cleaner pass", id)
			}
			l, _ := s.Get("raft.compact")
			checkCompacted(t, l, written, wantCompacted(written, l.activeBase(), false))
		}
	}
	cleanAll(true)
	r := mustAppend(t, ll, EncodeBatch([]NewRecord{{Key: []byte("key-0000"), Value: []byte("after")}}, clk.ms.Load()))
	written[r.BaseOffset] = [2][]byte{[]byte("key-0000"), []byte("after")}
	c.eventually(func() error {
		for id, s := range c.st {
			if l, _ := s.Get("raft.compact"); l.HighWatermark() != int64(len(written)) {
				return fmt.Errorf("node %d high watermark %d, want %d", id, l.HighWatermark(), len(written))
			}
		}
		return nil
	})
	c.restartFollower(lead)
	c.eventually(func() error {
		for id, s := range c.st {
			l, err := s.Get("raft.compact")
			if err != nil || l.HighWatermark() != int64(len(written)) {
				return fmt.Errorf("node %d: %v", id, err)
			}
		}
		return nil
	})
	cleanAll(false)
}
