package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"github.com/tributary/tributary/services/storage-core/internal/wal"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Raft mode (Options.Raft, issue 16 step 2). Every channel is one Raft group
// (internal/raftnode) whose members are all the configured peers (static membership).
// A node-wide metadata group (id 1) orders channel creates and deletes: a channel's
// group id is raftnode.GroupID(name, index of its create entry), the same on every
// replica, and new for every re-creation. A log append is proposed on the channel's
// leader as the unstamped frames plus the leader's clock; each replica, applying the
// committed entry, checks the frames again (not against its channel config, which the
// metadata group may have changed at another point of its own order: the leader checked
// that at propose, and the entry carries the timestamp type), de-duplicates idempotent
// producers, assigns offsets, stamps the entry's term into every batch's partitionLeaderEpoch and writes
// the segment (writeChecked: deterministic, so replicas hold the same bytes). The
// append is answered once its entry is applied on the leader; the high watermark moves
// at apply on every replica (the entry is in a majority's fsynced WAL by then).
//
// The node WAL (<data-dir>/raft-wal) holds every group's entries above its floor: the
// checkpoint loop truncates it below the smaller of each group's checkpoint and the
// point every voter has persisted, and a start resumes each group at its checkpoint,
// replaying only the WAL above it (raftckpt.go; snapshots are step 4).
// Transaction markers are entries of the channel's group, written at apply.
// Channel config changes are entries of the metadata group. DeleteRecords is an entry
// of the channel's group (cmdRaftTrim), and time and size retention run on each
// channel's leader only, which proposes the log start they leave as such an entry;
// producer-state expiry likewise (cmdRaftExpire, raftmode_expiry.go). Each entry that
// writes records assigns its term in the channel's leader-epoch index
// (raftmode_epochs.go), which OffsetForLeaderEpoch answers from.
// Not replicated yet, so refused in raft mode: queues.

// Errors of raft mode.
var (
	// ErrNotLeader: this node does not lead the channel's group (or the metadata
	// group, for creates and deletes); the error chain holds *raftnode.NotLeaderError
	// with the leader's address. gRPC: FAILED_PRECONDITION.
	ErrNotLeader = errors.New("not the leader")
	// ErrNotReplicated: the proposal did not commit within the timeout (no quorum, or
	// leadership was lost meanwhile); its outcome is unknown. gRPC: UNAVAILABLE.
	ErrNotReplicated = errors.New("not replicated to a majority within the timeout")
)

// RaftOptions configure raft mode.
type RaftOptions struct {
	// NodeID is this node's id (non-zero); Peers maps every node's id, this one's
	// included, to the address of its gRPC server (which serves RaftTransport).
	NodeID uint64
	Peers  map[uint64]string
	// DialOptions are how peers are dialed (TLS, token); none dials plaintext.
	DialOptions []grpc.DialOption
	// Tick is the raft tick (default 100 ms; elections after 10 ticks).
	Tick time.Duration
	// ProposeTimeout bounds an append's or an admin call's wait for commit
	// (default 10 s).
	ProposeTimeout time.Duration
}

const (
	raftWALDir = "raft-wal"
	metaGroup  = 1
	// cmdRaftBatches: a log append (flags, leader clock, unstamped frames).
	cmdRaftBatches = 2
	flagSingle     = 1
	// flagLogAppendTime, flagCreateTime (of an append or a marker; the leader sets
	// one): the leader's config said timestamp_type LogAppendTime, or CreateTime, when
	// it proposed the entry; every replica stamps the leader's clock by it, not by its
	// own config at apply. An entry with neither was written before they existed and
	// is applied by the replica's config, as it was then (entryLogAppendTime).
	flagLogAppendTime = 2
	flagCreateTime    = 4
	// cmdRaftMarker: a transaction marker (flags, leader clock, producer id, producer
	// epoch, coordinator epoch), written by each replica at apply.
	cmdRaftMarker = 3
	flagCommit    = 1
	raftMarkerLen = 1 + 1 + 8 + 8 + 2 + 4
	// cmdRaftTrim: DeleteRecords (flags, leader clock, the new log start or -1 for the
	// end of the log at apply), applied by each replica.
	cmdRaftTrim = 4
	raftTrimLen = 1 + 1 + 8 + 8
)

