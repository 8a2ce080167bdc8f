package group

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// client drives one simulated group member against a coordinator.
type client struct {
	t        *testing.T
	c        *Coordinator
	group    string
	id       string
	instance *string
	gen      int32
	session  int32
	protos   []*coordinatorv1.GroupProtocol
}

func newClient(t *testing.T, c *Coordinator, group string) *client {
	return &client{t: t, c: c, group: group, session: 30000,
		protos: []*coordinatorv1.GroupProtocol{{Name: "range", Metadata: []byte("m")}}}
}

func (m *client) joinReq() *coordinatorv1.JoinGroupRequest {
	return &coordinatorv1.JoinGroupRequest{GroupId: m.group, SessionTimeoutMs: m.session, RebalanceTimeoutMs: 10000,
		MemberId: m.id, GroupInstanceId: m.instance, ProtocolType: "consumer", Protocols: m.protos,
		RequireKnownMemberId: true, ClientId: "test"}
}

// joinAsync joins (handling MEMBER_ID_REQUIRED) in the background.
func (m *client) joinAsync() <-chan *coordinatorv1.JoinGroupResponse {
	ch := make(chan *coordinatorv1.JoinGroupResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			r, err := m.c.JoinGroup(ctx, m.joinReq())
			if err != nil {
				ch <- &coordinatorv1.JoinGroupResponse{ErrorCode: -1, ProtocolName: err.Error()}
				return
			}
			if r.GetErrorCode() == int32(kerr.MemberIDRequired.Code) {
				m.id = r.GetMemberId()
				continue
			}
			if r.GetErrorCode() == 0 {
				m.id, m.gen = r.GetMemberId(), r.GetGenerationId()
			}
			ch <- r
			return
		}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan *coordinatorv1.JoinGroupResponse) *coordinatorv1.JoinGroupResponse {
	t.Helper()
	select {
	case r := <-ch:
		if r.GetErrorCode() != 0 {
			t.Fatalf("join: error %d %s", r.GetErrorCode(), r.GetProtocolName())
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("join did not complete")
		return nil
	}
}

func (m *client) join() *coordinatorv1.JoinGroupResponse { return recv(m.t, m.joinAsync()) }

func (m *client) syncAsync(assign map[string][]byte) <-chan *coordinatorv1.SyncGroupResponse {
	req := &coordinatorv1.SyncGroupRequest{GroupId: m.group, GenerationId: m.gen, MemberId: m.id, GroupInstanceId: m.instance}
	for id, a := range assign {
		req.Assignments = append(req.Assignments, &coordinatorv1.SyncGroupAssignment{MemberId: id, Assignment: a})
	}
	ch := make(chan *coordinatorv1.SyncGroupResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := m.c.SyncGroup(ctx, req)
		if err != nil {
			r = &coordinatorv1.SyncGroupResponse{ErrorCode: -1}
		}
		ch <- r
	}()
	return ch
}

func recvSync(t *testing.T, ch <-chan *coordinatorv1.SyncGroupResponse) *coordinatorv1.SyncGroupResponse {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("sync did not complete")
		return nil
	}
}

func (m *client) heartbeat() int32 {
	m.t.Helper()
	r, err := m.c.Heartbeat(context.Background(), &coordinatorv1.HeartbeatRequest{GroupId: m.group, GenerationId: m.gen, MemberId: m.id, GroupInstanceId: m.instance})
	if err != nil {
		m.t.Fatalf("heartbeat: %v", err)
	}
	return r.GetErrorCode()
}

func code(e *kerr.Error) int32 { return int32(e.Code) }

func wantCode(t *testing.T, what string, got int32, want *kerr.Error) {
	t.Helper()
	wc := int32(0)
	if want != nil {
		wc = code(want)
	}
	if got != wc {
		t.Fatalf("%s: error code %d (%v), want %d (%v)", what, got, kerr.ErrorForCode(int16(got)), wc, want)
	}
}

// rebalance runs one full round: every member (re)joins, the leader assigns "a-<id>"
// to each, every member syncs. It returns the leader's join answer.
func rebalance(t *testing.T, ms ...*client) *coordinatorv1.JoinGroupResponse {
	t.Helper()
	return rebalanceJoining(t, nil, ms...)
}

