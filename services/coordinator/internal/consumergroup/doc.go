package consumergroup

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"time"
)

// Member reconciliation states (Kafka's MemberState).
const (
	// stateStable: the member owns its share of the target assignment at its epoch.
	stateStable = "STABLE"
	// stateUnrevoked: the member must give up partitions (revoking) before it may
	// move to the target epoch.
	stateUnrevoked = "UNREVOKED_PARTITIONS"
	// stateUnreleased: the member is at the target epoch but some of its target
	// partitions are still owned by members that have not revoked them yet.
	stateUnreleased = "UNRELEASED_PARTITIONS"
)

// Group states as Kafka's ConsumerGroup names them.
const (
	groupEmpty       = "Empty"
	groupAssigning   = "Assigning"
	groupReconciling = "Reconciling"
	groupStable      = "Stable"
)

// Member epochs with a meaning of their own (KIP-848).
const (
	epochJoin        = 0
	epochLeave       = -1
	epochStaticLeave = -2
)

// assignment maps a topic id (hex) to sorted partitions.
type assignment map[string][]int32

// topicMeta is what the group knows of a subscribed topic at its group epoch.
type topicMeta struct {
	ID         string `json:"id"` // hex topic id
	Partitions int32  `json:"p"`
}

// member is one consumer group member (Kafka's ConsumerGroupMember).
type member struct {
	ID         string  `json:"id"`
	InstanceID *string `json:"inst,omitempty"`
	RackID     *string `json:"rack,omitempty"`
	ClientID   string  `json:"cid"`
	ClientHost string  `json:"host"`
	// Epoch is the member epoch; epochStaticLeave while a static member is away.
	Epoch     int32 `json:"e"`
	PrevEpoch int32 `json:"pe"`
	// State is one of the reconciliation states.
	State              string   `json:"s"`
	RebalanceTimeoutMs int32    `json:"rt"`
	Topics             []string `json:"t,omitempty"`
	Regex              string   `json:"re,omitempty"`
	// Authz is the caller the member's regex is authorized for (nil: every match is
	// assigned). RegexAllowed are the sorted names among the regex's matches that
	// caller may DESCRIBE, as of the member's last heartbeat: a topic that starts
	// to match is assigned only once a heartbeat of the member finds it allowed.
	Authz        *regexAuthz `json:"az,omitempty"`
	RegexAllowed []string    `json:"ra,omitempty"`
	Assignor     string      `json:"as,omitempty"`
	// Assigned are the partitions the member may own now; Revoking the ones it must
	// give up before it gets more.
	Assigned assignment `json:"a,omitempty"`
	Revoking assignment `json:"r,omitempty"`
	// SessionDeadline: removed from the group unless it heartbeats by then.
	SessionDeadline time.Time `json:"sd"`
	// RevokeDeadline (unrevoked only): fenced unless it revokes by then.
	RevokeDeadline time.Time `json:"rd,omitzero"`
}

// regexAuthz is a coordinatorv1.RegexAuthorization as a member keeps it.
type regexAuthz struct {
	Principal    string `json:"p"`
	Host         string `json:"h"`
	AllowIfNoACL bool   `json:"n,omitempty"`
}

// doc is a consumer group's whole state, stored as one JSON document under the
// group's row lock.
type doc struct {
	GroupEpoch      int32                 `json:"ge"`
	AssignmentEpoch int32                 `json:"ae"`
	Assignor        string                `json:"as,omitempty"`
	Topics          map[string]topicMeta  `json:"tp,omitempty"` // subscribed topics by name
	Members         map[string]*member    `json:"m,omitempty"`
	Target          map[string]assignment `json:"ta,omitempty"` // target assignment by member id
}

func newDoc() *doc {
	return &doc{Topics: map[string]topicMeta{}, Members: map[string]*member{}, Target: map[string]assignment{}}
}

// state is the group state Kafka derives from the epochs.
func (d *doc) state() string {
	switch {
	case len(d.Members) == 0:
		return groupEmpty
	case d.GroupEpoch > d.AssignmentEpoch:
		return groupAssigning
	}
	for _, m := range d.Members {
		if m.Epoch != d.AssignmentEpoch || m.State != stateStable {
			return groupReconciling
		}
	}
	return groupStable
}

// nextDeadline is the earliest session or revocation deadline (zero without members).
func (d *doc) nextDeadline() time.Time {
	var t time.Time
	for _, m := range d.Members {
		for _, x := range []time.Time{m.SessionDeadline, m.RevokeDeadline} {
			if !x.IsZero() && (t.IsZero() || x.Before(t)) {
				t = x
			}
		}
	}
	return t
}

func (d *doc) byInstance(id string) *member {
	for _, m := range d.Members {
		if m.InstanceID != nil && *m.InstanceID == id {
			return m
		}
	}
	return nil
}

// topicNames maps topic ids (hex) to the names the group knows.
func (d *doc) topicNames() map[string]string {
	out := make(map[string]string, len(d.Topics))
	for name, t := range d.Topics {
		out[t.ID] = name
	}
	return out
}

func idHex(id [16]byte) string { return hex.EncodeToString(id[:]) }

func idBytes(h string) []byte {
	b, _ := hex.DecodeString(h)
	return b
}

// contains reports whether partition p of topic is in a.
func (a assignment) contains(topic string, p int32) bool {
	_, ok := slices.BinarySearch(a[topic], p)
	return ok
}

func (a assignment) empty() bool {
	for _, ps := range a {
		if len(ps) > 0 {
			return false
		}
	}
	return true
}

func (a assignment) equal(b assignment) bool {
	return maps.EqualFunc(a.compact(), b.compact(), slices.Equal[[]int32])
}

// compact drops topics without partitions.
func (a assignment) compact() assignment {
	out := assignment{}
	for t, ps := range a {
		if len(ps) > 0 {
			out[t] = ps
		}
	}
	return out
}

func (a assignment) add(topic string, p int32) {
	ps := a[topic]
	i, ok := slices.BinarySearch(ps, p)
	if !ok {
		a[topic] = slices.Insert(ps, i, p)
	}
}

// minus is a without b; intersect is a and b.
func (a assignment) minus(b assignment) assignment {
	out := assignment{}
	for t, ps := range a {
		for _, p := range ps {
			if !b.contains(t, p) {
				out.add(t, p)
			}
		}
	}
	return out
}

func (a assignment) intersect(b assignment) assignment {
	out := assignment{}
	for t, ps := range a {
		for _, p := range ps {
			if b.contains(t, p) {
				out.add(t, p)
			}
		}
	}
	return out
}

func (a assignment) clone() assignment {
	out := assignment{}
	for t, ps := range a {
		if len(ps) > 0 {
			out[t] = slices.Clone(ps)
		}
	}
	return out
}

func slicesSortFunc(ms []*member) {
	slices.SortFunc(ms, func(a, b *member) int { return strings.Compare(a.ID, b.ID) })
}

// newMemberID makes a member id for a v0 join (v1 clients bring their own): 16 random
// bytes, URL-safe base64, as Kafka's Uuid.randomUuid().toString().
func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
