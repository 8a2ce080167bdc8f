// Package raftnode runs storage-core's Raft groups (issue 16, replication steps 2 and
// 3): one go.etcd.io/raft/v3 RawNode per group (a replicated channel), all driven by one
// loop per node with one ticker, with AsyncStorageWrites: a group's MsgStorageAppend goes to
// the node WAL (internal/wal), shared by every group so their appends share fsyncs, and
// its responses are delivered once the WAL reports the append durable; MsgStorageApply
// goes to the group's apply goroutine, which hands each committed data entry to the
// group's StateMachine and answers the proposer. raft's read side is a
// raft.MemoryStorage per group, fed at start from the WAL replay (Replay), from the
// group's Restart point on.
//
// Compaction without snapshots (step 4, first part): a leader tells the other nodes
// the index every voter has persisted the log up to (Compacted; RaftMessage's
// compact_index), which no leader will ever need to send again; each node drops those
// entries from its MemoryStorage, and its caller may set the group's WAL floor to the
// smaller of that and its own checkpoint.
//
// Membership is static (step 2): every configured peer is a voter of every group, and a
// group starts from the same synthetic snapshot on every node (index 1, term 1, the
// peers as voters), so no bootstrap entries are logged. Proposals are accepted on the
// leader only (proposal forwarding is off): elsewhere Propose answers *NotLeaderError
// with the leader's id and address, for the caller to route. A proposal is answered
// only by the apply of its own committed entry (entries carry the proposer's node id and
// a proposal id unique to the node's run), so a deposed leader's uncommitted tail is
// never answered as a success; it ends in ErrLeadershipLost, ErrTimeout or ErrClosed.
//
// Quiescence (step 3, CockroachDB's scheme on etcd raft's own mechanisms): a leader
// whose group had no proposal for 2 election timeouts, with its log committed, applied
// and matched by every live follower, sends each follower one last MsgHeartbeat marked
// quiesce and stops ticking the group; a follower whose term, commit index and leader
// match the marked heartbeat stops ticking it too, without stepping it (otherwise it
// steps it as a plain heartbeat and asks the leader to keep ticking: RaftMessage.wake).
// Any proposal or other message wakes a quiesced group (a heartbeat's answer to a
// quiesced leader only if raft then has something to send); a follower woken by a
// node other than its leader wakes the leader too (wake), so it does not campaign
// against a leader that is alive but quiet. Idle groups send nothing; instead every node sends
// every peer a batch at least once per LivenessInterval (an empty one when it has
// nothing else), and a peer no batch came from for the election timeout is dead: the
// groups it led forget it (raft's ForgetLeader, so PreVote and CheckQuorum's lease do
// not hold the election back) and the lowest-id live node campaigns for them; the
// groups this node leads wake on every liveness change of a peer (CheckQuorum runs
// again, and a returning follower is caught up before the group quiesces again).
package raftnode

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/wal"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"go.uber.org/zap"
)

// Sentinel errors.
var (
	// ErrTimeout: the proposal was not applied before the caller's deadline. Its outcome
	// is unknown (it may still commit): Kafka's REQUEST_TIMED_OUT.
	ErrTimeout = errors.New("raftnode: proposal not committed within the timeout")
	// ErrLeadershipLost: this node stopped leading the group while the proposal was
	// pending. Its outcome is unknown, as for ErrTimeout.
	ErrLeadershipLost = errors.New("raftnode: leadership lost before the proposal committed")
	// ErrDropped: raft refused the proposal (e.g. a leader transfer is under way).
	ErrDropped = errors.New("raftnode: proposal dropped by raft")
	// ErrNoGroup: the node has no such group.
	ErrNoGroup = errors.New("raftnode: no such group")
	// ErrClosed: the node is closed (or its WAL failed).
	ErrClosed = errors.New("raftnode: closed")
)

// NotLeaderError answers a proposal made on a node that does not lead the group.
// Leader is 0 (Addr "") while no leader is known (an election is under way).
type NotLeaderError struct {
	Group  uint64
	Leader uint64
	Addr   string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("raftnode: group %d has no leader (election under way)", e.Group)
	}
	return fmt.Sprintf("raftnode: not the leader of group %d; the leader is node %d at %s", e.Group, e.Leader, e.Addr)
}

// StateMachine applies one group's committed data entries, in index order, on the
// group's apply goroutine. Raft's empty entries are not passed. payload is the
// proposer's bytes (aliasing the entry: copy what outlives the call); term is the
// entry's term (the Kafka leader epoch). The result and error go back to the proposer
// when the proposal was made on this node; Apply must be deterministic so every replica
// reaches the same state.
type StateMachine interface {
	Apply(index, term uint64, payload []byte) (any, error)
}

// Sender carries a batch of raft messages to another node (the Transport).
type Sender interface {
	Send(to uint64, msgs []*storagev1.RaftMessage)
}

// Config configures a Node.
type Config struct {
	// ID is this node's Raft id (non-zero, unique in the cluster).
	ID uint64
	// Peers maps every node of the cluster (this one included) to its address. Every
	// peer is a voter of every group (static membership).
	Peers map[uint64]string
	// Tick is the raft tick (default 100 ms); ElectionTicks (default 10) and
	// HeartbeatTicks (default 1) are in ticks.
	Tick           time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// KeepEntries is how many applied entries each group's MemoryStorage keeps for
	// followers that fall behind (default 10,000), and KeepBytes how many bytes of
	// entry data at most (default 64 MiB: 10,000 produce requests of 1 MiB would be
	// 10 GB of heap per group); older ones are dropped every CompactTicks ticks
	// (default 50), on a leader never past what a follower lacks. A follower behind
	// the dropped prefix needs a snapshot (not built yet, step 4). Entries up to the
	// Compacted point are dropped every CompactTicks too, whatever these say.
	KeepEntries  uint64
	KeepBytes    uint64
	CompactTicks int
	// LivenessInterval is how often, at most, the node sends each peer an empty batch
	// when it has nothing else for it (default a quarter of the election timeout,
	// ElectionTicks × Tick: 250 ms with the defaults). A peer no batch came from for
	// the election timeout is dead.
	LivenessInterval time.Duration
	// DisableQuiesce keeps every group ticking and sends no liveness batches (step 2's
	// behaviour, the peer figure of the idle-channel benchmark).
	DisableQuiesce bool
	Log            *zap.Logger
}

