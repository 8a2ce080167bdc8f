package group

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// State is a classic group's state, named as Kafka names it (GroupState.java).
type State string

// The classic group states. Dead groups have no row: a deleted group is described
// as Dead.
const (
	StateEmpty               State = "Empty"
	StatePreparingRebalance  State = "PreparingRebalance"
	StateCompletingRebalance State = "CompletingRebalance"
	StateStable              State = "Stable"
	StateDead                State = "Dead"
)

// Kafka error codes used by the group coordinator.
var (
	codeNone                   = int32(0)
	codeOffsetMetadataTooLarge = int32(kerr.OffsetMetadataTooLarge.Code)
	codeUnstableOffsetCommit   = int32(kerr.UnstableOffsetCommit.Code)
	codeIllegalGeneration      = int32(kerr.IllegalGeneration.Code)
	codeInconsistentGroupProto = int32(kerr.InconsistentGroupProtocol.Code)
	codeInvalidGroupID         = int32(kerr.InvalidGroupID.Code)
	codeUnknownMemberID        = int32(kerr.UnknownMemberID.Code)
	codeInvalidSessionTimeout  = int32(kerr.InvalidSessionTimeout.Code)
	codeRebalanceInProgress    = int32(kerr.RebalanceInProgress.Code)
	codeNonEmptyGroup          = int32(kerr.NonEmptyGroup.Code)
	codeGroupIDNotFound        = int32(kerr.GroupIDNotFound.Code)
	codeMemberIDRequired       = int32(kerr.MemberIDRequired.Code)
	codeFencedInstanceID       = int32(kerr.FencedInstanceID.Code)
	codeGroupSubscribedToTopic = int32(kerr.GroupSubscribedToTopic.Code)
)

// protocol is one protocol a member supports, with its metadata.
type protocol struct {
	Name     string
	Metadata []byte
}

// member is one group member (or a KIP-394 pending member) as stored in
// consumer_group_members.
type member struct {
	ID               string
	InstanceID       *string
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	ProtocolType     string
	Protocols        []protocol
	Assignment       []byte
	// Pending: the id was handed out with MEMBER_ID_REQUIRED and no JoinGroup with it
	// arrived yet (KIP-394). Pending members are not members of any generation.
	Pending bool
	// AwaitingJoin: the member joined in the current join phase and waits for its
	// JoinGroup answer (Kafka's awaitingJoinCallback). Keeps the session alive.
	AwaitingJoin bool
	// Synced: SyncGroup arrived in the current generation.
	Synced bool
	// Generation is the generation the member's last JoinGroup answer carries.
	Generation      int32
	SessionDeadline time.Time
	JoinedAt        time.Time

	isNew   bool
	dirty   bool
	deleted bool
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.Protocols {
		if p.Name == name {
			return p.Metadata
		}
	}
	return nil
}

