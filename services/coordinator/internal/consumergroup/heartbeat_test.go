package consumergroup

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tributary/tributary/libs/kafkaacl"
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
				o, _ := c.heartbeat(d, r, topics, nil, now)
				cl.apply(t, o, c, d)
				clients = append(clients, cl)
				check()
			}
			beat := func(n int) {
				for range n {
					cl := clients[rng.IntN(len(clients))]
					o, _ := c.heartbeat(d, cl.req(cl.epoch, nil), topics, nil, now)
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
			o, _ := c.heartbeat(d, &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m1", MemberEpoch: -1}, topics, nil, now)
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
	o, _ := c.heartbeat(d, cl.req(0, []string{"a"}), topics, nil, now)
	cl.apply(t, o, c, d)
	if cl.epoch != 1 || len(cl.owns[topicID(1)]) != 3 {
		t.Fatalf("join: epoch %d owns %v", cl.epoch, cl.owns)
	}
	if o, _ := c.heartbeat(d, cl.req(5, nil), topics, nil, now); o.code != kerr.FencedMemberEpoch.Code {
		t.Errorf("newer epoch: %d", o.code)
	}
	other := &client{id: "x", owns: assignment{}}
	if o, _ := c.heartbeat(d, other.req(3, nil), topics, nil, now); o.code != kerr.UnknownMemberID.Code {
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
	o, _ = c.heartbeat(d, r, topics, nil, now)
	s1.apply(t, o, c, d)
	s2 := &client{id: "s2", owns: assignment{}}
	r2 := s2.req(0, []string{"a"})
	r2.InstanceId = &inst
	if o, _ := c.heartbeat(d, r2, topics, nil, now); o.code != kerr.UnreleasedInstanceID.Code {
		t.Errorf("second static instance: %d", o.code)
	}
	for range 3 {
		o, _ = c.heartbeat(d, cl.req(cl.epoch, nil), topics, nil, now)
		cl.apply(t, o, c, d)
		o, _ = c.heartbeat(d, s1.req(s1.epoch, nil), topics, nil, now)
		s1.apply(t, o, c, d)
	}
	owned := s1.owns.clone()
	lr := &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "s1", MemberEpoch: -2, InstanceId: &inst}
	if o, _ := c.heartbeat(d, lr, topics, nil, now); o.code != 0 || o.epoch != -2 {
		t.Fatalf("static leave: %+v", o)
	}
	o, _ = c.heartbeat(d, r2, topics, nil, now)
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
	o, _ := c.heartbeat(d, r, topics, nil, now)
	cl.apply(t, o, c, d)
	// Whole names only (not x-ra); internal topics match, as on Kafka 4's brokers.
	if len(cl.owns) != 3 || len(cl.owns[topicID(1)]) != 2 || len(cl.owns[topicID(2)]) != 1 || len(cl.owns[topicID(4)]) != 50 {
		t.Fatalf("regex assignment %v", cl.owns)
	}
	// rb deleted, ra grows to 3: the next heartbeat revokes rb and adds ra/2.
	epoch := d.GroupEpoch
	topics = []topicInfo{{Name: "ra", ID: topicID(1), Partitions: 3}}
	o, _ = c.heartbeat(d, cl.req(cl.epoch, nil), topics, nil, now)
	cl.apply(t, o, c, d)
	if d.GroupEpoch != epoch+1 {
		t.Errorf("group epoch %d after a topic change, want %d", d.GroupEpoch, epoch+1)
	}
	o, _ = c.heartbeat(d, cl.req(cl.epoch, nil), topics, nil, now)
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
			o, _ := c.heartbeat(d, r, topics, nil, now)
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
				c.heartbeat(d, &coordinatorv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: cl.id, MemberEpoch: epoch, InstanceId: ip}, topics, nil, now)
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
				o, _ := c.heartbeat(d, r, topics, nil, now)
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

// TestRegexAuthorization: with the gateway's authorizer on, a regex member is
// assigned only the matching topics its principal may DESCRIBE (KIP-848, Kafka's
// filterTopicDescribeAuthorizedTopics): a grant adds a topic at the member's next
// heartbeat, a topic created later is not assigned before a heartbeat of the member
// finds it allowed (another member's heartbeat does not), a super user (no
// authorization sent) gets every match, and allow.everyone.if.no.acl.found applies.
func TestRegexAuthorization(t *testing.T) {
	c := newTest(t)
	d := newDoc()
	topics := []topicInfo{{Name: "orders-eu", ID: topicID(1), Partitions: 2}, {Name: "orders-us", ID: topicID(2), Partitions: 2},
		{Name: "shipments", ID: topicID(3), Partitions: 1}}
	now := time.Unix(1000, 0)
	allow := func(principal string, topics ...string) *kafkaacl.Set {
		var bs []kafkaacl.Binding
		for _, n := range topics {
			bs = append(bs, kafkaacl.Binding{ResourceType: kafkaacl.ResourceTopic, ResourceName: n, PatternType: kafkaacl.PatternLiteral,
				Principal: principal, Host: "*", Operation: kafkaacl.OpRead, Permission: kafkaacl.PermissionAllow})
		}
		return kafkaacl.NewSet(bs)
	}
	alice := &coordinatorv1.RegexAuthorization{Principal: "User:alice", Host: "127.0.0.1"}
	re := "orders-.*"
	a := &client{id: "a", owns: assignment{}}
	hb := func(cl *client, az *coordinatorv1.RegexAuthorization, acls *kafkaacl.Set) {
		t.Helper()
		r := cl.req(cl.epoch, nil)
		if cl.epoch == 0 {
			r.SubscribedTopicRegex = &re
		}
		r.RegexAuthorization = az
		o, _ := c.heartbeat(d, r, topics, acls, now)
		cl.apply(t, o, c, d)
	}
	hb(a, alice, allow("User:alice", "orders-eu"))
	if len(a.owns) != 1 || len(a.owns[topicID(1)]) != 2 {
		t.Fatalf("alice may describe orders-eu only, assigned %v", a.owns)
	}
	// orders-us granted: assigned at alice's next heartbeat.
	hb(a, alice, allow("User:alice", "orders-eu", "orders-us"))
	if len(a.owns) != 2 || len(a.owns[topicID(2)]) != 2 {
		t.Fatalf("after the grant: %v", a.owns)
	}
	// A topic created later that alice may not describe: another member's heartbeat
	// does not give it to her, nor does hers.
	topics = append(topics, topicInfo{Name: "orders-new", ID: topicID(4), Partitions: 1})
	b := &client{id: "b", owns: assignment{}}
	bob := &coordinatorv1.RegexAuthorization{Principal: "User:bob", Host: "127.0.0.1"}
	acls := allow("User:alice", "orders-eu", "orders-us")
	for range 3 {
		hb(b, bob, acls)
		hb(a, alice, acls)
	}
	if len(a.owns[topicID(4)]) != 0 || len(b.owns) != 0 {
		t.Fatalf("undescribable topics assigned: alice %v, bob %v", a.owns, b.owns)
	}
	if _, ok := d.Topics["orders-new"]; ok {
		t.Errorf("group subscribes to orders-new, which no member may describe: %v", d.Topics)
	}
	// bob as a super user (the gateway sends no authorization): every match.
	for range 3 {
		hb(b, nil, nil)
		hb(a, alice, acls)
	}
	if len(b.owns[topicID(4)]) != 1 || len(a.owns[topicID(4)]) != 0 {
		t.Fatalf("super user bob %v, alice %v", b.owns, a.owns)
	}
	// allow.everyone.if.no.acl.found: orders-new has no ACL, so alice may describe it.
	open := &coordinatorv1.RegexAuthorization{Principal: "User:alice", Host: "127.0.0.1", AllowIfNoAcl: true}
	hb(a, open, acls)
	if got := a.owns; len(got[topicID(3)]) != 0 || !slices.Contains(d.Members["a"].RegexAllowed, "orders-new") {
		t.Fatalf("allow if no acl: owns %v, allowed %v", got, d.Members["a"].RegexAllowed)
	}
}