// Stats are a node's counters (tests and benchmarks).
type Stats struct {
	// Groups is the number of groups; Quiesced how many of them do not tick.
	Groups, Quiesced int
	// Ticks counts the loop's ticks; GroupTicks the RawNode ticks over all groups.
	Ticks, GroupTicks uint64
	// Applies counts the entries handed to the groups' StateMachines since New (a
	// restart from a checkpoint applies only the entries above it again).
	Applies uint64
}

// Floor is a log position: an entry's index and term.
type Floor struct{ Index, Term uint64 }

// Restart is where a group resumes on this node (AddGroup); the zero Restart is a group
// that starts from nothing.
type Restart struct {
	// Applied is the last entry whose effects the StateMachine holds durably (a
	// checkpoint): raft hands it the entries after it only.
	Applied Floor
	// Floor is the entry up to which the node WAL may have dropped the group's entries
	// (the smaller of Applied and a Compacted point, as the caller last set with
	// wal.SetFloor): the group's log restarts after it.
	Floor Floor
}

type itemKind uint8

const (
	itemRecv itemKind = iota + 1
	itemPropose
	itemDurable
	itemStep
	itemUnreachable
	itemRemove
	itemAdd
	itemWake
	itemFunc
	itemCompact
)

type item struct {
	kind itemKind
	g    *group
	m    raftpb.Message
	msgs []raftpb.Message
	p    *proposal
	data []byte
	peer uint64
	// quiesce: an itemRecv of a heartbeat marked quiesce.
	quiesce bool
	// fn: an itemFunc's call, run on the loop goroutine (replicas.go).
	fn func()
	// compact: an itemCompact's point.
	compact Floor
}

type proposal struct {
	id    uint64
	group uint64
	res   any
	err   error
	done  chan struct{}
	once  sync.Once
}

func (p *proposal) finish(res any, err error) {
	p.once.Do(func() {
		p.res, p.err = res, err
		close(p.done)
	})
}

type pendingAppend struct {
	lsn uint64
	m   raftpb.Message
}

type group struct {
	id   uint64
	n    *Node
	rn   *raft.RawNode // loop goroutine only
	ms   *raft.MemoryStorage
	sm   StateMachine
	lead atomic.Uint64
	term atomic.Uint64
	// leading: the loop's view of whether this node leads; removed: RemoveGroup ran
	// (loop goroutine only).
	leading bool
	removed bool
	// quiesced: the group does not tick; idle: ticks since its last proposal, wake or
	// leadership change (loop goroutine only).
	quiesced bool
	idle     int

	// amu guards appends: MsgStorageAppends handed to the WAL, in lsn order.
	amu     sync.Mutex
	appends []pendingAppend
	// hsTerm and hsVote are the term and vote of the last hard state handed to the
	// WAL (loop goroutine only).
	hsTerm, hsVote uint64

	// qmu guards the apply queue.
	qmu     sync.Mutex
	qcond   *sync.Cond
	applyQ  []raftpb.Message
	stopped bool
	// applyMu is held while an entry is applied and applied / appliedTerm (the last
	// applied entry) move past it (WithApplied).
	applyMu     sync.Mutex
	applied     atomic.Uint64
	appliedTerm atomic.Uint64
	done        chan struct{}

	// cmu guards compacted: the point up to which every voter has persisted the log
	// (the leader's word, RaftMessage.compact_index; or this node's, leading).
	cmu       sync.Mutex
	compacted Floor
}

// Durable delivers the appends the WAL made durable up to lsn (wal.Waiter).
func (g *group) Durable(lsn uint64) {
	g.amu.Lock()
	k := 0
	for k < len(g.appends) && g.appends[k].lsn <= lsn {
		k++
	}
	ready := append([]pendingAppend(nil), g.appends[:k]...)
	n := copy(g.appends, g.appends[k:])
	g.appends = g.appends[:n]
	g.amu.Unlock()
	for _, a := range ready {
		g.n.post(item{kind: itemDurable, g: g, m: a.m})
	}
}

// Failed stops the node: after a failed WAL write nothing may be acknowledged.
func (g *group) Failed(err error) { g.n.fail(err) }

// Node is one storage-core node's set of Raft groups.
type Node struct {
	cfg    Config
	log    *zap.Logger
	rlog   raft.Logger
	wal    *wal.WAL
	replay *Replay
	sender Sender

	mu     sync.Mutex
	groups map[uint64]*group
	inbox  []item
	err    error

	kick    chan struct{}
	closed  chan struct{}
	done    chan struct{}
	once    sync.Once
	started atomic.Bool

	pmu   sync.Mutex
	props map[uint64]*proposal
	base  uint64
	seq   atomic.Uint64

	// ticking are the groups that are not quiesced; alive is the loop's view of each
	// peer's liveness and sentAt when it last sent the peer a batch (loop goroutine
	// only). heard is when a batch last came from each peer (unix ns; fixed keys).
	ticking map[*group]struct{}
	alive   map[uint64]bool
	sentAt  map[uint64]time.Time
	heard   map[uint64]*atomic.Int64

	ticks, groupTicks, applies atomic.Uint64
	quiesced                   atomic.Int64
}