type raftState struct {
	s    *Store
	opts RaftOptions
	w    *wal.WAL
	rp   *raftnode.Replay
	node *raftnode.Node
	tr   *raftnode.Transport
	once sync.Once
	// commits: per channel group, the commit index its WAL replay held (Open waits
	// until it is applied again).
	cmu     sync.Mutex
	commits map[uint64]uint64
	// bmu guards the barrier batcher (barrier): whether a barrier proposal is under
	// way and the callers waiting for the next one.
	bmu      sync.Mutex
	bRunning bool
	bWaiting []chan error
	// ckpts are the groups' checkpoints (raftckpt.go), guarded by Store.ckptMu.
	ckpts map[uint64]raftCheckpoint
	// skipCloseCheckpoint: Close writes no last checkpoint (tests: a crash's state).
	skipCloseCheckpoint bool
}

// prepareRaft checks raft mode's options and fills their defaults (before the data
// directory is touched).
func prepareRaft(opts *Options) error {
	r := opts.Raft
	if opts.WAL || opts.FsyncInterval > 0 {
		return fmt.Errorf("%w: raft mode has its own write-ahead log; it takes neither WAL mode nor an fsync interval", ErrInvalidArgument)
	}
	if r.NodeID == 0 || r.Peers[r.NodeID] == "" {
		return fmt.Errorf("%w: raft node id %d is not among the peers", ErrInvalidArgument, r.NodeID)
	}
	if r.ProposeTimeout <= 0 {
		r.ProposeTimeout = 10 * time.Second
	}
	return nil
}

// resetChannels empties the channels directory: raft mode rebuilds it from the WAL.
func (s *Store) resetChannels() error {
	if err := os.RemoveAll(s.channelsDir()); err != nil {
		return err
	}
	return os.MkdirAll(s.channelsDir(), 0o755)
}

func (s *Store) openRaft() error {
	o := *s.opts.Raft
	r := &raftState{s: s, opts: o, rp: raftnode.NewReplay(), commits: map[uint64]uint64{}, ckpts: map[uint64]raftCheckpoint{}}
	for g, c := range s.raftResume {
		r.ckpts[g] = c
	}
	w, err := wal.Open(filepath.Join(s.dir, raftWALDir), wal.Options{SegmentBytes: s.opts.WALFileBytes,
		ReplayEntry: r.rp.Entry, ReplayHardState: r.rp.HardState}, s.log)
	if err != nil {
		return err
	}
	r.w = w
	r.node, err = raftnode.New(raftnode.Config{ID: o.NodeID, Peers: o.Peers, Tick: o.Tick, Log: s.log}, w, r.rp, nil)
	if err != nil {
		_ = w.Close()
		return err
	}
	r.tr = raftnode.NewTransport(o.NodeID, o.Peers, r.node, o.DialOptions, s.log)
	r.node.SetSender(r.tr)
	metaCommit := r.rp.Commit(metaGroup)
	s.raft = r
	// The channels kept from the last run resume at their checkpoints, before the
	// metadata group's entries above its own are applied again.
	for _, l := range s.logs {
		c := r.ckpts[l.wal.group]
		l.wal.ckptIndex, l.wal.ckptNext = c.index, c.next
		if err := r.addGroupAt(l, c); err != nil {
			s.raft = nil
			r.node.Close()
			_ = w.Close()
			return fmt.Errorf("raft group of channel %s: %w", l.name, err)
		}
	}
	if err := r.node.AddGroup(metaGroup, metaSM{s}, r.ckpts[metaGroup].restart()); err != nil {
		s.raft = nil
		r.node.Close()
		_ = w.Close()
		return err
	}
	if err := r.tr.Start(); err != nil {
		return err
	}
	r.node.Start()
	// Apply what the WAL says was committed before answering anything.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.node.WaitApplied(ctx, metaGroup, metaCommit); err != nil {
		return fmt.Errorf("replay of the metadata group: %w", err)
	}
	r.cmu.Lock()
	commits := make(map[uint64]uint64, len(r.commits))
	for g, c := range r.commits {
		commits[g] = c
	}
	r.cmu.Unlock()
	for g, c := range commits {
		if err := r.node.WaitApplied(ctx, g, c); err != nil && !errors.Is(err, raftnode.ErrNoGroup) {
			return fmt.Errorf("replay of group %d: %w", g, err)
		}
	}
	return nil
}