func (m *member) supports(name string) bool {
	for _, p := range m.Protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

func sameProtocols(a, b []protocol) bool {
	return slices.EqualFunc(a, b, func(x, y protocol) bool {
		return x.Name == y.Name && bytes.Equal(x.Metadata, y.Metadata)
	})
}

// snapshotMember is one member of a completed join phase, as the leader's JoinGroup
// answer lists it (consumer_groups.join_members).
type snapshotMember struct {
	MemberID   string  `json:"m"`
	InstanceID *string `json:"i,omitempty"`
	Metadata   []byte  `json:"d"`
}

// group is one group's state, loaded under its row lock, mutated, and saved.
type group struct {
	ID           string
	State        State
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	// Deadline: end of the join phase (PreparingRebalance) or of the wait for the
	// leader's SyncGroup (CompletingRebalance). Zero otherwise.
	Deadline time.Time
	// JoinNotBefore: the initial delayed join of an empty group does not end before.
	JoinNotBefore time.Time
	JoinMembers   []snapshotMember
	EmptySince    time.Time

	// Type is store.GroupTypeClassic or store.GroupTypeConsumer (a KIP-848 group,
	// internal/consumergroup's; consumerMembers says whether it has members).
	Type            string
	consumerMembers bool
	consumerDoc     []byte
	// toClassic: saveGroup turns the (empty) consumer group into a classic one first.
	toClassic bool

	members map[string]*member
	// exists is false for a group that has no row yet.
	exists  bool
	dirty   bool
	deleted bool
	// changed is set when waiters should be woken (anything but a session renewal).
	changed bool
	// wrote is set when fn wrote rows of its own (offsets) in the transaction.
	wrote bool
}

func newGroup(id string) *group {
	return &group{ID: id, State: StateEmpty, members: map[string]*member{}}
}

func (g *group) touch() { g.dirty, g.changed = true, true }

// active returns the non-pending members sorted by join time (then id).
func (g *group) active() []*member {
	out := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		if !m.deleted && !m.Pending {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].JoinedAt.Equal(out[j].JoinedAt) {
			return out[i].JoinedAt.Before(out[j].JoinedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (g *group) member(id string) *member {
	m := g.members[id]
	if m == nil || m.deleted {
		return nil
	}
	return m
}

func (g *group) byInstance(instanceID string) *member {
	for _, m := range g.members {
		if !m.deleted && m.InstanceID != nil && *m.InstanceID == instanceID {
			return m
		}
	}
	return nil
}

func (g *group) hasPending() bool {
	for _, m := range g.members {
		if !m.deleted && m.Pending {
			return true
		}
	}
	return false
}

func (g *group) addMember(m *member) {
	m.isNew, m.dirty = true, true
	g.members[m.ID] = m
	g.touch()
}

func (g *group) removeMember(m *member) {
	m.deleted = true
	if g.Leader == m.ID {
		g.Leader = ""
	}
	g.touch()
}

// validateMember is Kafka's validateCurrentMember: static fencing first, then the
// member id, then the generation (skipped when generation is nil).
func (g *group) validateMember(memberID string, instanceID *string, generation *int32) int32 {
	if instanceID != nil {
		if m := g.byInstance(*instanceID); m != nil && m.ID != memberID {
			return codeFencedInstanceID
		}
	}
	m := g.member(memberID)
	if m == nil || m.Pending {
		return codeUnknownMemberID
	}
	if generation != nil && *generation != g.Generation {
		return codeIllegalGeneration
	}
	return codeNone
}

// candidateProtocols returns the protocols every active member supports, in the order
// the first member lists them.
func (g *group) candidateProtocols(extra *member) []string {
	ms := g.active()
	if extra != nil {
		ms = append(ms, extra)
	}
	if len(ms) == 0 {
		return nil
	}
	var out []string
	for _, p := range ms[0].Protocols {
		all := true
		for _, m := range ms[1:] {
			if !m.supports(p.Name) {
				all = false
				break
			}
		}
		if all {
			out = append(out, p.Name)
		}
	}
	return out
}

// supportsProtocols is Kafka's GroupMetadata.supportsProtocols: a new or changed member
// may join only if it shares the protocol type and at least one protocol with every
// other member.
func (g *group) supportsProtocols(self string, protocolType string, protocols []protocol) bool {
	var others []*member
	for _, m := range g.active() {
		if m.ID != self {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.ProtocolType {
		return false
	}
	for _, p := range protocols {
		all := true
		for _, m := range others {
			if !m.supports(p.Name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// selectProtocol is Kafka's vote: each member votes for its most preferred candidate;
// the most votes wins, ties going to the earlier candidate.
func (g *group) selectProtocol() string {
	cands := g.candidateProtocols(nil)
	if len(cands) == 0 {
		return ""
	}
	votes := map[string]int{}
	for _, m := range g.active() {
		for _, p := range m.Protocols {
			if slices.Contains(cands, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

func (g *group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.active() {
		d = max(d, m.RebalanceTimeout)
	}
	return d
}

// prepareRebalance moves the group to PreparingRebalance (Kafka's prepareRebalance):
// every member must rejoin before the deadline (largest rebalance timeout). From
// Empty the join phase also waits InitialRebalanceDelay for more members.
func (g *group) prepareRebalance(now time.Time, initialDelay time.Duration) {
	if g.State == StatePreparingRebalance {
		return
	}
	timeout := g.maxRebalanceTimeout()
	g.Deadline = now.Add(timeout)
	g.JoinNotBefore = time.Time{}
	if g.State == StateEmpty && initialDelay > 0 {
		g.JoinNotBefore = minTime(now.Add(initialDelay), g.Deadline)
	}
	for _, m := range g.active() {
		if m.Synced {
			m.Synced, m.dirty = false, true
		}
	}
	g.State = StatePreparingRebalance
	g.touch()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// extendInitialDelay pushes the initial delayed join's end out when a new member
// joins (Kafka's InitialDelayedJoin), never past the rebalance deadline.
func (g *group) extendInitialDelay(now time.Time, initialDelay time.Duration) {
	if g.State != StatePreparingRebalance || g.JoinNotBefore.IsZero() {
		return
	}
	g.JoinNotBefore = minTime(now.Add(initialDelay), g.Deadline)
	g.touch()
}

// maybeCompleteJoin ends the join phase when every member rejoined (and no KIP-394
// member is pending, and the initial delay is over), or when the deadline passed.
// It reports whether the phase ended.
func (g *group) maybeCompleteJoin(now time.Time) bool {
	if g.State != StatePreparingRebalance {
		return false
	}
	all := !g.hasPending()
	for _, m := range g.active() {
		if !m.AwaitingJoin {
			all = false
		}
	}
	ready := all && !now.Before(g.JoinNotBefore)
	if !ready && now.Before(g.Deadline) {
		return false
	}
	return g.completeJoin(now)
}

// completeJoin is Kafka's onCompleteJoin: dynamic members that did not rejoin and
// pending members are removed, a leader is chosen among the rejoined members, the
// generation advances and every rejoined member gets its answer.
func (g *group) completeJoin(now time.Time) bool {
	for _, m := range g.members {
		if m.deleted {
			continue
		}
		if m.Pending || (!m.AwaitingJoin && m.InstanceID == nil) {
			g.removeMember(m)
		}
	}
	ms := g.active()
	if len(ms) > 0 {
		// Kafka's maybeElectNewJoinedLeader.
		if l := g.member(g.Leader); l == nil || !l.AwaitingJoin {
			g.Leader = ""
			for _, m := range ms {
				if m.AwaitingJoin {
					g.Leader = m.ID
					break
				}
			}
		}
		if g.Leader == "" {
			// Only static members that did not rejoin remain: wait for their sessions
			// to expire (Kafka re-arms the delayed join).
			g.Deadline = now.Add(g.maxRebalanceTimeout())
			g.touch()
			return false
		}
	}
	g.Generation++
	g.JoinNotBefore = time.Time{}
	g.JoinMembers = nil
	if len(ms) == 0 {
		g.State = StateEmpty
		g.Protocol = ""
		g.Leader = ""
		g.Deadline = time.Time{}
		g.EmptySince = now
		g.touch()
		return true
	}
	g.State = StateCompletingRebalance
	g.Protocol = g.selectProtocol()
	g.Deadline = now.Add(g.maxRebalanceTimeout())
	for _, m := range ms {
		g.JoinMembers = append(g.JoinMembers, snapshotMember{MemberID: m.ID, InstanceID: m.InstanceID, Metadata: m.metadataFor(g.Protocol)})
		if m.AwaitingJoin {
			m.AwaitingJoin = false
			m.Generation = g.Generation
			m.SessionDeadline = now.Add(m.SessionTimeout)
		}
		m.Synced = false
		m.Assignment = nil
		m.dirty = true
	}
	g.touch()
	return true
}

// expire removes members whose session ended and ends phases whose deadline passed.
// Members waiting for their JoinGroup answer do not expire (Kafka keeps them alive).
func (g *group) expire(now time.Time, initialDelay time.Duration) {
	for _, m := range g.members {
		if m.deleted || m.AwaitingJoin || now.Before(m.SessionDeadline) {
			continue
		}
		g.removeAndRebalance(m, now, initialDelay)
	}
	switch g.State {
	case StatePreparingRebalance:
		g.maybeCompleteJoin(now)
	case StateCompletingRebalance:
		if !g.Deadline.IsZero() && !now.Before(g.Deadline) {
			// Kafka 3.2+ (KAFKA-13419): members that did not sync in time are removed
			// and the group rebalances.
			for _, m := range g.active() {
				if !m.Synced {
					g.removeMember(m)
				}
			}
			g.prepareRebalance(now, initialDelay)
			g.maybeCompleteJoin(now)
		}
	}
}

// removeAndRebalance is Kafka's removeMemberAndUpdateGroup.
func (g *group) removeAndRebalance(m *member, now time.Time, initialDelay time.Duration) {
	pending := m.Pending
	g.removeMember(m)
	if pending {
		g.maybeCompleteJoin(now)
		return
	}
	switch g.State {
	case StateStable, StateCompletingRebalance:
		g.prepareRebalance(now, initialDelay)
		g.maybeCompleteJoin(now)
	case StatePreparingRebalance:
		g.maybeCompleteJoin(now)
	}
}

// newMemberID builds a member id the way Kafka does: client id, dash, random UUID.
func newMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return clientID + "-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