// New returns a Node that persists through w (opened with replay's callbacks; the
// caller owns and closes it) and sends through sender. Call Start after adding the
// groups that exist at start (AddGroup), or any time: groups may be added later.
func New(cfg Config, w *wal.WAL, replay *Replay, sender Sender) (*Node, error) {
	if cfg.ID == 0 {
		return nil, errors.New("raftnode: node id 0")
	}
	if _, ok := cfg.Peers[cfg.ID]; !ok {
		return nil, fmt.Errorf("raftnode: node %d is not among the peers", cfg.ID)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.KeepEntries == 0 {
		cfg.KeepEntries = 10000
	}
	if cfg.KeepBytes == 0 {
		cfg.KeepBytes = 64 << 20
	}
	if cfg.CompactTicks <= 0 {
		cfg.CompactTicks = 50
	}
	if cfg.LivenessInterval <= 0 {
		cfg.LivenessInterval = max(cfg.Tick, time.Duration(cfg.ElectionTicks)*cfg.Tick/4)
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	lg := cfg.Log.With(zap.Uint64("node", cfg.ID))
	n := &Node{cfg: cfg, log: lg, rlog: raftLogger{lg.Sugar()}, wal: w, replay: replay, sender: sender,
		groups: map[uint64]*group{}, kick: make(chan struct{}, 1), closed: make(chan struct{}),
		done: make(chan struct{}), props: map[uint64]*proposal{}, base: binary.BigEndian.Uint64(b[:]),
		ticking: map[*group]struct{}{}, alive: map[uint64]bool{}, sentAt: map[uint64]time.Time{},
		heard: map[uint64]*atomic.Int64{}}
	now := time.Now().UnixNano()
	for p := range cfg.Peers {
		if p != cfg.ID {
			n.heard[p] = new(atomic.Int64)
			n.heard[p].Store(now)
			n.alive[p] = true
		}
	}
	return n, nil
}

// SetSender sets the transport (before Start; the Transport needs the Node first).
func (n *Node) SetSender(s Sender) { n.sender = s }

// Start runs the node's loop.
func (n *Node) Start() {
	now := time.Now().UnixNano()
	for _, h := range n.heard {
		h.Store(now)
	}
	n.started.Store(true)
	go n.run()
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	groups := len(n.groups)
	n.mu.Unlock()
	return Stats{Groups: groups, Quiesced: int(n.quiesced.Load()), Ticks: n.ticks.Load(), GroupTicks: n.groupTicks.Load(),
		Applies: n.applies.Load()}
}

// AddGroup starts group id with sm as its state machine, resuming at r (the zero
// Restart for a new group). What the WAL replay holds for the group above r.Floor is
// loaded here (only entries up to the replayed HardState.Commit, or r.Applied if
// later, are ever applied; a longer tail is raft's to keep or replace). A group's log
// starts from the same synthetic snapshot on every node (index 1, term 1, every peer
// a voter), or from one at r.Floor: the entries up to it are persisted by every voter
// (Compacted), so no leader needs to send them. The log restarts at r.Applied instead
// when the WAL ends before it, or when it lacks entries above the floor (it resumes
// above it, or its indices jump: a checkpoint file older than the WAL's last
// truncation, or a log restarted at r.Applied before) but has every one after
// r.Applied: the StateMachine holds the effects of those it lacks. Errors: an id
// already in use, a replay that lacks entries above r.Applied (that would take a
// snapshot: step 4) or whose entry at r.Applied has another term, raft's config
// errors, ErrClosed (the node is closing or failed).
func (n *Node) AddGroup(id uint64, sm StateMachine, r Restart) error {
	voters := make([]uint64, 0, len(n.cfg.Peers))
	for p := range n.cfg.Peers {
		voters = append(voters, p)
	}
	floor := Floor{Index: 1, Term: 1}
	if r.Floor.Index > 1 {
		floor = r.Floor
	}
	snap := floor
	hs, ents := n.replay.take(id)
	for len(ents) > 0 && ents[0].Index <= snap.Index {
		ents = ents[1:]
	}
	if j := lastRun(ents); len(ents) > 0 && ents[j].Index != snap.Index+1 {
		// The WAL resumes above the floor, or jumps: the entries before ents[j] are
		// missing. Those up to r.Applied are in the StateMachine's durable state, so
		// the log can restart there if the WAL has every entry after it.
		missing := snap.Index + 1
		if j > 0 {
			missing = ents[j-1].Index + 1
		}
		if ents[j].Index > r.Applied.Index+1 {
			return fmt.Errorf("raftnode: group %d: the WAL lacks entries %d to %d, above the checkpoint at %d (floor %d; snapshots are not built yet)",
				id, missing, ents[j].Index-1, r.Applied.Index, snap.Index)
		}
		ents = ents[j:]
		for len(ents) > 0 && ents[0].Index <= r.Applied.Index {
			if ents[0].Index == r.Applied.Index && ents[0].Term != r.Applied.Term {
				return fmt.Errorf("raftnode: group %d: the WAL's entry %d has term %d, the checkpoint's term %d", id, r.Applied.Index, ents[0].Term, r.Applied.Term)
			}
			ents = ents[1:]
		}
		n.log.Warn("raft log restarts at the applied entry: the WAL lacks entries below it", zap.Uint64("group", id),
			zap.Uint64("applied", r.Applied.Index), zap.Uint64("floor", snap.Index), zap.Uint64("missing_from", missing))
		snap = r.Applied
	}
	if last := snap.Index + uint64(len(ents)); r.Applied.Index > last {
		n.log.Warn("raft log restarts at the applied entry: the WAL ends before it", zap.Uint64("group", id),
			zap.Uint64("applied", r.Applied.Index), zap.Uint64("wal_last", last))
		snap, ents = r.Applied, nil
	}
	ms := raft.NewMemoryStorage()
	if err := ms.ApplySnapshot(raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{
		Index: snap.Index, Term: snap.Term, ConfState: raftpb.ConfState{Voters: voters}}}); err != nil {
		return err
	}
	if err := ms.Append(ents); err != nil {
		return err
	}
	applied := max(r.Applied.Index, snap.Index)
	hs.Term = max(hs.Term, snap.Term)
	hs.Commit = max(hs.Commit, applied)
	if err := ms.SetHardState(hs); err != nil {
		return err
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID: n.cfg.ID, ElectionTick: n.cfg.ElectionTicks, HeartbeatTick: n.cfg.HeartbeatTicks,
		Storage: ms, Applied: applied, MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256,
		MaxUncommittedEntriesSize: 64 << 20, CheckQuorum: true, PreVote: true,
		AsyncStorageWrites: true, DisableProposalForwarding: true, Logger: n.rlog,
	})
	if err != nil {
		return err
	}
	g := &group{id: id, n: n, rn: rn, ms: ms, sm: sm, done: make(chan struct{}), compacted: floor}
	g.qcond = sync.NewCond(&g.qmu)
	g.applied.Store(applied)
	if applied == r.Applied.Index {
		g.appliedTerm.Store(r.Applied.Term)
	} else {
		g.appliedTerm.Store(snap.Term)
	}
	g.term.Store(hs.Term)
	g.hsTerm, g.hsVote = hs.Term, hs.Vote
	n.mu.Lock()
	if n.err != nil {
		// Closing (or failed): Close has taken, or is about to take, the list of
		// groups whose apply goroutines it stops; one started now would never stop.
		n.mu.Unlock()
		return ErrClosed
	}
	if _, dup := n.groups[id]; dup {
		n.mu.Unlock()
		return fmt.Errorf("raftnode: group %d already exists", id)
	}
	n.groups[id] = g
	n.mu.Unlock()
	n.wal.SetFloor(id, 0)
	go g.applyLoop()
	n.post(item{kind: itemAdd, g: g})
	return nil
}