func (r *raftState) stop() {
	r.once.Do(func() {
		r.tr.Close()
		r.node.Close()
	})
}

// StopReplication ends raft mode's peer streams and its groups (a shutdown's first
// step: the streams would hold a graceful gRPC stop); appends still waiting for commit
// fail with ErrClosed. Nothing in the default mode.
func (s *Store) StopReplication() {
	if s.raft != nil {
		s.raft.stop()
	}
}

// RaftTransport is raft mode's transport, to register on the node's gRPC server
// (nil when raft mode is off).
func (s *Store) RaftTransport() *raftnode.Transport {
	if s.raft == nil {
		return nil
	}
	return s.raft.tr
}

// RaftLeader is the leader of channel name's group as this node knows it: node id
// (0: none known), address and term (the Kafka leader epoch). Errors: ErrNotFound,
// ErrInvalidArgument (raft mode off).
func (s *Store) RaftLeader(name string) (uint64, string, uint64, error) {
	if s.raft == nil {
		return 0, "", 0, fmt.Errorf("%w: raft mode is off", ErrInvalidArgument)
	}
	l, err := s.Get(name)
	if err != nil {
		return 0, "", 0, err
	}
	id, addr, term, err := s.raft.node.Leader(l.wal.group)
	if err != nil {
		return 0, "", 0, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return id, addr, term, nil
}

// notLeaderError is ErrNotLeader for what (a channel, or the metadata group), worded
// for clients: the channel's name and the leader's node and address, not raft's group
// id; it unwraps to ErrNotLeader and the *raftnode.NotLeaderError.
type notLeaderError struct {
	what string
	nle  *raftnode.NotLeaderError
}

func (e *notLeaderError) Error() string {
	if e.nle.Leader == 0 {
		return fmt.Sprintf("%s: %s has no leader yet (an election is under way, or fewer than a majority of nodes are up)", ErrNotLeader, e.what)
	}
	return fmt.Sprintf("%s: %s is led by node %d at %s", ErrNotLeader, e.what, e.nle.Leader, e.nle.Addr)
}

func (e *notLeaderError) Unwrap() []error { return []error{ErrNotLeader, e.nle} }

// raftErr maps raftnode errors of a call on what (a channel's name, or "the metadata
// group") to the store's.
func raftErr(err error, what string) error {
	var nle *raftnode.NotLeaderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nle):
		return &notLeaderError{what: what, nle: nle}
	case errors.Is(err, raftnode.ErrTimeout), errors.Is(err, raftnode.ErrLeadershipLost), errors.Is(err, raftnode.ErrDropped):
		return fmt.Errorf("%w: %w", ErrNotReplicated, err)
	case errors.Is(err, raftnode.ErrClosed):
		return ErrClosed
	case errors.Is(err, raftnode.ErrNoGroup):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}

func (r *raftState) propose(group uint64, payload []byte) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProposeTimeout)
	defer cancel()
	res, err := r.node.Propose(ctx, group, payload)
	if err != nil {
		return nil, raftErr(err, "the metadata group")
	}
	return res, nil
}

// metaCmd is an entry of the metadata group.
type metaCmd struct {
	Op          string        `json:"op"` // "create" | "delete" | "config" | "barrier"
	Name        string        `json:"name"`
	Kind        Kind          `json:"kind,omitempty"`
	Config      ChannelConfig `json:"config"`
	Mask        []string      `json:"mask,omitempty"` // "config": MergeConfig's mask
	IfNotExists bool          `json:"if_not_exists,omitempty"`
	IfExists    bool          `json:"if_exists,omitempty"`
	NowMs       int64         `json:"now_ms"` // the leader's clock: the creation time
}

type createResult struct {
	l       *Log
	created bool
}

func (s *Store) raftCreate(name string, kind Kind, cfg ChannelConfig, ifNotExists bool) (*Log, bool, error) {
	if kind == KindQueue {
		// A queue's delivery state (queues.db) is not replicated yet (step 5).
		return nil, false, s.raftRefuse("a queue")
	}
	b, err := json.Marshal(metaCmd{Op: "create", Name: name, Kind: kind, Config: cfg, IfNotExists: ifNotExists, NowMs: s.nowMs()})
	if err != nil {
		return nil, false, err
	}
	res, err := s.raft.propose(metaGroup, b)
	if err != nil {
		return nil, false, err
	}
	cr := res.(createResult)
	return cr.l, cr.created, nil
}