// rebalanceJoining is rebalance where some members' joins are already in flight.
func rebalanceJoining(t *testing.T, inflight map[*client]<-chan *coordinatorv1.JoinGroupResponse, ms ...*client) *coordinatorv1.JoinGroupResponse {
	t.Helper()
	chs := make([]<-chan *coordinatorv1.JoinGroupResponse, len(ms))
	for i, m := range ms {
		if ch, ok := inflight[m]; ok {
			chs[i] = ch
		} else {
			chs[i] = m.joinAsync()
		}
	}
	var leader *coordinatorv1.JoinGroupResponse
	var leaderClient *client
	for i, ch := range chs {
		r := recv(t, ch)
		if r.GetLeader() == r.GetMemberId() {
			leader, leaderClient = r, ms[i]
		}
	}
	if leader == nil {
		t.Fatal("no member was told it leads")
	}
	if len(leader.GetMembers()) != len(ms) {
		t.Fatalf("leader got %d members, want %d", len(leader.GetMembers()), len(ms))
	}
	assign := map[string][]byte{}
	for _, m := range leader.GetMembers() {
		assign[m.GetMemberId()] = []byte("a-" + m.GetMemberId())
	}
	syncs := make([]<-chan *coordinatorv1.SyncGroupResponse, len(ms))
	for i, m := range ms {
		if m != leaderClient {
			syncs[i] = m.syncAsync(nil)
		}
	}
	for i, m := range ms {
		if m == leaderClient {
			syncs[i] = m.syncAsync(assign)
		}
	}
	for i, ch := range syncs {
		r := recvSync(t, ch)
		wantCode(t, "sync", r.GetErrorCode(), nil)
		if string(r.GetAssignment()) != "a-"+ms[i].id {
			t.Fatalf("member %s got assignment %q", ms[i].id, r.GetAssignment())
		}
		if r.GetProtocolName() != "range" {
			t.Fatalf("sync protocol %q", r.GetProtocolName())
		}
	}
	return leader
}

func describe(t *testing.T, c *Coordinator, gid string) *coordinatorv1.DescribedGroup {
	t.Helper()
	r, err := c.DescribeGroups(context.Background(), &coordinatorv1.DescribeGroupsRequest{GroupIds: []string{gid}})
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	return r.GetGroups()[0]
}

// waitRebalanceSignal heartbeats until the coordinator says REBALANCE_IN_PROGRESS.
func waitRebalanceSignal(t *testing.T, ms ...*client) {
	t.Helper()
	for _, m := range ms {
		eventually(t, 15*time.Second, "heartbeat REBALANCE_IN_PROGRESS", func() error {
			if c := m.heartbeat(); c != code(kerr.RebalanceInProgress) {
				return fmt.Errorf("heartbeat code %d", c)
			}
			return nil
		})
	}
}