// lastRun is the position in ents (in index order) where their last run of
// consecutive indices starts.
func lastRun(ents []raftpb.Entry) int {
	for i := len(ents) - 1; i > 0; i-- {
		if ents[i].Index != ents[i-1].Index+1 {
			return i
		}
	}
	return 0
}

// Leader is the group's leader as this node knows it (0 while none is known), its
// address and the node's current term of the group (the Kafka leader epoch).
func (n *Node) Leader(id uint64) (leader uint64, addr string, term uint64, err error) {
	g := n.group(id)
	if g == nil {
		return 0, "", 0, ErrNoGroup
	}
	l := g.lead.Load()
	return l, n.cfg.Peers[l], g.term.Load(), nil
}

func (n *Node) group(id uint64) *group {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.groups[id]
}

// Propose proposes payload to group id and waits until its entry is committed and
// applied here; it returns the StateMachine's answer. Errors: *NotLeaderError, ErrNoGroup,
// ErrDropped, ErrLeadershipLost or ErrTimeout (outcome unknown), ErrClosed, or the
// StateMachine's error.
func (n *Node) Propose(ctx context.Context, id uint64, payload []byte) (any, error) {
	return n.Begin(id, payload).Wait(ctx)
}

// Proposal is a proposal under way (Begin); Wait returns its outcome.
type Proposal struct {
	n   *Node
	p   *proposal
	err error
}

// Begin proposes payload (copied) to group id without waiting: proposals begun one
// after another on a group enter its log in that order. Call Wait exactly once.
func (n *Node) Begin(id uint64, payload []byte) *Proposal {
	data := make([]byte, HeaderLen+len(payload))
	copy(data[HeaderLen:], payload)
	return n.BeginOwned(id, data)
}

// HeaderLen is the room BeginOwned takes at the front of its data: the proposer's node
// id and proposal id, which the apply of the entry reads back.
const HeaderLen = 16

// BeginOwned is Begin of the payload data[HeaderLen:] without copying it (a proposal is
// usually a whole produce request): the node writes its header into data[:HeaderLen]
// and keeps data as the entry, so the caller must not touch data again.
func (n *Node) BeginOwned(id uint64, data []byte) *Proposal {
	if len(data) < HeaderLen {
		return &Proposal{err: fmt.Errorf("raftnode: proposal of %d bytes has no room for its header", len(data))}
	}
	g := n.group(id)
	if g == nil {
		return &Proposal{err: ErrNoGroup}
	}
	if l := g.lead.Load(); l != n.cfg.ID {
		return &Proposal{err: &NotLeaderError{Group: id, Leader: l, Addr: n.cfg.Peers[l]}}
	}
	p := &proposal{id: n.base + n.seq.Add(1), group: id, done: make(chan struct{})}
	binary.BigEndian.PutUint64(data, n.cfg.ID)
	binary.BigEndian.PutUint64(data[8:], p.id)
	n.pmu.Lock()
	n.props[p.id] = p
	n.pmu.Unlock()
	n.post(item{kind: itemPropose, g: g, p: p, data: data})
	return &Proposal{n: n, p: p}
}

// Wait waits until the proposal's entry is applied here, ctx ends or the node closes.
// Errors: as Propose.
func (pr *Proposal) Wait(ctx context.Context) (any, error) {
	if pr.err != nil {
		return nil, pr.err
	}
	n, p := pr.n, pr.p
	defer func() {
		n.pmu.Lock()
		delete(n.props, p.id)
		n.pmu.Unlock()
	}()
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
	case <-n.closed:
		return nil, ErrClosed
	}
}

// WaitApplied waits until group id applied index (e.g. the commit index its WAL
// replay held), ctx ends (ErrTimeout) or the node closes (ErrClosed).
func (n *Node) WaitApplied(ctx context.Context, id, index uint64) error {
	g := n.group(id)
	if g == nil {
		return ErrNoGroup
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for g.applied.Load() < index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
		case <-n.closed:
			return ErrClosed
		case <-t.C:
		}
	}
	return nil
}

// WithApplied calls fn with the index and term of the last entry group id applied,
// while no entry is being applied, so that what fn reads of the StateMachine is the
// state right after that entry (a checkpoint's). Entries keep being applied once fn
// returns; fn must not wait for the group. Errors: ErrNoGroup.
func (n *Node) WithApplied(id uint64, fn func(index, term uint64)) error {
	g := n.group(id)
	if g == nil {
		return ErrNoGroup
	}
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	fn(g.applied.Load(), g.appliedTerm.Load())
	return nil
}

// DurableIndex is the last index of group id's log in this node's WAL, fsynced
// (entries enter the group's MemoryStorage once the WAL reports them durable; a leader
// may apply an entry a quorum of followers persisted before its own write is durable).
// Errors: ErrNoGroup.
func (n *Node) DurableIndex(id uint64) (uint64, error) {
	g := n.group(id)
	if g == nil {
		return 0, ErrNoGroup
	}
	last, err := g.ms.LastIndex()
	return last, err
}

// Compacted is the point up to which every voter of group id has persisted the log,
// as the group's leader last computed it (the smallest match index of all voters,
// at most the commit index, every CompactTicks ticks and when the group quiesces) and
// sent it: no leader will ever have to send those entries again, so the node may drop
// them (its MemoryStorage does, every CompactTicks ticks) and the caller may set the
// WAL floor to the smaller of it and its own checkpoint. A voter that does not answer
// (down, cut off) holds it back: without snapshots (step 4) a follower behind it
// could not catch up. Errors: ErrNoGroup.
func (n *Node) Compacted(id uint64) (Floor, error) {
	g := n.group(id)
	if g == nil {
		return Floor{}, ErrNoGroup
	}
	g.cmu.Lock()
	defer g.cmu.Unlock()
	return g.compacted, nil
}

// setCompacted moves g's compacted point forward to f (never back).
func (g *group) setCompacted(f Floor) bool {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	if f.Index <= g.compacted.Index {
		return false
	}
	g.compacted = f
	return true
}