func (s *Store) raftDelete(name string, ifExists bool) error {
	b, err := json.Marshal(metaCmd{Op: "delete", Name: name, IfExists: ifExists, NowMs: s.nowMs()})
	if err != nil {
		return err
	}
	_, err = s.raft.propose(metaGroup, b)
	return err
}

// GetConfirmed is Get, except that in raft mode a channel this node does not hold is
// first confirmed absent through the metadata group: this node (which must lead the
// group) commits and applies a no-op entry, so every create committed before the call
// is applied here too, then looks again. A lagging replica thus never answers
// "no such channel" for one the cluster has. Errors: those of Get; in raft mode also
// ErrNotLeader (this node does not lead the metadata group; the error names the
// leader, for grpcx.LeaderConn to follow), ErrNotReplicated (no quorum within the
// propose timeout) and ErrClosed.
func (s *Store) GetConfirmed(name string) (*Log, error) {
	l, err := s.Get(name)
	if s.raft == nil || !errors.Is(err, ErrNotFound) {
		return l, err
	}
	if err := s.raft.barrier(); err != nil {
		return nil, err
	}
	return s.Get(name)
}

// GetConfirmedAll is GetConfirmed of every name (logs[i] and errs[i] answer
// names[i]), with one barrier for all the names this node does not hold, so a request
// naming many absent channels (a WriteTxnMarkers of a deleted topic's partitions)
// waits for one commit round, not one per name.
func (s *Store) GetConfirmedAll(names []string) (logs []*Log, errs []error) {
	logs, errs = make([]*Log, len(names)), make([]error, len(names))
	missing := false
	for i, n := range names {
		logs[i], errs[i] = s.Get(n)
		missing = missing || errors.Is(errs[i], ErrNotFound)
	}
	if s.raft == nil || !missing {
		return logs, errs
	}
	berr := s.raft.barrier()
	for i, n := range names {
		if !errors.Is(errs[i], ErrNotFound) {
			continue
		}
		if berr != nil {
			errs[i] = berr
			continue
		}
		logs[i], errs[i] = s.Get(n)
	}
	return logs, errs
}

// barrier commits and applies a no-op entry of the metadata group proposed after the
// call began (so every entry committed before the call is applied here when it
// returns). Concurrent callers share one proposal: at most one is under way, and the
// callers that arrive meanwhile wait for the next, which one proposal serves for all
// of them; a flood of writes naming absent channels thus costs one entry per commit
// round, not one per write. A caller waits at most the propose timeout.
func (r *raftState) barrier() error {
	ch := make(chan error, 1)
	r.bmu.Lock()
	r.bWaiting = append(r.bWaiting, ch)
	if !r.bRunning {
		r.bRunning = true
		go r.runBarriers()
	}
	r.bmu.Unlock()
	t := time.NewTimer(r.opts.ProposeTimeout)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		return fmt.Errorf("%w: %w", ErrNotReplicated, raftnode.ErrTimeout)
	}
}

// runBarriers proposes one barrier for every batch of waiting callers until none is
// left.
func (r *raftState) runBarriers() {
	for {
		r.bmu.Lock()
		batch := r.bWaiting
		r.bWaiting = nil
		if len(batch) == 0 {
			r.bRunning = false
			r.bmu.Unlock()
			return
		}
		r.bmu.Unlock()
		b, err := json.Marshal(metaCmd{Op: "barrier", NowMs: r.s.nowMs()})
		if err == nil {
			_, err = r.propose(metaGroup, b)
		}
		for _, ch := range batch {
			ch <- err
		}
	}
}

// raftUpdateConfig proposes a config change of channel name to the metadata group:
// each replica merges it into the config it holds at that point of the group's order
// (so concurrent masked updates of different fields both land) and persists it.
func (s *Store) raftUpdateConfig(name string, in ChannelConfig, mask []string) error {
	b, err := json.Marshal(metaCmd{Op: "config", Name: name, Config: in, Mask: mask, NowMs: s.nowMs()})
	if err != nil {
		return err
	}
	_, err = s.raft.propose(metaGroup, b)
	return err
}