func TestJoinSyncHeartbeatThreeMembers(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(e.testConfig())
	const gid = "g1"
	m1, m2, m3 := newClient(t, c, gid), newClient(t, c, gid), newClient(t, c, gid)

	// KIP-394: the first join without member id is refused with a member id.
	r, err := c.JoinGroup(ctxT(t), m1.joinReq())
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "first join", r.GetErrorCode(), kerr.MemberIDRequired)
	if !strings.HasPrefix(r.GetMemberId(), "test-") {
		t.Fatalf("member id %q", r.GetMemberId())
	}
	m1.id = r.GetMemberId()

	l := rebalance(t, m1)
	if l.GetGenerationId() != 1 || l.GetLeader() != m1.id || l.GetProtocolName() != "range" {
		t.Fatalf("gen 1 answer %+v", l)
	}
	wantCode(t, "heartbeat stable", m1.heartbeat(), nil)
	if d := describe(t, c, gid); d.GetState() != "Stable" || len(d.GetMembers()) != 1 || string(d.GetMembers()[0].GetAssignment()) != "a-"+m1.id {
		t.Fatalf("describe %+v", d)
	}

	// A second member joins: the first learns of the rebalance by heartbeat and rejoins.
	ch2 := m2.joinAsync()
	waitRebalanceSignal(t, m1)
	ch1 := m1.joinAsync()
	r1, r2 := recv(t, ch1), recv(t, ch2)
	if r1.GetGenerationId() != 2 || r2.GetGenerationId() != 2 {
		t.Fatalf("generations %d %d", r1.GetGenerationId(), r2.GetGenerationId())
	}
	if r1.GetLeader() != m1.id || len(r1.GetMembers()) != 2 || len(r2.GetMembers()) != 0 {
		t.Fatalf("leader %s members %d/%d", r1.GetLeader(), len(r1.GetMembers()), len(r2.GetMembers()))
	}
	// A follower's SyncGroup waits for the leader's.
	s2 := m2.syncAsync(nil)
	s1 := m1.syncAsync(map[string][]byte{m1.id: []byte("x1"), m2.id: []byte("x2")})
	if a := recvSync(t, s2).GetAssignment(); string(a) != "x2" {
		t.Fatalf("m2 assignment %q", a)
	}
	if a := recvSync(t, s1).GetAssignment(); string(a) != "x1" {
		t.Fatalf("m1 assignment %q", a)
	}

	// Third member; everyone rejoins.
	ch3 := m3.joinAsync()
	waitRebalanceSignal(t, m1, m2)
	rebalanceJoining(t, map[*client]<-chan *coordinatorv1.JoinGroupResponse{m3: ch3}, m1, m2, m3)
	if m1.gen != 3 || m3.gen != 3 {
		t.Fatalf("generation %d/%d, want 3", m1.gen, m3.gen)
	}

	// m2 leaves: the others rebalance into generation 4.
	lr, err := c.LeaveGroup(ctxT(t), &coordinatorv1.LeaveGroupRequest{GroupId: gid, Members: []*coordinatorv1.LeavingMember{{MemberId: m2.id}}})
	if err != nil || lr.GetErrorCode() != 0 || lr.GetMembers()[0].GetErrorCode() != 0 {
		t.Fatalf("leave: %v %+v", err, lr)
	}
	waitRebalanceSignal(t, m1, m3)
	rebalance(t, m1, m3)
	if m1.gen != 4 {
		t.Fatalf("generation %d after leave", m1.gen)
	}
	wantCode(t, "heartbeat of the member that left", m2.heartbeat(), kerr.UnknownMemberID)

}

func TestSessionExpiry(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(e.testConfig())
	waitSweeper(t, c)
	m1, m2 := newClient(t, c, "g"), newClient(t, c, "g")
	m2.session = 500
	rebalance(t, m1)
	ch := m2.joinAsync()
	waitRebalanceSignal(t, m1)
	ch1 := m1.joinAsync()
	recv(t, ch)
	recv(t, ch1)
	// m2 never syncs nor heartbeats: its session ends, the group rebalances without it.
	waitRebalanceSignal(t, m1)
	l := rebalance(t, m1)
	if len(l.GetMembers()) != 1 || m1.gen != 3 {
		t.Fatalf("after expiry: %d members, generation %d", len(l.GetMembers()), m1.gen)
	}
	wantCode(t, "expired member heartbeat", m2.heartbeat(), kerr.UnknownMemberID)
}

func waitSweeper(t *testing.T, cs ...*Coordinator) bool {
	t.Helper()
	eventually(t, 10*time.Second, "a replica holds the sweep lock", func() error {
		for _, c := range cs {
			if c.HoldsSweepLock() {
				return nil
			}
		}
		return fmt.Errorf("none holds it")
	})
	return true
}

// A group id of Kafka's maximum length (32767 bytes) neither breaks the replica's NATS
// connection nor its sessions: its change subject stays short (it used to carry the
// hex of the whole id, over NATS's 4 KiB line limit, and the server closed the
// connection for good).
func TestLongGroupIDKeepsNATS(t *testing.T) {
	e := newEnv(t)
	c, nc, _ := e.startReplica(e.testConfig())
	waitSweeper(t, c)
	gid := strings.Repeat("K", 32767)
	m1, m2 := newClient(t, c, gid), newClient(t, c, gid)
	m2.session = 500
	rebalance(t, m1)
	ch := m2.joinAsync()
	waitRebalanceSignal(t, m1)
	ch1 := m1.joinAsync()
	recv(t, ch)
	recv(t, ch1)
	// m2's session ends; the sweep (which needs NATS for its lock) rebalances without it.
	waitRebalanceSignal(t, m1)
	if l := rebalance(t, m1); len(l.GetMembers()) != 1 {
		t.Fatalf("after expiry: %d members", len(l.GetMembers()))
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil || !nc.IsConnected() {
		t.Fatalf("NATS after a %d-byte group id: connected %v, flush %v", len(gid), nc.IsConnected(), err)
	}
}