func (g *group) compactedFloor() Floor {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	return g.compacted
}

// advanceCompacted, on the leader, computes the point every voter has persisted the
// log up to (at most the commit index) and records it if it grew; it reports whether
// it grew. Loop goroutine only.
func (n *Node) advanceCompacted(g *group) bool {
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		return false
	}
	c := bs.Commit
	g.rn.WithProgress(func(_ uint64, _ raft.ProgressType, pr tracker.Progress) {
		c = min(c, pr.Match)
	})
	if c <= g.compactedFloor().Index {
		return false
	}
	term, err := g.ms.Term(c)
	if err != nil {
		return false // not in this leader's storage (it restarted at its applied entry)
	}
	return g.setCompacted(Floor{Index: c, Term: term})
}

// sendCompacted sends g's compacted point to every other voter. Loop goroutine only.
func (n *Node) sendCompacted(g *group, out map[uint64][]*storagev1.RaftMessage) {
	f := g.compactedFloor()
	for p := range n.cfg.Peers {
		if p != n.cfg.ID {
			out[p] = append(out[p], &storagev1.RaftMessage{Group: g.id, CompactIndex: f.Index, CompactTerm: f.Term})
		}
	}
}

// RemoveGroup stops group id (a deleted channel) on this node and lets the WAL drop
// its records. Proposals pending on it end with ErrLeadershipLost.
func (n *Node) RemoveGroup(id uint64) {
	n.mu.Lock()
	g := n.groups[id]
	delete(n.groups, id)
	n.mu.Unlock()
	if g == nil {
		return
	}
	g.qmu.Lock()
	g.stopped = true
	g.qcond.Broadcast()
	g.qmu.Unlock()
	n.post(item{kind: itemRemove, g: g})
	n.wal.DropGroup(id)
}

// Receive hands the node a batch the transport received from node from; any batch,
// an empty one included, is from's liveness. A message that does not decode, names
// another sender or an unknown group is dropped (raft retransmits; a group this node
// does not have yet is created by its create entry).
func (n *Node) Receive(from uint64, msgs []*storagev1.RaftMessage) {
	if h := n.heard[from]; h != nil {
		h.Store(time.Now().UnixNano())
	}
	if len(msgs) == 0 {
		return
	}
	items := make([]item, 0, len(msgs))
	n.mu.Lock()
	for _, rm := range msgs {
		g := n.groups[rm.GetGroup()]
		if g == nil {
			continue
		}
		if rm.GetWake() {
			items = append(items, item{kind: itemWake, g: g})
			continue
		}
		if c := rm.GetCompactIndex(); c > 0 {
			items = append(items, item{kind: itemCompact, g: g, compact: Floor{Index: c, Term: rm.GetCompactTerm()}})
			if len(rm.GetMessage()) == 0 {
				continue
			}
		}
		var m raftpb.Message
		if err := m.Unmarshal(rm.GetMessage()); err != nil || m.From != from || m.To != n.cfg.ID {
			continue
		}
		if e := rm.GetEntries(); len(e) > 0 {
			ents, err := decodeEntries(e, m.Entries)
			if err != nil {
				continue
			}
			m.Entries = ents
		}
		items = append(items, item{kind: itemRecv, g: g, m: m, quiesce: rm.GetQuiesce()})
	}
	n.mu.Unlock()
	n.post(items...)
}

// Unreachable tells every group that messages to peer were lost (the transport's
// stream to it broke), so leaders probe it again instead of waiting on a full window.
func (n *Node) Unreachable(peer uint64) { n.post(item{kind: itemUnreachable, peer: peer}) }

