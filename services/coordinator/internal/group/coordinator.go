// Package group is the Kafka classic group coordinator (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, with generations, leader election, KIP-394 member ids, KIP-345 static
// membership, session and rebalance timeouts) and the committed-offset store, run the
// way Apache Kafka's GroupCoordinator runs it, with every bit of state in Postgres.
//
// Any coordinator replica serves any group: each call is one Postgres transaction that
// holds the group's row lock (see LOCKS.md). A JoinGroup or SyncGroup waiting for the
// rest of the group waits for a NATS wake-up on the group's subject (published after
// every change, by any replica) and re-reads the state; a coarse re-read every
// Config.WaitRecheck covers a lost message. Session expiry and rebalance deadlines are
// swept every Config.SweepInterval by the one replica holding the sweep lock in NATS
// JetStream KV (sweep.go).
//
// Kafka errors are data: per-item outcomes are Kafka error codes in the responses. A Go
// error means the call could not be served at all (Postgres or NATS unreachable).
package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Deps are the coordinator's collaborators.
type Deps struct {
	// Store is the coordinator database, migrated (consumer_groups and friends exist).
	Store *store.Store
	// NATS carries wake-ups and holds the sweep lock (JetStream KV).
	NATS *nats.Conn
	// Storage, when set, gives high watermarks for the lag gauges and the lags of
	// GetCommittedOffsets (-1 without it).
	Storage storagev1.StorageServiceClient
	// Registerer, when set, gets the committed-offset and lag collector.
	Registerer prometheus.Registerer
	Log        *zap.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Coordinator serves tributary.coordinator.v1.GroupCoordinatorService.
type Coordinator struct {
	coordinatorv1.UnimplementedGroupCoordinatorServiceServer

	cfg     Config
	store   *store.Store
	storage storagev1.StorageServiceClient // nil: lags unknown
	nc      *nats.Conn
	log     *zap.Logger
	now     func() time.Time
	notify  *notifier
	sweeper *sweeper   // the group sweeps and AddSweep, under lock "groups"
	kinds   []*sweeper // AddSweepLock
	metrics *offsetCollector
	// lockHeld is 1 for each sweep lock this replica holds.
	lockHeld *prometheus.GaugeVec

	// deleteShareState removes a share group's storage-core state before DeleteGroups
	// deletes the group (SetShareStateDeleter; nil: nothing to remove).
	deleteShareState func(ctx context.Context, group string) error

	started atomic.Bool
	closed  atomic.Bool
	// closing is closed by Close: waiting calls return ErrClosed at once.
	closing chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New builds a Coordinator; Start begins serving.
func New(cfg Config, deps Deps) (*Coordinator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.NATS == nil {
		return nil, fmt.Errorf("%w: postgres store and nats connection are required", ErrInvalidConfig)
	}
	log := deps.Log
	if log == nil {
		log = zap.NewNop()
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	c := &Coordinator{
		cfg:     cfg,
		store:   deps.Store,
		storage: deps.Storage,
		nc:      deps.NATS,
		log:     log,
		now:     now,
		notify:  newNotifier(deps.NATS, cfg.ClusterID),
		closing: make(chan struct{}),
	}
	c.sweeper = newSweeper(c, sweepLockKey)
	c.sweeper.tick = c.sweeper.groupTick
	c.metrics = newOffsetCollector(deps.Store, deps.Storage, log)
	c.lockHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tributary_coordinator_sweep_lock_held",
		Help: "1 while this replica holds the sweep lock (and runs that kind of sweep), else 0; by lock.",
	}, []string{"lock"})
	c.lockHeld.WithLabelValues(sweepLockKey).Set(0)
	if deps.Registerer != nil {
		if err := deps.Registerer.Register(c.metrics); err != nil {
			return nil, fmt.Errorf("register group metrics: %w", err)
		}
		if err := deps.Registerer.Register(c.lockHeld); err != nil {
			return nil, fmt.Errorf("register sweep lock metric: %w", err)
		}
	}
	return c, nil
}

// Start subscribes to group wake-ups and starts one sweep-lock loop per sweep kind.
// Call Close to stop.
func (c *Coordinator) Start(ctx context.Context) error {
	if err := c.notify.start(); err != nil {
		return fmt.Errorf("subscribe group wake-ups: %w", err)
	}
	ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, s := range append([]*sweeper{c.sweeper}, c.kinds...) {
		c.lockHeld.WithLabelValues(s.key).Set(0)
		c.wg.Go(func() { s.run(ctx) })
	}
	c.started.Store(true)
	return nil
}

// Close stops the sweeper (releasing the sweep lock) and the wake-up subscription.
// Calls waiting for a rebalance return ErrClosed (UNAVAILABLE) at once; their members
// stay in the group and retry on a replica that serves.
func (c *Coordinator) Close() {
	if c.closed.Swap(true) {
		return
	}
	close(c.closing)
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.notify.stop()
}

// Ready reports whether calls can be served: started, NATS connected, Postgres answering.
func (c *Coordinator) Ready(ctx context.Context) error {
	if !c.started.Load() || c.closed.Load() {
		return ErrNotReady
	}
	if !c.nc.IsConnected() {
		return fmt.Errorf("%w: nats disconnected", ErrNotReady)
	}
	return c.store.Ping(ctx)
}

// SetShareStateDeleter sets what DeleteGroups calls, under the group row lock, before it
// deletes an empty share group (KIP-932: its share partitions in storage-core). Call it
// before Start.
func (c *Coordinator) SetShareStateDeleter(f func(ctx context.Context, group string) error) {
	c.deleteShareState = f
}

// HoldsSweepLock reports whether this replica currently runs the group sweeps (and
// the AddSweep ones).
func (c *Coordinator) HoldsSweepLock() bool { return c.sweeper.held.Load() }

// HoldsLock reports whether this replica currently holds the sweep lock key ("groups"
// or an AddSweepLock key).
func (c *Coordinator) HoldsLock(key string) bool {
	for _, s := range append([]*sweeper{c.sweeper}, c.kinds...) {
		if s.key == key {
			return s.held.Load()
		}
	}
	return false
}

func (c *Coordinator) check() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if !c.started.Load() {
		return ErrNotReady
	}
	return nil
}