// metaSM applies the metadata group's entries: creates, deletes and config changes,
// on every node.
type metaSM struct{ s *Store }

func (m metaSM) Apply(index, term uint64, payload []byte) (any, error) {
	s := m.s
	var c metaCmd
	if err := json.Unmarshal(payload, &c); err != nil {
		s.log.Error("undecodable metadata entry skipped", zap.Uint64("index", index), zap.Error(err))
		return nil, fmt.Errorf("%w: metadata entry %d: %v", ErrInternal, index, err)
	}
	if c.Op != "barrier" {
		// A change is durable once applied: checkpoint it now, so that a restart
		// applies again at most this entry, to a state that may already have it.
		defer s.raft.checkpointMeta(index, term)
	}
	switch c.Op {
	case "create":
		group := raftnode.GroupID(c.Name, index)
		s.mu.RLock()
		l := s.logs[c.Name]
		s.mu.RUnlock()
		if l != nil && l.wal.group == group {
			// This very entry, applied before a restart (its group resumed at open).
			return createResult{l: l, created: true}, nil
		}
		l, created, err := s.createAt(c.Name, c.Kind, c.Config, c.IfNotExists, c.NowMs, group)
		if err != nil {
			return nil, err
		}
		if created {
			if err := s.raft.addLogGroup(l); err != nil {
				s.log.Error("raft group of a created channel", zap.String("channel", c.Name), zap.Error(err))
				return nil, fmt.Errorf("%w: %v", ErrInternal, err)
			}
		}
		return createResult{l: l, created: created}, nil
	case "delete":
		s.mu.RLock()
		l := s.logs[c.Name]
		s.mu.RUnlock()
		if err := s.deleteLocal(c.Name, c.IfExists); err != nil {
			return nil, err
		}
		if l != nil {
			s.raft.node.RemoveGroup(l.wal.group)
			s.raft.forget(l.wal.group)
		}
		return nil, nil
	case "config":
		s.mu.RLock()
		l := s.logs[c.Name]
		s.mu.RUnlock()
		if l == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, c.Name)
		}
		cfg, err := MergeConfig(l.Config(), c.Config, c.Mask)
		if err != nil {
			return nil, err
		}
		if err := cfg.validate(s.minSegmentBytes()); err != nil {
			return nil, err
		}
		return nil, l.setConfig(cfg)
	case "barrier":
		// Changes nothing: its apply means every earlier entry is applied here.
		return nil, nil
	}
	return nil, fmt.Errorf("%w: metadata op %q", ErrInternal, c.Op)
}

func (r *raftState) addLogGroup(l *Log) error {
	return r.addGroupAt(l, raftCheckpoint{})
}

// addGroupAt starts channel l's group at checkpoint c (the zero one for a new channel)
// and records the commit index its WAL replay holds, for Open to wait for.
func (r *raftState) addGroupAt(l *Log, c raftCheckpoint) error {
	g := l.wal.group
	commit := r.rp.Commit(g)
	if err := r.node.AddGroup(g, &logSM{l: l, last: raftnode.Floor{Index: c.index, Term: c.term}}, c.restart()); err != nil {
		return err
	}
	r.cmu.Lock()
	r.commits[g] = commit
	r.cmu.Unlock()
	return nil
}

// raftBeginAppend checks b as the leader and proposes it; Wait waits for its apply.
func (l *Log) raftBeginAppend(b []byte, o AppendOptions) *PendingAppend {
	hdrs, err := l.checkBatches(b, o, nil)
	now := l.st.nowMs()
	if err == nil {
		err = checkTimestamps(l.cfg.Load(), hdrs, now)
	}
	if err != nil {
		return &PendingAppend{l: l, err: err}
	}
	// One copy of b, straight into the entry (the request's buffer is the caller's).
	data := make([]byte, raftnode.HeaderLen+10+len(b))
	payload := data[raftnode.HeaderLen:]
	payload[0] = cmdRaftBatches
	if o.SingleBatch {
		payload[1] |= flagSingle
	}
	payload[1] |= l.timestampFlag()
	binary.BigEndian.PutUint64(payload[2:], uint64(now))
	copy(payload[10:], b)
	return &PendingAppend{l: l, raft: l.st.raft.node.BeginOwned(l.wal.group, data)}
}