func (n *Node) post(items ...item) {
	if len(items) == 0 {
		return
	}
	n.mu.Lock()
	if n.err != nil {
		n.mu.Unlock()
		return
	}
	n.inbox = append(n.inbox, items...)
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// fail stops the node after a WAL failure: every pending and later proposal fails.
func (n *Node) fail(err error) {
	n.mu.Lock()
	first := n.err == nil
	if first {
		n.err = err
	}
	n.mu.Unlock()
	if first {
		n.log.Error("raft node stops: the write-ahead log failed", zap.Error(err))
		n.Close()
	}
}

// Close stops the loop and the apply goroutines; pending proposals fail with
// ErrClosed. It does not close the WAL.
func (n *Node) Close() {
	n.once.Do(func() {
		n.mu.Lock()
		if n.err == nil {
			n.err = ErrClosed
		}
		n.mu.Unlock()
		close(n.closed)
	})
	if n.started.Load() {
		<-n.done
	}
	n.mu.Lock()
	gs := make([]*group, 0, len(n.groups))
	for _, g := range n.groups {
		gs = append(gs, g)
	}
	n.mu.Unlock()
	for _, g := range gs {
		g.qmu.Lock()
		g.stopped = true
		g.qcond.Broadcast()
		g.qmu.Unlock()
		<-g.done
	}
	n.pmu.Lock()
	for _, p := range n.props {
		p.finish(nil, ErrClosed)
	}
	n.pmu.Unlock()
}

func (n *Node) run() {
	defer close(n.done)
	t := time.NewTicker(n.cfg.Tick)
	defer t.Stop()
	var spare []item
	ticks := 0
	dirty := map[*group]struct{}{}
	for {
		tick := false
		select {
		case <-n.closed:
			return
		case <-t.C:
			tick = true
		case <-n.kick:
		}
		n.mu.Lock()
		items := n.inbox
		n.inbox = spare[:0]
		n.mu.Unlock()
		out := map[uint64][]*storagev1.RaftMessage{}
		for i := range items {
			it := &items[i]
			if it.g != nil {
				dirty[it.g] = struct{}{}
			} else if it.kind == itemUnreachable {
				n.mu.Lock()
				for _, g := range n.groups {
					dirty[g] = struct{}{}
				}
				n.mu.Unlock()
			}
			n.handle(it, out)
			*it = item{}
		}
		spare = items
		now := time.Now()
		if tick {
			ticks++
			n.ticks.Add(1)
			n.wal.Flush()
			if !n.cfg.DisableQuiesce {
				n.liveness(now, dirty, out)
			}
			for g := range n.ticking {
				if !n.cfg.DisableQuiesce && n.maybeQuiesce(g, out) {
					continue
				}
				g.rn.Tick()
				g.idle++
				dirty[g] = struct{}{}
			}
			n.groupTicks.Add(uint64(len(n.ticking)))
			if ticks%n.cfg.CompactTicks == 0 {
				n.mu.Lock()
				all := make([]*group, 0, len(n.groups))
				for _, g := range n.groups {
					all = append(all, g)
				}
				n.mu.Unlock()
				for _, g := range all {
					if g.removed {
						continue
					}
					if n.advanceCompacted(g) {
						n.sendCompacted(g, out)
					}
					if idx := max(n.keepFrom(g), g.compactedFloor().Index); idx > 1 {
						n.compact(g, idx)
					}
				}
			}
		}
		for g := range dirty {
			for !g.removed && g.rn.HasReady() {
				n.ready(g, out)
			}
			delete(dirty, g)
		}
		if tick && !n.cfg.DisableQuiesce {
			for p := range n.heard {
				if _, ok := out[p]; !ok && now.Sub(n.sentAt[p]) >= n.cfg.LivenessInterval {
					out[p] = nil // the liveness batch
				}
			}
		}
		for to, msgs := range out {
			n.sentAt[to] = now
			if n.sender != nil {
				n.sender.Send(to, msgs)
			}
		}
	}
}

// liveness declares a peer dead when no batch came from it for the election timeout,
// and alive again when one does. On a death the groups it led forget it and, if this
// is the lowest-id live node, campaign; on either change the quiesced groups this node
// leads wake. Loop goroutine only.
func (n *Node) liveness(now time.Time, dirty map[*group]struct{}, out map[uint64][]*storagev1.RaftMessage) {
	timeout := time.Duration(n.cfg.ElectionTicks) * n.cfg.Tick
	for p, h := range n.heard {
		alive := now.Sub(time.Unix(0, h.Load())) < timeout
		if alive == n.alive[p] {
			continue
		}
		n.alive[p] = alive
		n.log.Info("raft peer liveness changed", zap.Uint64("peer", p), zap.Bool("alive", alive))
		campaign := !alive
		for q, a := range n.alive {
			if a && q < n.cfg.ID {
				campaign = false
			}
		}
		n.mu.Lock()
		all := make([]*group, 0, len(n.groups))
		for _, g := range n.groups {
			all = append(all, g)
		}
		n.mu.Unlock()
		for _, g := range all {
			if g.removed {
				continue
			}
			bs := g.rn.BasicStatus()
			switch {
			case !alive && bs.Lead == p:
				n.wake(g, 0, out)
				_ = g.rn.ForgetLeader()
				if campaign {
					_ = g.rn.Campaign()
				}
				dirty[g] = struct{}{}
			case bs.RaftState == raft.StateLeader && g.quiesced:
				n.wake(g, 0, out)
				dirty[g] = struct{}{}
			}
		}
	}
}

// maybeQuiesce quiesces g, before its tick (as CockroachDB does), if this node leads
// it, it had no proposal for 2 election timeouts, and its log is durable, committed,
// applied and matched by every live follower: each follower gets a last heartbeat
// marked quiesce (a lagging dead one a plain heartbeat at its match index, as raft's
// own would carry). Loop goroutine only.
func (n *Node) maybeQuiesce(g *group, out map[uint64][]*storagev1.RaftMessage) bool {
	if g.removed || !g.leading || g.idle < 2*n.cfg.ElectionTicks || g.rn.HasReady() {
		return false
	}
	g.amu.Lock()
	inflight := len(g.appends) > 0
	g.amu.Unlock()
	if inflight {
		return false
	}
	st := g.rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != raft.None || st.Applied != st.Commit {
		return false
	}
	if last, _ := g.ms.LastIndex(); last != st.Commit {
		return false
	}
	for id, pr := range st.Progress {
		if pr.Match == st.Commit && (id == n.cfg.ID || pr.State == tracker.StateReplicate) {
			continue
		}
		if id != n.cfg.ID && !n.alive[id] {
			continue // caught up when its liveness returns: that wakes the group
		}
		return false
	}
	n.quiesce(g)
	// The group's last word before it goes quiet carries the compacted point: every
	// voter persisted up to the commit index unless one is down; a follower that
	// restarted gets it again when its return wakes the group and it quiesces again.
	n.advanceCompacted(g)
	cf := g.compactedFloor()
	for id, pr := range st.Progress {
		if id == n.cfg.ID {
			continue
		}
		m := raftpb.Message{Type: raftpb.MsgHeartbeat, From: n.cfg.ID, To: id, Term: st.Term, Commit: min(pr.Match, st.Commit)}
		b, err := m.Marshal()
		if err != nil {
			n.log.Error("raft message marshal", zap.Error(err))
			continue
		}
		out[id] = append(out[id], &storagev1.RaftMessage{Group: g.id, Message: b, Quiesce: pr.Match >= st.Commit,
			CompactIndex: cf.Index, CompactTerm: cf.Term})
	}
	return true
}

func (n *Node) quiesce(g *group) {
	if !g.quiesced {
		g.quiesced = true
		delete(n.ticking, g)
		n.quiesced.Add(1)
	}
}

// wake makes a quiesced g tick again. from is the node whose message woke it (0 for
// none): a follower woken by a node other than its leader wakes the leader too (a
// RaftMessage marked wake), so that it does not time out and campaign against a
// leader that is alive but not ticking (CockroachDB proposes an empty command, which
// raft forwards to the leader; proposal forwarding is off here). Loop goroutine only.
func (n *Node) wake(g *group, from uint64, out map[uint64][]*storagev1.RaftMessage) {
	if !g.quiesced {
		return
	}
	g.quiesced = false
	g.idle = 0
	n.ticking[g] = struct{}{}
	n.quiesced.Add(-1)
	bs := g.rn.BasicStatus()
	if from != 0 && bs.RaftState == raft.StateFollower && bs.Lead != raft.None && bs.Lead != from && bs.Lead != n.cfg.ID {
		out[bs.Lead] = append(out[bs.Lead], &storagev1.RaftMessage{Group: g.id, Wake: true})
	}
}

func (n *Node) handle(it *item, out map[uint64][]*storagev1.RaftMessage) {
	g := it.g
	switch it.kind {
	case itemFunc:
		it.fn()
	case itemAdd:
		if !g.removed {
			n.ticking[g] = struct{}{}
		}
	case itemWake:
		if !g.removed {
			n.wake(g, 0, out)
		}
	case itemCompact:
		// Kept for the next compaction tick; it wakes nothing.
		g.setCompacted(it.compact)
	case itemRecv:
		if g.removed {
			return
		}
		if it.quiesce && it.m.Type == raftpb.MsgHeartbeat && !n.cfg.DisableQuiesce {
			bs := g.rn.BasicStatus()
			if bs.RaftState == raft.StateFollower && bs.Term == it.m.Term && bs.Commit == it.m.Commit && bs.Lead == it.m.From {
				n.quiesce(g)
				return
			}
			// Declined: a plain heartbeat, and the leader is asked to keep ticking.
			n.wake(g, it.m.From, out)
			_ = g.rn.Step(it.m)
			out[it.m.From] = append(out[it.m.From], &storagev1.RaftMessage{Group: g.id, Wake: true})
			return
		}
		if g.quiesced && g.leading && it.m.Type == raftpb.MsgHeartbeatResp {
			// The answer to a heartbeat sent before the group quiesced (it may share
			// a batch with the quiesce heartbeat); it wakes the group only if raft has
			// something to send for it (see ready).
			_ = g.rn.Step(it.m)
			return
		}
		n.wake(g, it.m.From, out)
		_ = g.rn.Step(it.m)
	case itemPropose:
		if g.rn.BasicStatus().RaftState != raft.StateLeader {
			l := g.lead.Load()
			it.p.finish(nil, &NotLeaderError{Group: g.id, Leader: l, Addr: n.cfg.Peers[l]})
			return
		}
		n.wake(g, 0, out)
		g.idle = 0
		if err := g.rn.Propose(it.data); err != nil {
			it.p.finish(nil, fmt.Errorf("%w: %v", ErrDropped, err))
		}
	case itemDurable:
		m := it.m
		if m.Snapshot != nil && !raft.IsEmptySnap(*m.Snapshot) {
			// Not reached: the only snapshot raft can send is the synthetic one at index
			// 1, which every node has. Applying one the WAL does not hold would lie to
			// raft, so the group stalls instead (snapshots are step 4).
			n.log.Error("raft snapshot received; snapshots are not built yet, the group stalls", zap.Uint64("group", g.id))
			return
		}
		if len(m.Entries) > 0 {
			if err := g.ms.Append(m.Entries); err != nil {
				n.log.Error("raft storage append", zap.Uint64("group", g.id), zap.Error(err))
				return
			}
		}
		if m.Term != 0 || m.Vote != 0 || m.Commit != 0 {
			if err := g.ms.SetHardState(raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}); err != nil {
				n.log.Error("raft storage hard state", zap.Uint64("group", g.id), zap.Error(err))
				return
			}
		}
		for _, r := range m.Responses {
			n.route(g, r, out, nil)
		}
	case itemStep:
		for _, r := range it.msgs {
			n.route(g, r, out, nil)
		}
	case itemUnreachable:
		n.mu.Lock()
		for _, gg := range n.groups {
			gg.rn.ReportUnreachable(it.peer)
		}
		n.mu.Unlock()
	case itemRemove:
		g.removed = true
		if g.quiesced {
			g.quiesced = false
			n.quiesced.Add(-1)
		}
		delete(n.ticking, g)
		n.failPending(g.id)
	}
}