// errSkip rolls a withGroup transaction back without an error: the call changed nothing.
var errSkip = errors.New("nothing to write")

// withGroup runs fn on the group under its row lock in one transaction and saves what
// fn changed. With create, a missing group is created (as Empty) if fn changes it; else
// fn sees exists == false. Waiters are woken after the commit when fn changed the
// group's state.
func (c *Coordinator) withGroup(ctx context.Context, id string, create bool, fn func(g *group, now time.Time) error) error {
	tx, err := c.store.BeginGroupTx(ctx)
	if err != nil {
		return fmt.Errorf("%w: begin: %v", ErrNotReady, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return c.withGroupTx(ctx, tx, id, create, fn)
}

// wait re-reads the group until done returns true, waking on the group's NATS subject
// and every WaitRecheck. It returns ctx's error when ctx ends first.
func (c *Coordinator) wait(ctx context.Context, id string, done func(g *group) bool) error {
	t := time.NewTimer(c.cfg.WaitRecheck)
	defer t.Stop()
	for {
		ch := c.notify.wait(id)
		g, err := snapshotGroup(ctx, c.store, id)
		if err != nil {
			return err
		}
		if done(g) {
			return nil
		}
		t.Reset(c.cfg.WaitRecheck)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closing:
			return ErrClosed
		}
	}
}

func ms(v int32) time.Duration { return time.Duration(v) * time.Millisecond }

func toProtocols(ps []*coordinatorv1.GroupProtocol) []protocol {
	out := make([]protocol, 0, len(ps))
	for _, p := range ps {
		out = append(out, protocol{Name: p.GetName(), Metadata: p.GetMetadata()})
	}
	return out
}

// missingMemberCode is the error for a member that is no longer in the group: fenced
// when its static instance id now belongs to another member id (KIP-345).
func missingMemberCode(g *group, memberID string, instanceID *string) int32 {
	if instanceID != nil {
		if m := g.byInstance(*instanceID); m != nil && m.ID != memberID {
			return codeFencedInstanceID
		}
	}
	return codeUnknownMemberID
}

// JoinGroup implements Kafka's handleJoinGroup (GroupCoordinator.scala), answering once
// the join phase ends.
func (c *Coordinator) JoinGroup(ctx context.Context, req *coordinatorv1.JoinGroupRequest) (_ *coordinatorv1.JoinGroupResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	fail := func(code int32, memberID string) *coordinatorv1.JoinGroupResponse {
		return &coordinatorv1.JoinGroupResponse{ErrorCode: code, MemberId: memberID, GenerationId: -1, ProtocolType: req.GetProtocolType()}
	}
	gid := req.GetGroupId()
	if gid == "" {
		return fail(codeInvalidGroupID, req.GetMemberId()), nil
	}
	sess := ms(req.GetSessionTimeoutMs())
	if sess < c.cfg.MinSessionTimeout || sess > c.cfg.MaxSessionTimeout {
		return fail(codeInvalidSessionTimeout, req.GetMemberId()), nil
	}
	reb := ms(req.GetRebalanceTimeoutMs())
	if reb <= 0 {
		reb = sess
	}
	protocols := toProtocols(req.GetProtocols())
	instance := req.GetGroupInstanceId()
	var instanceID *string
	if req.GroupInstanceId != nil {
		instanceID = &instance
	}
	var (
		resp    *coordinatorv1.JoinGroupResponse
		waitFor string
	)
	update := func(m *member) {
		m.SessionTimeout, m.RebalanceTimeout = sess, reb
		m.ClientID, m.ClientHost = req.GetClientId(), req.GetClientHost()
		m.ProtocolType, m.Protocols = req.GetProtocolType(), protocols
		m.dirty = true
	}
	err = c.withGroup(ctx, gid, req.GetMemberId() == "", func(g *group, now time.Time) error {
		// joinAndWait records m's join in the current join phase and ends the phase
		// when it can; the answer comes from the waiter.
		joinAndWait := func(m *member, isNew bool) {
			m.AwaitingJoin, m.dirty = true, true
			waitFor = m.ID
			if len(g.active()) == 1 || g.ProtocolType == "" {
				g.ProtocolType = m.ProtocolType
			}
			switch g.State {
			case StateEmpty, StateStable, StateCompletingRebalance:
				g.prepareRebalance(now, c.cfg.InitialRebalanceDelay)
			case StatePreparingRebalance:
				if isNew {
					g.extendInitialDelay(now, c.cfg.InitialRebalanceDelay)
				}
			}
			g.touch()
			g.maybeCompleteJoin(now)
		}
		memberID := req.GetMemberId()
		if g.Type == store.GroupTypeShare {
			// KIP-932: a share group never becomes a classic group (Kafka's
			// classicGroupJoin answers a join to one so).
			resp = fail(codeInconsistentGroupProto, memberID)
			return errSkip
		}
		if g.Type == store.GroupTypeConsumer {
			// KIP-848: a consumer group with members refuses classic members; an
			// empty one becomes a classic group again (online downgrade).
			if g.consumerMembers {
				resp = fail(codeInconsistentGroupProto, memberID)
				return errSkip
			}
			g.toClassic, g.Type, g.dirty = true, store.GroupTypeClassic, true
			g.State, g.Generation, g.ProtocolType, g.Protocol, g.Leader = StateEmpty, 0, "", "", ""
			c.log.Info("consumer group converted to a classic group", zap.String("group", gid))
		}
		if !g.exists && memberID != "" {
			resp = fail(codeUnknownMemberID, memberID)
			return errSkip
		}
		if memberID == "" {
			if instanceID != nil {
				if old := g.byInstance(instance); old != nil {
					if !g.supportsProtocols(old.ID, req.GetProtocolType(), protocols) {
						resp = fail(codeInconsistentGroupProto, "")
						return errSkip
					}
					resp, waitFor = c.rejoinStatic(g, old, update, joinAndWait, req.GetClientId(), now)
					return nil
				}
			}
			if !g.supportsProtocols("", req.GetProtocolType(), protocols) {
				resp = fail(codeInconsistentGroupProto, "")
				return errSkip
			}
			m := &member{ID: newMemberID(req.GetClientId()), InstanceID: instanceID, JoinedAt: now}
			update(m)
			if instanceID == nil && req.GetRequireKnownMemberId() {
				// KIP-394: hand out the id; the member joins again with it.
				m.Pending = true
				m.SessionDeadline = now.Add(sess)
				g.addMember(m)
				resp = fail(codeMemberIDRequired, m.ID)
				return nil
			}
			m.SessionDeadline = now.Add(sess)
			g.addMember(m)
			joinAndWait(m, true)
			return nil
		}
		if instanceID != nil {
			if im := g.byInstance(instance); im != nil && im.ID != memberID {
				resp = fail(codeFencedInstanceID, memberID)
				return errSkip
			}
		}
		m := g.member(memberID)
		if m == nil {
			resp = fail(codeUnknownMemberID, memberID)
			return errSkip
		}
		if !g.supportsProtocols(m.ID, req.GetProtocolType(), protocols) {
			resp = fail(codeInconsistentGroupProto, memberID)
			return errSkip
		}
		if m.Pending {
			m.Pending = false
			m.JoinedAt = now
			update(m)
			joinAndWait(m, true)
			return nil
		}
		switch g.State {
		case StatePreparingRebalance:
			update(m)
			joinAndWait(m, false)
		case StateCompletingRebalance:
			if sameProtocols(m.Protocols, protocols) {
				// The member lost our answer; answer again.
				resp = g.joinAnswer(m)
				return errSkip
			}
			update(m)
			joinAndWait(m, false)
		case StateStable:
			if m.ID != g.Leader && sameProtocols(m.Protocols, protocols) {
				resp = g.joinAnswer(m)
				return errSkip
			}
			update(m)
			joinAndWait(m, false)
		default:
			resp = fail(codeUnknownMemberID, memberID)
			return errSkip
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if waitFor == "" {
		return resp, nil
	}
	if req.GetReason() != "" {
		c.log.Debug("member joining", zap.String("group", gid), zap.String("member", waitFor), zap.String("reason", req.GetReason()))
	}
	err = c.wait(ctx, gid, func(g *group) bool {
		m := g.member(waitFor)
		if m == nil {
			resp = fail(missingMemberCode(g, waitFor, instanceID), waitFor)
			return true
		}
		if m.AwaitingJoin {
			return false
		}
		resp = g.joinAnswer(m)
		return true
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// joinAnswer is the JoinGroup answer for m in the group's current generation; the
// leader also gets every member of the generation with its metadata.
func (g *group) joinAnswer(m *member) *coordinatorv1.JoinGroupResponse {
	r := &coordinatorv1.JoinGroupResponse{
		GenerationId: m.Generation,
		ProtocolType: g.ProtocolType,
		ProtocolName: g.Protocol,
		Leader:       g.Leader,
		MemberId:     m.ID,
	}
	if m.ID == g.Leader {
		for _, s := range g.JoinMembers {
			r.Members = append(r.Members, &coordinatorv1.JoinGroupMember{MemberId: s.MemberID, GroupInstanceId: s.InstanceID, Metadata: s.Metadata})
		}
	}
	return r
}

// rejoinStatic handles a static member joining without member id while its instance id
// is known (Kafka's updateStaticMemberAndRebalance): the old member id is fenced and
// replaced. A Stable group whose protocol would not change answers at once (KIP-814:
// a rejoining leader must not compute a new assignment); otherwise the group rebalances.
func (c *Coordinator) rejoinStatic(g *group, old *member, update func(*member), joinAndWait func(*member, bool), clientID string, now time.Time) (*coordinatorv1.JoinGroupResponse, string) {
	wasLeader := g.Leader == old.ID
	nm := *old
	nm.ID = newMemberID(clientID)
	nm.isNew, nm.deleted = true, false
	update(&nm)
	g.removeMember(old)
	g.addMember(&nm)
	if wasLeader {
		g.Leader = nm.ID
	}
	for i := range g.JoinMembers {
		if g.JoinMembers[i].MemberID == old.ID {
			g.JoinMembers[i].MemberID = nm.ID
			g.JoinMembers[i].Metadata = nm.metadataFor(g.Protocol)
		}
	}
	switch g.State {
	case StateStable:
		if g.selectProtocol() == g.Protocol {
			nm.SessionDeadline = now.Add(nm.SessionTimeout)
			r := g.joinAnswer(&nm)
			r.GenerationId = g.Generation
			nm.Generation = g.Generation
			r.SkipAssignment = wasLeader
			return r, ""
		}
		joinAndWait(&nm, false)
	default:
		joinAndWait(&nm, false)
	}
	return nil, nm.ID
}

// SyncGroup implements Kafka's handleSyncGroup: the leader's assignment makes the group
// Stable; followers wait for it.
func (c *Coordinator) SyncGroup(ctx context.Context, req *coordinatorv1.SyncGroupRequest) (_ *coordinatorv1.SyncGroupResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	gid, memberID, gen := req.GetGroupId(), req.GetMemberId(), req.GetGenerationId()
	if gid == "" {
		return &coordinatorv1.SyncGroupResponse{ErrorCode: codeInvalidGroupID}, nil
	}
	var instanceID *string
	if req.GroupInstanceId != nil {
		v := req.GetGroupInstanceId()
		instanceID = &v
	}
	var (
		resp *coordinatorv1.SyncGroupResponse
		wait bool
	)
	err = c.withGroup(ctx, gid, false, func(g *group, now time.Time) error {
		if !g.exists {
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: codeUnknownMemberID}
			return errSkip
		}
		if code := g.validateMember(memberID, instanceID, &gen); code != codeNone {
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: code}
			return errSkip
		}
		if (req.ProtocolType != nil && req.GetProtocolType() != g.ProtocolType) ||
			(req.ProtocolName != nil && req.GetProtocolName() != g.Protocol) {
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: codeInconsistentGroupProto}
			return errSkip
		}
		m := g.member(memberID)
		switch g.State {
		case StateEmpty:
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: codeUnknownMemberID}
			return errSkip
		case StatePreparingRebalance:
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: codeRebalanceInProgress}
			return errSkip
		case StateStable:
			m.Synced, m.dirty = true, true
			m.SessionDeadline = now.Add(m.SessionTimeout)
			resp = g.syncAnswer(m)
			return nil
		}
		// CompletingRebalance.
		m.Synced, m.dirty = true, true
		m.SessionDeadline = now.Add(m.SessionTimeout)
		if m.ID != g.Leader {
			wait = true
			return nil
		}
		assign := map[string][]byte{}
		for _, a := range req.GetAssignments() {
			assign[a.GetMemberId()] = a.GetAssignment()
		}
		for _, am := range g.active() {
			am.Assignment = assign[am.ID]
			if am.Assignment == nil {
				am.Assignment = []byte{}
			}
			am.dirty = true
		}
		g.State = StateStable
		g.Deadline = time.Time{}
		g.touch()
		resp = g.syncAnswer(m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !wait {
		return resp, nil
	}
	err = c.wait(ctx, gid, func(g *group) bool {
		m := g.member(memberID)
		switch {
		case m == nil:
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: missingMemberCode(g, memberID, instanceID)}
		case g.Generation != gen || g.State == StatePreparingRebalance:
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: codeRebalanceInProgress}
		case g.State == StateStable:
			resp = g.syncAnswer(m)
		case g.State == StateEmpty:
			resp = &coordinatorv1.SyncGroupResponse{ErrorCode: codeUnknownMemberID}
		default:
			return false
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (g *group) syncAnswer(m *member) *coordinatorv1.SyncGroupResponse {
	a := m.Assignment
	if a == nil {
		a = []byte{}
	}
	return &coordinatorv1.SyncGroupResponse{ProtocolType: g.ProtocolType, ProtocolName: g.Protocol, Assignment: a}
}

// Heartbeat implements Kafka's handleHeartbeat: it renews the member's session.
func (c *Coordinator) Heartbeat(ctx context.Context, req *coordinatorv1.HeartbeatRequest) (_ *coordinatorv1.HeartbeatResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	gid, gen := req.GetGroupId(), req.GetGenerationId()
	if gid == "" {
		return &coordinatorv1.HeartbeatResponse{ErrorCode: codeInvalidGroupID}, nil
	}
	var instanceID *string
	if req.GroupInstanceId != nil {
		v := req.GetGroupInstanceId()
		instanceID = &v
	}
	code := codeNone
	err = c.withGroup(ctx, gid, false, func(g *group, now time.Time) error {
		if !g.exists || g.State == StateEmpty {
			code = codeUnknownMemberID
			return errSkip
		}
		if code = g.validateMember(req.GetMemberId(), instanceID, &gen); code != codeNone {
			return errSkip
		}
		m := g.member(req.GetMemberId())
		m.SessionDeadline, m.dirty = now.Add(m.SessionTimeout), true
		if g.State == StatePreparingRebalance {
			code = codeRebalanceInProgress
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &coordinatorv1.HeartbeatResponse{ErrorCode: code}, nil
}

// LeaveGroup implements Kafka's handleLeaveGroup (KIP-345 batch): each member leaves by
// member id, or by group.instance.id.
func (c *Coordinator) LeaveGroup(ctx context.Context, req *coordinatorv1.LeaveGroupRequest) (_ *coordinatorv1.LeaveGroupResponse, err error) {
	defer func() { err = rpcerr.Status(err) }()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.LeaveGroupResponse{}
	if req.GetGroupId() == "" {
		resp.ErrorCode = codeInvalidGroupID
		return resp, nil
	}
	err = c.withGroup(ctx, req.GetGroupId(), false, func(g *group, now time.Time) error {
		resp.Members = resp.Members[:0]
		for _, lm := range req.GetMembers() {
			out := &coordinatorv1.LeftMember{MemberId: lm.GetMemberId(), GroupInstanceId: lm.GroupInstanceId}
			resp.Members = append(resp.Members, out)
			var m *member
			switch {
			case !g.exists:
				out.ErrorCode = codeUnknownMemberID
				continue
			case lm.GroupInstanceId != nil:
				m = g.byInstance(lm.GetGroupInstanceId())
				if m != nil && lm.GetMemberId() != "" && m.ID != lm.GetMemberId() {
					out.ErrorCode = codeFencedInstanceID
					continue
				}
			default:
				m = g.member(lm.GetMemberId())
			}
			if m == nil {
				out.ErrorCode = codeUnknownMemberID
				continue
			}
			c.log.Debug("member leaving", zap.String("group", g.ID), zap.String("member", m.ID), zap.String("reason", lm.GetReason()))
			g.removeAndRebalance(m, now, c.cfg.InitialRebalanceDelay)
		}
		if !g.dirty {
			return errSkip
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