// raftBeginMarker proposes transaction marker m; Wait waits for its apply, where the
// producer's epoch is checked and the marker written (or found a duplicate) on every
// replica alike.
func (l *Log) raftBeginMarker(m TxnMarker) *PendingAppend {
	payload := make([]byte, raftMarkerLen)
	payload[0] = cmdRaftMarker
	if m.Commit {
		payload[1] |= flagCommit
	}
	payload[1] |= l.timestampFlag()
	binary.BigEndian.PutUint64(payload[2:], uint64(l.st.nowMs()))
	binary.BigEndian.PutUint64(payload[10:], uint64(m.ProducerID))
	binary.BigEndian.PutUint16(payload[18:], uint16(m.ProducerEpoch))
	binary.BigEndian.PutUint32(payload[20:], uint32(m.CoordinatorEpoch))
	return &PendingAppend{l: l, raft: l.st.raft.node.Begin(l.wal.group, payload)}
}

// raftDeleteRecords checks before against this node's log (the leader's) and
// proposes it; every replica moves its log start when it applies the entry, where -1
// is its end of log at that point, the same offset on each. It returns the log start
// after the entry.
func (l *Log) raftDeleteRecords(before int64) (int64, error) {
	if hw := l.hw.Load().next; before < -1 || before > hw {
		return l.logStart.Load(), fmt.Errorf("%w: %d outside [0, %d]", ErrOutOfRange, before, hw)
	}
	payload := make([]byte, raftTrimLen)
	payload[0] = cmdRaftTrim
	binary.BigEndian.PutUint64(payload[2:], uint64(l.st.nowMs()))
	binary.BigEndian.PutUint64(payload[10:], uint64(before))
	ctx, cancel := context.WithTimeout(context.Background(), l.st.raft.opts.ProposeTimeout)
	defer cancel()
	res, err := l.st.raft.node.Propose(ctx, l.wal.group, payload)
	if err != nil {
		return l.logStart.Load(), raftErr(err, "channel "+l.name)
	}
	return res.(int64), nil
}

// raftRetention, on the channel's leader, proposes as a DeleteRecords entry the log
// start that time and size retention leave on this node's segments (the base of the
// first segment they keep), so every replica drops the same records. Followers do
// nothing; a failed proposal is logged and retried at the next run.
func (l *Log) raftRetention(nowMs int64) {
	r := l.st.raft
	if leader, _, _, err := r.node.Leader(l.wal.group); err != nil || leader != r.opts.NodeID {
		return
	}
	l.mu.Lock()
	start := l.logStart.Load()
	target := start
	if !l.closed {
		if k := l.retentionCutLocked(nowMs, true); k > 0 {
			target = max(start, l.segs[k].base)
		}
	}
	l.mu.Unlock()
	if target <= start {
		return
	}
	if _, err := l.raftDeleteRecords(target); err != nil {
		l.log.Warn("retention: log start not replicated", zap.Int64("log_start", target), zap.Error(err))
	}
}

func (p *PendingAppend) raftWait() (AppendResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.l.st.raft.opts.ProposeTimeout)
	defer cancel()
	res, err := p.raft.Wait(ctx)
	if err != nil {
		return AppendResult{}, raftErr(err, "channel "+p.l.name)
	}
	r := res.(AppendResult)
	if !r.Duplicate {
		p.l.st.metrics.Appends.Inc()
	}
	return r, nil
}

// timestampFlag is the entry flag of the leader's timestamp_type.
func (l *Log) timestampFlag() byte {
	if l.logAppendTime() {
		return flagLogAppendTime
	}
	return flagCreateTime
}

// entryLogAppendTime reports whether an entry with flags is stamped with the append
// time: as its leader's config said, or for an entry from before the flags, as this
// replica's config says.
func (l *Log) entryLogAppendTime(flags byte) bool {
	if flags&(flagLogAppendTime|flagCreateTime) == 0 {
		return l.logAppendTime()
	}
	return flags&flagLogAppendTime != 0
}

