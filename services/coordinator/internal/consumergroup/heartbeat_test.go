package consumergroup

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func newTest(t *testing.T) *Coordinator {
	t.Helper()
	c, err := New(Config{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func topicID(n int) string { return hex.EncodeToString([]byte(fmt.Sprintf("topic-%010d", n))) }

// client is a simulated consumer: it owns what the last answer assigned it and
// reports that in every heartbeat.
type client struct {
	id    string
	epoch int32
	owns  assignment
}

func (cl *client) req(epoch int32, topics []string) *coordinatorv1.ConsumerGroupHeartbeatRequest {
	r := &coordinatorv1.ConsumerGroupHeartbeatRequest{Version: 1, GroupId: "g", MemberId: cl.id, MemberEpoch: epoch,
		RebalanceTimeoutMs: -1, HasTopicPartitions: true}
	if epoch == 0 {
		r.RebalanceTimeoutMs = 60000
		r.HasSubscribedTopicNames, r.SubscribedTopicNames = true, topics
	}
	for _, t := range sortedKeys(cl.owns) {
		r.TopicPartitions = append(r.TopicPartitions, &coordinatorv1.TopicPartitions{TopicId: idBytes(t), Partitions: cl.owns[t]})
	}
	return r
}

func (cl *client) apply(t *testing.T, o outcome, c *Coordinator, d *doc) {
	t.Helper()
	if o.code != 0 {
		t.Fatalf("member %s: error %d %s", cl.id, o.code, o.msg)
	}
	cl.epoch = o.epoch
	if o.sendAll {
		cl.owns = o.member.Assigned.clone()
	}
}

// TestReconcileNeverDoubleOwns drives members joining, heartbeating in random order
// and leaving, and checks after every answer that no partition is owned by two
// clients, and that a stable group ends with every partition owned once.
func TestReconcileNeverDoubleOwns(t *testing.T) {
	for _, assignor := range []string{AssignorUniform, AssignorRange} {
		t.Run(assignor, func(t *testing.T) {
			c := newTest(t)
			d := newDoc()
			topics := []topicInfo{{Name: "a", ID: topicID(1), Partitions: 24}, {Name: "b", ID: topicID(2), Partitions: 5}}
			now := time.Unix(1000, 0)
			rng := rand.New(rand.NewPCG(1, 2))
			var clients []*client
			check := func() {
				seen := map[tp]string{}
				for _, cl := range clients {
					for tpc, ps := range cl.owns {
						for _, p := range ps {
							if o, dup := seen[tp{tpc, p}]; dup {
								t.Fatalf("partition %s/%d owned by %s and %s", tpc, p, o, cl.id)
							}
							seen[tp{tpc, p}] = cl.id
						}
					}
				}
			}
			join := func(id string) {
				cl := &client{id: id, owns: assignment{}}
				r := cl.req(0, []string{"a", "b"})
				r.ServerAssignor = &assignor
				o, _ := c.heartbeat(d, r, topics, now)
				cl.apply(t, o, c, d)
				clients = append(clients, cl)
				check()
			}
			beat := func(n int) {
				for range n {
					cl := clients[rng.IntN(len(clients))]
					o, _ := c.heartbeat(d, cl.req(cl.epoch, nil), topics, now)
					cl.apply(t, o, c, d)
					check()
				}
			}
			for i := range 4 {
				join(fmt.Sprintf("m%d", i))
				beat(5)
			}
			beat(50)
			// m1 leaves; m4 joins; m2 is lost (its session ends).
			o, _ := c.heartbeat(d, &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m1", MemberEpoch: -1}, topics, now)
			if o.code != 0 || o.epoch != -1 {
				t.Fatalf("leave: %+v", o)
			}
			clients = append(clients[:1], clients[2:]...)
			join("m4")
			beat(20)
			lost := clients[1]
			if lost.id != "m2" {
				t.Fatalf("expected m2, got %s", lost.id)
			}
			d.Members["m2"].SessionDeadline = now.Add(-time.Second)
			if gone := c.expire(d, topics, now); len(gone) != 1 || gone[0] != "m2" {
				t.Fatalf("expired %v", gone)
			}
			clients = append(clients[:1], clients[2:]...)
			beat(60)
			if s := d.state(); s != groupStable {
				t.Fatalf("state %s after the heartbeats, want Stable: %+v", s, d)
			}
			total := 0
			for _, cl := range clients {
				n := 0
				for _, ps := range cl.owns {
					n += len(ps)
				}
				total += n
				if cl.epoch != d.AssignmentEpoch {
					t.Errorf("%s at epoch %d, assignment epoch %d", cl.id, cl.epoch, d.AssignmentEpoch)
				}
				if assignor == AssignorUniform && (n < 9 || n > 10) {
					t.Errorf("uniform: %s owns %d of 29 partitions over 3 members", cl.id, n)
				}
			}
			if total != 29 {
				t.Errorf("owned %d partitions, want 29", total)
			}
		})
	}
}

func TestHeartbeatErrors(t *testing.T) {
	c := newTest(t)
	d := newDoc()
	topics := []topicInfo{{Name: "a", ID: topicID(1), Partitions: 3}}
	now := time.Unix(1000, 0)
	cl := &client{id: "m", owns: assignment{}}
	o, _ := c.heartbeat(d, cl.req(0, []string{"a"}), topics, now)
	cl.apply(t, o, c, d)
	if cl.epoch != 1 || len(cl.owns[topicID(1)]) != 3 {
		t.Fatalf("join: epoch %d owns %v", cl.epoch, cl.owns)
	}
	if o, _ := c.heartbeat(d, cl.req(5, nil), topics, now); o.code != kerr.FencedMemberEpoch.Code {
		t.Errorf("newer epoch: %d", o.code)
	}
	other := &client{id: "x", owns: assignment{}}
	if o, _ := c.heartbeat(d, other.req(3, nil), topics, now); o.code != kerr.UnknownMemberID.Code {
		t.Errorf("unknown member: %d", o.code)
	}
	bad := cl.req(0, nil)
	if o := c.validate(bad); o == nil || o.code != kerr.InvalidRequest.Code {
		t.Errorf("join without subscription: %+v", o)
	}
	fresh := &client{id: "n", owns: assignment{}}
	re := "a("
	bad = fresh.req(0, nil)
	bad.SubscribedTopicRegex = &re
	if o := c.validate(bad); o == nil || o.code != kerr.InvalidRegularExpression.Code {
		t.Errorf("bad regex: %+v", o)
	}
	as := "sticky"
	bad = fresh.req(0, []string{"a"})
	bad.ServerAssignor = &as
	if o := c.validate(bad); o == nil || o.code != kerr.UnsupportedAssignor.Code {
		t.Errorf("unknown assignor: %+v", o)
	}
	// Static membership: a second instance with the same id is refused until the first
	// leaves with epoch -2, then takes its place, epoch and partitions.
	inst := "i1"
	s1 := &client{id: "s1", owns: assignment{}}
	r := s1.req(0, []string{"a"})
	r.InstanceId = &inst
	o, _ = c.heartbeat(d, r, topics, now)
	s1.apply(t, o, c, d)
	s2 := &client{id: "s2", owns: assignment{}}
	r2 := s2.req(0, []string{"a"})
	r2.InstanceId = &inst
	if o, _ := c.heartbeat(d, r2, topics, now); o.code != kerr.UnreleasedInstanceID.Code {
		t.Errorf("second static instance: %d", o.code)
	}
	for range 3 {
		o, _ = c.heartbeat(d, cl.req(cl.epoch, nil), topics, now)
		cl.apply(t, o, c, d)
		o, _ = c.heartbeat(d, s1.req(s1.epoch, nil), topics, now)
		s1.apply(t, o, c, d)
	}
	owned := s1.owns.clone()
	lr := &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "s1", MemberEpoch: -2, InstanceId: &inst}
	if o, _ := c.heartbeat(d, lr, topics, now); o.code != 0 || o.epoch != -2 {
		t.Fatalf("static leave: %+v", o)
	}
	o, _ = c.heartbeat(d, r2, topics, now)
	s2.apply(t, o, c, d)
	if !s2.owns.equal(owned) || s2.epoch != s1.epoch || d.Members["s1"] != nil {
		t.Errorf("static rejoin: owns %v (was %v), epoch %d (was %d)", s2.owns, owned, s2.epoch, s1.epoch)
	}
}

func TestRegexAndTopicChanges(t *testing.T) {
	c := newTest(t)
	d := newDoc()
	topics := []topicInfo{{Name: "ra", ID: topicID(1), Partitions: 2}, {Name: "rb", ID: topicID(2), Partitions: 1},
		{Name: "x-ra", ID: topicID(3), Partitions: 1}, {Name: "__consumer_offsets", ID: topicID(4), Partitions: 50}}
	now := time.Unix(1000, 0)
	cl := &client{id: "m", owns: assignment{}}
	r := cl.req(0, nil)
	re := "r.*|__consumer.*"
	r.SubscribedTopicRegex = &re
	o, _ := c.heartbeat(d, r, topics, now)
	cl.apply(t, o, c, d)
	// Whole names only (not x-ra); internal topics match, as on Kafka 4's brokers.
	if len(cl.owns) != 3 || len(cl.owns[topicID(1)]) != 2 || len(cl.owns[topicID(2)]) != 1 || len(cl.owns[topicID(4)]) != 50 {
		t.Fatalf("regex assignment %v", cl.owns)
	}
	// rb deleted, ra grows to 3: the next heartbeat revokes rb and adds ra/2.
	epoch := d.GroupEpoch
	topics = []topicInfo{{Name: "ra", ID: topicID(1), Partitions: 3}}
	o, _ = c.heartbeat(d, cl.req(cl.epoch, nil), topics, now)
	cl.apply(t, o, c, d)
	if d.GroupEpoch != epoch+1 {
		t.Errorf("group epoch %d after a topic change, want %d", d.GroupEpoch, epoch+1)
	}
	o, _ = c.heartbeat(d, cl.req(cl.epoch, nil), topics, now)
	cl.apply(t, o, c, d)
	if len(cl.owns) != 1 || len(cl.owns[topicID(1)]) != 3 {
		t.Errorf("after the topic change: %v", cl.owns)
	}
}

func TestRangeAssignor(t *testing.T) {
	got := assign(AssignorRange, assignorSpec{
		subs:       map[string][]string{"a": {"t"}, "b": {"t"}, "c": {"t"}},
		partitions: map[string]int32{"t": 7},
	})
	want := map[string][]int32{"a": {0, 1, 2}, "b": {3, 4}, "c": {5, 6}}
	for m, ps := range want {
		if fmt.Sprint(got[m]["t"]) != fmt.Sprint(ps) {
			t.Errorf("range %s: %v, want %v", m, got[m]["t"], ps)
		}
	}
}

// TestReconcileChaos is TestReconcileNeverDoubleOwns with lost answers (the member
// keeps what it had and heartbeats again at its old epoch), keepalive heartbeats
// (no owned partitions sent), static members leaving with -2 and coming back under a
// new member id, members leaving for good and new ones joining, and topic growth.
// What each client believes it owns must never overlap.
func TestReconcileChaos(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		c := newTest(t)
		d := newDoc()
		topics := []topicInfo{{Name: "a", ID: topicID(1), Partitions: 12}}
		now := time.Unix(1000, 0)
		rng := rand.New(rand.NewPCG(seed, 7))
		clients := map[string]*client{}
		inst := map[string]string{} // client id -> instance id
		lost := map[string]bool{}   // the last answer to the client was lost
		next := 0
		check := func(step string) {
			seen := map[tp]string{}
			for _, cl := range clients {
				for tpc, ps := range cl.owns {
					for _, p := range ps {
						if o, dup := seen[tp{tpc, p}]; dup {
							t.Fatalf("seed %d %s: partition %d owned by %s and %s", seed, step, p, o, cl.id)
						}
						seen[tp{tpc, p}] = cl.id
					}
				}
			}
		}
		join := func(instance string) {
			next++
			cl := &client{id: fmt.Sprintf("m%d", next), owns: assignment{}}
			r := cl.req(0, []string{"a"})
			if instance != "" {
				r.InstanceId = &instance
			}
			o, _ := c.heartbeat(d, r, topics, now)
			if o.code != 0 {
				return // UNRELEASED_INSTANCE_ID and the like: not in the group
			}
			cl.apply(t, o, c, d)
			clients[cl.id] = cl
			inst[cl.id] = instance
			check("join")
		}
		for range 3 {
			join("")
		}
		join("s1")
		for step := range 400 {
			var ids []string
			for id := range clients {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			switch k := rng.IntN(100); {
			case k < 3 && len(clients) > 1:
				id := ids[rng.IntN(len(ids))]
				cl := clients[id]
				epoch := int32(-1)
				var ip *string
				if s := inst[id]; s != "" {
					epoch, ip = -2, &s
				}
				c.heartbeat(d, &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: cl.id, MemberEpoch: epoch, InstanceId: ip}, topics, now)
				delete(clients, id)
				if s := inst[id]; s != "" {
					join(s) // the static member comes back under a new id
				}
			case k < 6:
				join("")
			case k < 7:
				topics[0].Partitions++
			default:
				cl := clients[ids[rng.IntN(len(ids))]]
				r := cl.req(cl.epoch, nil)
				if rng.IntN(4) == 0 {
					r.HasTopicPartitions, r.TopicPartitions = false, nil
				}
				if s := inst[cl.id]; s != "" {
					r.InstanceId = &s
				}
				o, _ := c.heartbeat(d, r, topics, now)
				if o.code != 0 {
					t.Fatalf("seed %d step %d: %s heartbeat at epoch %d: %d %s", seed, step, cl.id, cl.epoch, o.code, o.msg)
				}
				if !lost[cl.id] && rng.IntN(5) == 0 && !o.member.Assigned.minus(cl.owns).empty() {
					// The answer is lost (never two in a row: the next heartbeat, at
					// the previous epoch, gets it again); a lost answer can only have
					// added partitions, so the client owns less than it may.
					lost[cl.id] = true
					continue
				}
				lost[cl.id] = false
				cl.apply(t, o, c, d)
			}
			check(fmt.Sprintf("step %d", step))
		}
	}
}