// keepFrom is the index up to which g's applied entries are beyond what the node keeps
// (KeepEntries, KeepBytes); 0 for none. Loop goroutine only.
func (n *Node) keepFrom(g *group) uint64 {
	a := g.applied.Load()
	if last, _ := g.ms.LastIndex(); a > last {
		// A leader may apply an entry before its own WAL write of it is durable (it
		// enters the MemoryStorage then): the entries past the storage's last are not
		// there to weigh, and asking for them panics.
		a = last
	}
	idx := uint64(0)
	if a > n.cfg.KeepEntries {
		idx = a - n.cfg.KeepEntries
	}
	first, _ := g.ms.FirstIndex()
	lo := max(first, idx+1)
	if lo > a {
		return idx
	}
	ents, err := g.ms.Entries(lo, a+1, math.MaxUint64)
	if err != nil {
		return idx
	}
	size := uint64(0)
	for i := len(ents) - 1; i >= 0; i-- {
		if size += uint64(len(ents[i].Data)); size > n.cfg.KeepBytes {
			return max(idx, ents[i].Index)
		}
	}
	return idx
}

// compact drops g's MemoryStorage entries up to index, clamped to what raft knows
// was applied (it reads the entries after that again, e.g. to look for conf changes
// before a campaign; the apply goroutine runs ahead of it until its response is
// stepped) and is in the MemoryStorage (a leader may apply an entry before its own
// WAL write of it is durable) and, on the leader, to what every follower already has.
// Loop goroutine only.
func (n *Node) compact(g *group, index uint64) {
	bs := g.rn.BasicStatus()
	idx := min(index, bs.Applied)
	if last, err := g.ms.LastIndex(); err == nil {
		idx = min(idx, last)
	}
	if bs.RaftState == raft.StateLeader {
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id != n.cfg.ID {
				idx = min(idx, pr.Match)
			}
		})
	}
	if first, _ := g.ms.FirstIndex(); idx >= first {
		if err := g.ms.Compact(idx); err != nil && !errors.Is(err, raft.ErrCompacted) {
			n.log.Warn("raft storage compact", zap.Uint64("group", g.id), zap.Error(err))
		}
	}
}

// FirstIndex is the first entry index the group's MemoryStorage still holds (tests).
func (n *Node) FirstIndex(id uint64) uint64 {
	if g := n.group(id); g != nil {
		f, _ := g.ms.FirstIndex()
		return f
	}
	return 0
}

// entryCache holds the last entries encoded for a MsgApp (appendEntries), for the
// other peers the same entries go to in one Ready.
type entryCache struct {
	lo, hi, term uint64
	b            []byte
}

