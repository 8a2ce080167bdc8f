package consumergroup

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func newShareTest(t *testing.T) *ShareCoordinator {
	t.Helper()
	s, err := NewShare(ShareConfig{SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, MaxSize: 4}, newTest(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func shareJoin(id string, topics ...string) *coordinatorv1.ShareGroupHeartbeatRequest {
	return &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberId: id, MemberEpoch: 0,
		HasSubscribedTopicNames: true, SubscribedTopicNames: topics}
}

func shareBeat(id string, epoch int32) *coordinatorv1.ShareGroupHeartbeatRequest {
	return &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberId: id, MemberEpoch: epoch}
}

// checkShareTarget checks the simple assignor's promises for one topic of n
// partitions over the members subscribed to it: every partition assigned, each to
// ceil(members/partitions) members, member counts within one of each other.
func checkShareTarget(t *testing.T, target map[string]assignment, topic string, n int32, members []string) {
	t.Helper()
	sharing := (len(members) + int(n) - 1) / int(n)
	holders := map[int32]int{}
	lo, hi := 1<<30, 0
	for _, m := range members {
		ps := target[m][topic]
		lo, hi = min(lo, len(ps)), max(hi, len(ps))
		for _, p := range ps {
			if p < 0 || p >= n {
				t.Fatalf("%s assigned partition %d of %d", m, p, n)
			}
			holders[p]++
		}
	}
	for p := range n {
		if holders[p] != sharing {
			t.Errorf("partition %d held by %d members, want %d (%d members, %d partitions): %v", p, holders[p], sharing, len(members), n, target)
		}
	}
	if hi-lo > 1 {
		t.Errorf("member partition counts range %d..%d: %v", lo, hi, target)
	}
}

func TestShareAssignSimple(t *testing.T) {
	tA := topicID(1)
	for _, c := range []struct {
		members int
		parts   int32
	}{{1, 3}, {3, 3}, {2, 5}, {4, 2}, {5, 2}, {7, 3}, {3, 1}, {6, 6}} {
		t.Run(fmt.Sprintf("%dm_%dp", c.members, c.parts), func(t *testing.T) {
			spec := assignorSpec{subs: map[string][]string{}, partitions: map[string]int32{tA: c.parts}}
			var ids []string
			for i := range c.members {
				id := fmt.Sprintf("m%d", i)
				ids = append(ids, id)
				spec.subs[id] = []string{tA}
			}
			target := assignSimple(spec)
			checkShareTarget(t, target, tA, c.parts, ids)
			// Sticky: the same input again moves nothing.
			spec.current = target
			if again := assignSimple(spec); !equalTargets(again, target) {
				t.Errorf("reassignment moved partitions: %v -> %v", target, again)
			}
		})
	}
}

func equalTargets(a, b map[string]assignment) bool {
	if len(a) != len(b) {
		return false
	}
	for m, x := range a {
		if !x.equal(b[m]) {
			return false
		}
	}
	return true
}

// TestShareAssignSticky: a member joining a balanced group takes partitions from the
// others without shuffling the rest, and the result keeps the assignor's promises.
func TestShareAssignSticky(t *testing.T) {
	tA := topicID(1)
	spec := assignorSpec{subs: map[string][]string{"a": {tA}, "b": {tA}, "c": {tA}}, partitions: map[string]int32{tA: 12}}
	before := assignSimple(spec)
	spec.subs["d"] = []string{tA}
	spec.current = before
	after := assignSimple(spec)
	checkShareTarget(t, after, tA, 12, []string{"a", "b", "c", "d"})
	for _, m := range []string{"a", "b", "c"} {
		if kept := after[m].intersect(before[m]); len(kept[tA]) != 3 {
			t.Errorf("%s kept %v of %v, want 3 of its partitions", m, kept[tA], before[m][tA])
		}
	}
}

// TestShareHeartbeatAssignsAll drives three members of a share group over a 3-partition
// and a 1-partition topic through joins, heartbeats in random order, a leave and a
// session expiry, and checks what the members were sent: each partition of the first
// topic to exactly one member, the second topic's single partition to all of them,
// epochs at the assignment epoch once stable.
func TestShareHeartbeatAssignsAll(t *testing.T) {
	s := newShareTest(t)
	d := newDoc()
	topics := []topicInfo{{Name: "a", ID: topicID(1), Partitions: 3}, {Name: "b", ID: topicID(2), Partitions: 1}}
	now := time.Unix(1000, 0)
	type cl struct {
		epoch int32
		owns  assignment
	}
	clients := map[string]*cl{}
	apply := func(id string, o outcome) {
		t.Helper()
		if o.code != 0 {
			t.Fatalf("%s: error %d %s", id, o.code, o.msg)
		}
		clients[id].epoch = o.epoch
		if o.sendAll {
			clients[id].owns = o.member.Assigned.clone()
		}
	}
	for _, id := range []string{"m0", "m1", "m2"} {
		clients[id] = &cl{}
		o, changed := s.heartbeat(d, shareJoin(id, "a", "b"), topics, now, s.cfg.SessionTimeout)
		if !changed || !o.sendAll {
			t.Fatalf("join %s: changed %v sent %v", id, changed, o.sendAll)
		}
		apply(id, o)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	ids := []string{"m0", "m1", "m2"}
	for range 20 {
		id := ids[rng.IntN(len(ids))]
		o, _ := s.heartbeat(d, shareBeat(id, clients[id].epoch), topics, now, s.cfg.SessionTimeout)
		apply(id, o)
	}
	for _, id := range ids {
		o, _ := s.heartbeat(d, shareBeat(id, clients[id].epoch), topics, now, s.cfg.SessionTimeout)
		apply(id, o)
	}
	check := func(ids []string) {
		t.Helper()
		seen := map[int32]string{}
		for _, id := range ids {
			c := clients[id]
			if c.epoch != d.AssignmentEpoch {
				t.Errorf("%s at epoch %d, assignment epoch %d", id, c.epoch, d.AssignmentEpoch)
			}
			if len(c.owns[topicID(2)]) != 1 {
				t.Errorf("%s owns %v of b, want its single partition", id, c.owns[topicID(2)])
			}
			for _, p := range c.owns[topicID(1)] {
				if o, dup := seen[p]; dup && len(ids) <= 3 {
					t.Errorf("a/%d sent to %s and %s", p, o, id)
				}
				seen[p] = id
			}
		}
		if len(seen) != 3 {
			t.Errorf("partitions of a owned: %v, want all 3", seen)
		}
		if st := shareState(d); st != groupShareStable {
			t.Errorf("state %s, want Stable", st)
		}
	}
	check(ids)

	// m1 leaves: the others take its partition at their next heartbeat (check sees
	// all three partitions of a owned again).
	epoch := d.GroupEpoch
	if o, _ := s.heartbeat(d, shareBeat("m1", -1), topics, now, s.cfg.SessionTimeout); o.code != 0 || o.epoch != -1 {
		t.Fatalf("leave: %+v", o)
	}
	if d.GroupEpoch != epoch+1 || d.Members["m1"] != nil {
		t.Fatalf("after leave: epoch %d (was %d), m1 %v", d.GroupEpoch, epoch, d.Members["m1"])
	}
	ids = []string{"m0", "m2"}
	for _, id := range ids {
		o, _ := s.heartbeat(d, shareBeat(id, clients[id].epoch), topics, now, s.cfg.SessionTimeout)
		apply(id, o)
	}
	check(ids)

	// m2's session ends; m0 alone gets everything.
	later := now.Add(5 * time.Second)
	o, _ := s.heartbeat(d, shareBeat("m0", clients["m0"].epoch), topics, later, s.cfg.SessionTimeout)
	apply("m0", o)
	if gone := s.expire(d, topics, now.Add(11*time.Second)); len(gone) != 1 || gone[0] != "m2" {
		t.Fatalf("expired %v, want [m2]", gone)
	}
	o, _ = s.heartbeat(d, shareBeat("m0", clients["m0"].epoch), topics, now.Add(11*time.Second), s.cfg.SessionTimeout)
	apply("m0", o)
	if got := clients["m0"].owns[topicID(1)]; len(got) != 3 {
		t.Errorf("m0 alone owns %v of a, want all 3", got)
	}
	// The expired member is unknown now.
	if o, _ := s.heartbeat(d, shareBeat("m2", clients["m2"].epoch), topics, now.Add(11*time.Second), s.cfg.SessionTimeout); o.code != kerr.UnknownMemberID.Code {
		t.Errorf("expired member heartbeat: code %d, want UNKNOWN_MEMBER_ID", o.code)
	}
	if gone := s.expire(d, topics, now.Add(time.Hour)); len(gone) != 1 || shareState(d) != groupEmpty {
		t.Errorf("expire all: gone %v state %s", gone, shareState(d))
	}
}

// TestShareHeartbeatEpochs checks fencing: a member may heartbeat at its epoch or the
// one before it (an answer lost); anything else is FENCED_MEMBER_EPOCH; an unknown
// member is UNKNOWN_MEMBER_ID; a rejoin keeps the member.
func TestShareHeartbeatEpochs(t *testing.T) {
	s := newShareTest(t)
	d := newDoc()
	topics := []topicInfo{{Name: "a", ID: topicID(1), Partitions: 2}}
	now := time.Unix(1000, 0)
	o, _ := s.heartbeat(d, shareJoin("x", "a"), topics, now, s.cfg.SessionTimeout)
	if o.code != 0 || o.epoch != 1 {
		t.Fatalf("join: %+v", o)
	}
	// y joins: the group epoch moves to 2; x moves there at its heartbeat.
	if o, _ := s.heartbeat(d, shareJoin("y", "a"), topics, now, s.cfg.SessionTimeout); o.code != 0 || o.epoch != 2 {
		t.Fatalf("join y: %+v", o)
	}
	o, _ = s.heartbeat(d, shareBeat("x", 1), topics, now, s.cfg.SessionTimeout)
	if o.code != 0 || o.epoch != 2 || !o.sendAll {
		t.Fatalf("x at 1: %+v", o)
	}
	// Its answer was lost: epoch 1 still works, the assignment is unchanged.
	if o, _ := s.heartbeat(d, shareBeat("x", 1), topics, now, s.cfg.SessionTimeout); o.code != 0 || o.epoch != 2 {
		t.Fatalf("x at previous epoch: %+v", o)
	}
	for _, e := range []int32{3, 7} {
		if o, changed := s.heartbeat(d, shareBeat("x", e), topics, now, s.cfg.SessionTimeout); o.code != kerr.FencedMemberEpoch.Code || changed {
			t.Errorf("x at %d: code %d changed %v, want FENCED_MEMBER_EPOCH", e, o.code, changed)
		}
	}
	// z joins (epoch 3) and x moves to 3: epoch 1 is now two behind.
	s.heartbeat(d, shareJoin("z", "a"), topics, now, s.cfg.SessionTimeout)
	if o, _ := s.heartbeat(d, shareBeat("x", 2), topics, now, s.cfg.SessionTimeout); o.code != 0 || o.epoch != 3 {
		t.Fatalf("x at 2: %+v", o)
	}
	if o, _ := s.heartbeat(d, shareBeat("x", 1), topics, now, s.cfg.SessionTimeout); o.code != kerr.FencedMemberEpoch.Code {
		t.Errorf("x at 1 after two moves: code %d, want FENCED_MEMBER_EPOCH", o.code)
	}
	if o, _ := s.heartbeat(d, shareBeat("nobody", 3), topics, now, s.cfg.SessionTimeout); o.code != kerr.UnknownMemberID.Code {
		t.Errorf("unknown member: code %d", o.code)
	}
	if o, _ := s.heartbeat(d, shareBeat("nobody", -1), topics, now, s.cfg.SessionTimeout); o.code != kerr.UnknownMemberID.Code {
		t.Errorf("unknown member leaving: code %d", o.code)
	}
	// A fenced member rejoins under its id: it keeps its place and gets its assignment.
	epoch := d.GroupEpoch
	o, _ = s.heartbeat(d, shareJoin("x", "a"), topics, now, s.cfg.SessionTimeout)
	if o.code != 0 || o.epoch != 3 || !o.sendAll || d.GroupEpoch != epoch {
		t.Errorf("rejoin: %+v, group epoch %d (was %d)", o, d.GroupEpoch, epoch)
	}
	// A subscription change moves the group epoch.
	topics = append(topics, topicInfo{Name: "b", ID: topicID(2), Partitions: 1})
	o, _ = s.heartbeat(d, shareJoin("x", "a", "b"), topics, now, s.cfg.SessionTimeout)
	if o.code != 0 || o.epoch != epoch+1 || len(o.member.Assigned[topicID(2)]) != 1 {
		t.Errorf("subscribe to b: %+v", o)
	}
	// The group is full at 4 members (MaxSize).
	s.heartbeat(d, shareJoin("w", "a"), topics, now, s.cfg.SessionTimeout)
	if o, _ := s.heartbeat(d, shareJoin("v", "a"), topics, now, s.cfg.SessionTimeout); o.code != kerr.GroupMaxSizeReached.Code {
		t.Errorf("fifth member: code %d, want GROUP_MAX_SIZE_REACHED", o.code)
	}
}

func TestShareHeartbeatValidation(t *testing.T) {
	blank := " "
	for _, c := range []struct {
		name string
		req  *coordinatorv1.ShareGroupHeartbeatRequest
	}{
		{"no member id", &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberEpoch: 0, SubscribedTopicNames: []string{"a"}}},
		{"blank group", &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "  ", MemberId: "m", SubscribedTopicNames: []string{"a"}}},
		{"blank rack", &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberId: "m", RackId: &blank, SubscribedTopicNames: []string{"a"}}},
		{"join without topics", &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberId: "m"}},
		{"epoch -2", &coordinatorv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: -2}},
	} {
		o := validateShare(c.req)
		if o == nil || o.code != kerr.InvalidRequest.Code {
			t.Errorf("%s: %+v, want INVALID_REQUEST", c.name, o)
		}
	}
	if o := validateShare(shareJoin("m", "a")); o != nil {
		t.Errorf("valid join refused: %+v", o)
	}
}