// logSM applies a channel group's committed appends (on the group's apply goroutine).
type logSM struct {
	l *Log
	// buf is the stamping copy of the last append, reused by the next one: nothing
	// keeps the frames once writeChecked has written them.
	buf []byte
	// last is the last entry applied (raft's empty entries never reach Apply: the
	// state after last is the state after them too).
	last raftnode.Floor
}

// maxApplyBuf is the largest stamping copy a logSM keeps between appends.
const maxApplyBuf = 4 << 20

func (m *logSM) Apply(index, term uint64, payload []byte) (any, error) {
	defer func() { m.last = raftnode.Floor{Index: index, Term: term} }()
	l := m.l
	if res, ok, err := l.applyRaftOther(term, payload); ok {
		if n, _ := res.(int); err == nil && n > 0 && payload[0] == cmdRaftExpire {
			// Producer state is rebuilt from the segments at start, which still hold
			// the dropped producers' batches: make the drops durable at once.
			if err := l.st.raft.sealProducers(l, raftnode.Floor{Index: index, Term: term}); err != nil {
				l.log.Error("checkpoint after producer expiry", zap.Error(err))
				return nil, fmt.Errorf("%w: checkpoint: %v", ErrStorage, err)
			}
		}
		return res, err
	}
	if len(payload) == raftMarkerLen && payload[0] == cmdRaftMarker {
		if err := l.assignEpoch(term); err != nil {
			return nil, err
		}
		mk := TxnMarker{
			Commit:           payload[1]&flagCommit != 0,
			ProducerID:       int64(binary.BigEndian.Uint64(payload[10:])),
			ProducerEpoch:    int16(binary.BigEndian.Uint16(payload[18:])),
			CoordinatorEpoch: int32(binary.BigEndian.Uint32(payload[20:])),
		}
		res, _, err := l.beginTxnMarker(mk, int64(binary.BigEndian.Uint64(payload[2:])), uint32(term), l.entryLogAppendTime(payload[1]))
		return res, err
	}
	if len(payload) == raftTrimLen && payload[0] == cmdRaftTrim {
		// Segments may go: checkpoint first, so that the cut at the next start is at
		// an offset of the active segment, which DeleteRecords keeps.
		if err := l.st.raft.checkpointLog(l, m.last); err != nil {
			l.log.Error("checkpoint before DeleteRecords", zap.Error(err))
			return nil, fmt.Errorf("%w: checkpoint: %v", ErrStorage, err)
		}
		start, err := l.deleteRecords(int64(binary.BigEndian.Uint64(payload[10:])))
		if err == nil {
			err = l.epochs.trimStart(start)
		}
		return start, err
	}
	if len(payload) < 10 || payload[0] != cmdRaftBatches {
		l.log.Error("unknown raft entry skipped", zap.Uint64("index", index))
		return nil, fmt.Errorf("%w: entry %d", ErrInternal, index)
	}
	o := AppendOptions{SingleBatch: payload[1]&flagSingle != 0, replica: true}
	now := int64(binary.BigEndian.Uint64(payload[2:]))
	// Stamped in a copy: the entry stays in raft's log unchanged (the loop may be
	// sending it to a follower meanwhile).
	b := append(m.buf[:0], payload[10:]...)
	if cap(b) <= maxApplyBuf {
		m.buf = b
	}
	for p := 0; p+batchHeaderLen <= len(b); {
		n, err := frameLen(b[p:])
		if err != nil {
			break // checkBatches reports it
		}
		binary.BigEndian.PutUint32(b[p+offPartitionLeaderEpoch:], uint32(term))
		p += n
	}
	hdrs, err := l.checkBatches(b, o, nil)
	if err != nil {
		return nil, err
	}
	if err := l.assignEpoch(term); err != nil {
		return nil, err
	}
	res, _, err := l.writeChecked(b, hdrs, now, l.entryLogAppendTime(payload[1]))
	return res, err
}

// raftRefuse refuses, in raft mode, a change that is not replicated yet (it would make
// replicas diverge). Errors: ErrInvalidArgument.
func (s *Store) raftRefuse(what string) error {
	if s.raft == nil {
		return nil
	}
	return fmt.Errorf("%w: %s is not replicated in raft mode yet (issue 16)", ErrInvalidArgument, what)
}