// route delivers a message raft produced: to this node's own raft, or to the batch
// for another node. A MsgApp's entries are encoded apart from the rest, once for all
// the peers of the Ready that get the same ones (ec; nil outside a Ready).
func (n *Node) route(g *group, m raftpb.Message, out map[uint64][]*storagev1.RaftMessage, ec *entryCache) {
	if m.To == n.cfg.ID {
		_ = g.rn.Step(m)
		return
	}
	if ec != nil && m.Type == raftpb.MsgApp && len(m.Entries) > 0 {
		lo, hi := m.Entries[0].Index, m.Entries[len(m.Entries)-1].Index
		if term := m.Entries[len(m.Entries)-1].Term; ec.b == nil || ec.lo != lo || ec.hi != hi || ec.term != term {
			*ec = entryCache{lo: lo, hi: hi, term: term, b: appendEntries(nil, m.Entries)}
		}
		m.Entries = nil
		b, err := m.Marshal()
		if err != nil {
			n.log.Error("raft message marshal", zap.Error(err))
			return
		}
		out[m.To] = append(out[m.To], &storagev1.RaftMessage{Group: g.id, Message: b, Entries: ec.b})
		return
	}
	b, err := m.Marshal()
	if err != nil {
		n.log.Error("raft message marshal", zap.Error(err))
		return
	}
	out[m.To] = append(out[m.To], &storagev1.RaftMessage{Group: g.id, Message: b})
}

// ready handles one Ready of g: WAL appends, applies, messages to other nodes.
func (n *Node) ready(g *group, out map[uint64][]*storagev1.RaftMessage) {
	rd := g.rn.Ready()
	if rd.SoftState != nil {
		g.lead.Store(rd.SoftState.Lead)
		leading := rd.SoftState.RaftState == raft.StateLeader
		if g.leading && !leading {
			n.failPending(g.id)
		}
		g.leading = leading
		g.idle = 0
		n.wake(g, 0, out) // e.g. a quiesced leader deposed by a higher term
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		g.term.Store(rd.HardState.Term)
	}
	var ec entryCache
	for _, m := range rd.Messages {
		switch m.To {
		case raft.LocalAppendThread:
			n.persist(g, m)
		case raft.LocalApplyThread:
			g.qmu.Lock()
			g.applyQ = append(g.applyQ, m)
			g.qcond.Signal()
			g.qmu.Unlock()
		default:
			// A quiesced group that has something to send is not idle (a leader's
			// append after a late response, say): it ticks again. A heartbeat's answer
			// is not such a thing: a follower quiesced by a heartbeat that shared a
			// batch with a plain one still answers that one.
			if m.Type != raftpb.MsgHeartbeatResp {
				n.wake(g, 0, out)
			}
			n.route(g, m, out, &ec)
		}
	}
}

// persist hands a MsgStorageAppend to the WAL; Durable delivers its responses.
func (n *Node) persist(g *group, m raftpb.Message) {
	var hs *raftpb.HardState
	if m.Term != 0 || m.Vote != 0 || m.Commit != 0 {
		hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
	}
	// A hard state whose only change is the commit index, with nothing else to write,
	// rides with the WAL's next round (or the next tick's Flush) instead of starting
	// one: raft does not need the commit index durable (a restarted node learns it from
	// the leader), and on a follower every MsgApp moves it. Its responses still wait
	// for the write, as every append's do; so that the wait never slows an election or
	// a follower's probe, only acceptances of appends may wait.
	lazy := hs != nil && len(m.Entries) == 0 && m.Snapshot == nil && hs.Term == g.hsTerm && hs.Vote == g.hsVote
	for _, r := range m.Responses {
		if r.Type != raftpb.MsgStorageAppendResp && (r.Type != raftpb.MsgAppResp || r.Reject) {
			lazy = false
		}
	}
	if hs != nil {
		g.hsTerm, g.hsVote = hs.Term, hs.Vote
	}
	g.amu.Lock()
	var lsn uint64
	var err error
	if lazy {
		lsn, err = n.wal.AppendLazy(g.id, *hs, g)
	} else {
		lsn, err = n.wal.Append(g.id, m.Entries, hs, g)
	}
	if err == nil {
		g.appends = append(g.appends, pendingAppend{lsn: lsn, m: m})
	}
	g.amu.Unlock()
	if err != nil {
		go n.fail(err)
	}
}

// failPending fails the proposals of a group this node stopped leading.
func (n *Node) failPending(id uint64) {
	n.pmu.Lock()
	for _, p := range n.props {
		if p.group == id {
			p.finish(nil, ErrLeadershipLost)
		}
	}
	n.pmu.Unlock()
}

// applyLoop applies the group's committed entries in order and hands raft the
// responses.
func (g *group) applyLoop() {
	defer close(g.done)
	for {
		g.qmu.Lock()
		for len(g.applyQ) == 0 && !g.stopped {
			g.qcond.Wait()
		}
		if g.stopped {
			g.qmu.Unlock()
			return
		}
		m := g.applyQ[0]
		g.applyQ = g.applyQ[1:]
		g.qmu.Unlock()
		for i := range m.Entries {
			e := &m.Entries[i]
			g.applyMu.Lock()
			g.apply(e)
			g.applied.Store(e.Index)
			g.appliedTerm.Store(e.Term)
			g.applyMu.Unlock()
		}
		g.n.post(item{kind: itemStep, g: g, msgs: m.Responses})
	}
}

func (g *group) apply(e *raftpb.Entry) {
	if e.Type != raftpb.EntryNormal {
		// Static membership: no conf change is ever proposed.
		g.n.log.Error("raft conf change entry in a static group ignored", zap.Uint64("group", g.id), zap.Uint64("index", e.Index))
		return
	}
	if len(e.Data) == 0 {
		return
	}
	if len(e.Data) < HeaderLen {
		g.n.log.Error("raft entry without a proposal header", zap.Uint64("group", g.id), zap.Uint64("index", e.Index))
		return
	}
	from := binary.BigEndian.Uint64(e.Data)
	pid := binary.BigEndian.Uint64(e.Data[8:])
	g.n.applies.Add(1)
	res, err := g.sm.Apply(e.Index, e.Term, e.Data[HeaderLen:])
	if from != g.n.cfg.ID {
		return
	}
	g.n.pmu.Lock()
	p := g.n.props[pid]
	g.n.pmu.Unlock()
	if p != nil {
		p.finish(res, err)
	}
}

// raftLogger is raft's Logger on zap.
type raftLogger struct{ *zap.SugaredLogger }

func (l raftLogger) Warning(v ...any)                 { l.Warn(v...) }
func (l raftLogger) Warningf(format string, v ...any) { l.Warnf(format, v...) }
