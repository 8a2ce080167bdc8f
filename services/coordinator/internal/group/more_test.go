package group

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func commitReq(gid string, gen int32, member string, offset int64, meta string) *coordinatorv1.OffsetCommitRequest {
	return &coordinatorv1.OffsetCommitRequest{GroupId: gid, GenerationId: gen, MemberId: member,
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "t", Partitions: []*coordinatorv1.OffsetCommitPartition{
			{Partition: 0, CommittedOffset: offset, CommittedLeaderEpoch: 3, Metadata: &meta},
			{Partition: 1, CommittedOffset: offset + 1, CommittedLeaderEpoch: -1},
		}}}}
}

func commitCode(t *testing.T, c *Coordinator, req *coordinatorv1.OffsetCommitRequest) int32 {
	t.Helper()
	r, err := c.OffsetCommit(ctxT(t), req)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	return r.GetTopics()[0].GetPartitions()[0].GetErrorCode()
}

func fetchOffsets(t *testing.T, c *Coordinator, gid string) map[int32]*coordinatorv1.FetchedPartition {
	t.Helper()
	r, err := c.OffsetFetch(ctxT(t), &coordinatorv1.OffsetFetchRequest{Groups: []*coordinatorv1.OffsetFetchGroup{
		{GroupId: gid, Topics: []*coordinatorv1.OffsetFetchTopic{{Name: "t", Partitions: []int32{0, 1, 2}}}}}})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	out := map[int32]*coordinatorv1.FetchedPartition{}
	for _, p := range r.GetGroups()[0].GetTopics()[0].GetPartitions() {
		out[p.GetPartition()] = p
	}
	return out
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(e.testConfig())
	ctx := ctxT(t)
	m := newClient(t, c, "g")

	bad := m.joinReq()
	bad.GroupId = ""
	r, _ := c.JoinGroup(ctx, bad)
	wantCode(t, "join empty group id", r.GetErrorCode(), kerr.InvalidGroupID)
	bad = m.joinReq()
	bad.SessionTimeoutMs = 50
	r, _ = c.JoinGroup(ctx, bad)
	wantCode(t, "join short session", r.GetErrorCode(), kerr.InvalidSessionTimeout)
	bad.SessionTimeoutMs = 1800001
	r, _ = c.JoinGroup(ctx, bad)
	wantCode(t, "join long session", r.GetErrorCode(), kerr.InvalidSessionTimeout)
	bad = m.joinReq()
	bad.MemberId = "nobody"
	r, _ = c.JoinGroup(ctx, bad)
	wantCode(t, "join unknown member, unknown group", r.GetErrorCode(), kerr.UnknownMemberID)
	bad.ProtocolType = ""
	bad.MemberId = ""
	r, _ = c.JoinGroup(ctx, bad)
	wantCode(t, "join without protocol type", r.GetErrorCode(), kerr.InconsistentGroupProtocol)
	if d := describe(t, c, "g"); d.GetState() != "Dead" {
		t.Fatalf("refused joins created the group: %+v", d)
	}

	rebalance(t, m)
	// Another member with a protocol nobody else supports.
	other := newClient(t, c, "g")
	other.protos = []*coordinatorv1.GroupProtocol{{Name: "roundrobin"}}
	r, _ = c.JoinGroup(ctx, other.joinReq())
	wantCode(t, "join with no common protocol", r.GetErrorCode(), kerr.InconsistentGroupProtocol)
	other.protos = m.protos
	req := other.joinReq()
	req.ProtocolType = "connect"
	r, _ = c.JoinGroup(ctx, req)
	wantCode(t, "join with other protocol type", r.GetErrorCode(), kerr.InconsistentGroupProtocol)

	stale := *m
	stale.gen = m.gen - 1
	wantCode(t, "heartbeat stale generation", stale.heartbeat(), kerr.IllegalGeneration)
	unknown := *m
	unknown.id = "nobody"
	wantCode(t, "heartbeat unknown member", unknown.heartbeat(), kerr.UnknownMemberID)
	hb, _ := c.Heartbeat(ctx, &coordinatorv1.HeartbeatRequest{GroupId: "", MemberId: m.id})
	wantCode(t, "heartbeat empty group id", hb.GetErrorCode(), kerr.InvalidGroupID)
	hb, _ = c.Heartbeat(ctx, &coordinatorv1.HeartbeatRequest{GroupId: "nope", MemberId: m.id})
	wantCode(t, "heartbeat unknown group", hb.GetErrorCode(), kerr.UnknownMemberID)
	sr, _ := c.SyncGroup(ctx, &coordinatorv1.SyncGroupRequest{GroupId: "g", GenerationId: m.gen + 5, MemberId: m.id})
	wantCode(t, "sync stale generation", sr.GetErrorCode(), kerr.IllegalGeneration)
	pn := "roundrobin"
	sr, _ = c.SyncGroup(ctx, &coordinatorv1.SyncGroupRequest{GroupId: "g", GenerationId: m.gen, MemberId: m.id, ProtocolName: &pn})
	wantCode(t, "sync other protocol", sr.GetErrorCode(), kerr.InconsistentGroupProtocol)

	wantCode(t, "commit stale generation", commitCode(t, c, commitReq("g", m.gen-1, m.id, 5, "")), kerr.IllegalGeneration)
	wantCode(t, "commit unknown member", commitCode(t, c, commitReq("g", m.gen, "nobody", 5, "")), kerr.UnknownMemberID)
	wantCode(t, "commit empty group id", commitCode(t, c, commitReq("", m.gen, m.id, 5, "")), kerr.InvalidGroupID)
	wantCode(t, "simple commit to an active group", commitCode(t, c, commitReq("g", -1, "", 5, "")), kerr.UnknownMemberID)
	wantCode(t, "commit to unknown group with a generation", commitCode(t, c, commitReq("nope", 1, "x", 5, "")), kerr.IllegalGeneration)
	wantCode(t, "commit oversize metadata", commitCode(t, c, commitReq("g", m.gen, m.id, 5, strings.Repeat("x", 4097))), kerr.OffsetMetadataTooLarge)
	wantCode(t, "commit 4096-byte metadata", commitCode(t, c, commitReq("g", m.gen, m.id, 5, strings.Repeat("x", 4096))), nil)

	dr, err := c.DeleteGroups(ctx, &coordinatorv1.DeleteGroupsRequest{GroupIds: []string{"g", "nope", ""}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "delete active group", dr.GetResults()[0].GetErrorCode(), kerr.NonEmptyGroup)
	wantCode(t, "delete unknown group", dr.GetResults()[1].GetErrorCode(), kerr.GroupIDNotFound)
	wantCode(t, "delete empty group id", dr.GetResults()[2].GetErrorCode(), kerr.InvalidGroupID)

	// A new member's join starts a rebalance; the old member's SyncGroup is refused.
	ch := other.joinAsync()
	waitRebalanceSignal(t, m)
	sr, _ = c.SyncGroup(ctx, &coordinatorv1.SyncGroupRequest{GroupId: "g", GenerationId: m.gen, MemberId: m.id})
	wantCode(t, "sync during rebalance", sr.GetErrorCode(), kerr.RebalanceInProgress)
	// Commits of the current generation are still accepted while preparing (eager
	// consumers commit before they rejoin).
	wantCode(t, "commit while preparing", commitCode(t, c, commitReq("g", m.gen, m.id, 7, "")), nil)
	rebalanceJoining(t, map[*client]<-chan *coordinatorv1.JoinGroupResponse{other: ch}, m, other)

	// Closed coordinator: whole-call failure, UNAVAILABLE.
	c.Close()
	_, err = c.Heartbeat(ctx, &coordinatorv1.HeartbeatRequest{GroupId: "g"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("closed coordinator: %v", err)
	}
}

func TestStaticMembership(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(e.testConfig())
	ctx := ctxT(t)
	i1, i2 := "instance-1", "instance-2"
	s1, s2 := newClient(t, c, "g"), newClient(t, c, "g")
	s1.instance, s2.instance = &i1, &i2

	// Static members skip KIP-394: the first join is answered at once.
	rebalance(t, s1)
	ch := s2.joinAsync()
	waitRebalanceSignal(t, s1)
	rebalanceJoining(t, map[*client]<-chan *coordinatorv1.JoinGroupResponse{s2: ch}, s1, s2)
	gen := s1.gen

	// s1 restarts (new process, no member id): it gets a new member id and the current
	// generation without a rebalance; as the old leader it must not reassign (KIP-814).
	old := *s1
	s1.id = ""
	r := s1.join()
	if r.GetMemberId() == old.id || r.GetGenerationId() != gen || !r.GetSkipAssignment() || r.GetLeader() != r.GetMemberId() {
		t.Fatalf("static rejoin answer %+v (old id %s, gen %d)", r, old.id, gen)
	}
	if sr := recvSync(t, s1.syncAsync(nil)); sr.GetErrorCode() != 0 || string(sr.GetAssignment()) != "a-"+old.id {
		t.Fatalf("static rejoin sync %+v", sr)
	}
	wantCode(t, "s2 still stable", s2.heartbeat(), nil)
	// The old incarnation is fenced everywhere.
	wantCode(t, "old heartbeat", old.heartbeat(), kerr.FencedInstanceID)
	wantCode(t, "old commit", commitCode(t, c, &coordinatorv1.OffsetCommitRequest{GroupId: "g", GenerationId: gen, MemberId: old.id, GroupInstanceId: &i1,
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "t", Partitions: []*coordinatorv1.OffsetCommitPartition{{Partition: 0}}}}}), kerr.FencedInstanceID)
	jr, _ := c.JoinGroup(ctx, old.joinReq())
	wantCode(t, "old join", jr.GetErrorCode(), kerr.FencedInstanceID)
	lr, _ := c.LeaveGroup(ctx, &coordinatorv1.LeaveGroupRequest{GroupId: "g", Members: []*coordinatorv1.LeavingMember{{MemberId: old.id, GroupInstanceId: &i1}}})
	wantCode(t, "old leave", lr.GetMembers()[0].GetErrorCode(), kerr.FencedInstanceID)

	// Batch leave by instance id (KIP-345): both leave, the group ends Empty.
	nobody := "instance-x"
	lr, err := c.LeaveGroup(ctx, &coordinatorv1.LeaveGroupRequest{GroupId: "g", Members: []*coordinatorv1.LeavingMember{
		{GroupInstanceId: &i1}, {GroupInstanceId: &i2}, {GroupInstanceId: &nobody}}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "leave s1", lr.GetMembers()[0].GetErrorCode(), nil)
	wantCode(t, "leave s2", lr.GetMembers()[1].GetErrorCode(), nil)
	wantCode(t, "leave unknown instance", lr.GetMembers()[2].GetErrorCode(), kerr.UnknownMemberID)
	if d := describe(t, c, "g"); d.GetState() != "Empty" || len(d.GetMembers()) != 0 {
		t.Fatalf("after leave %+v", d)
	}
	dr, _ := c.DeleteGroups(ctx, &coordinatorv1.DeleteGroupsRequest{GroupIds: []string{"g"}})
	wantCode(t, "delete empty group", dr.GetResults()[0].GetErrorCode(), nil)
	if d := describe(t, c, "g"); d.GetState() != "Dead" {
		t.Fatalf("after delete %+v", d)
	}
}

func TestOffsetsSurviveRestart(t *testing.T) {
	e := newEnv(t)
	c, stop := e.start(e.testConfig())
	ctx := ctxT(t)
	// A client that does not use group management (generation -1) creates the group.
	wantCode(t, "simple commit", commitCode(t, c, commitReq("simple", -1, "", 41, "meta")), nil)
	m := newClient(t, c, "managed")
	rebalance(t, m)
	wantCode(t, "member commit", commitCode(t, c, commitReq("managed", m.gen, m.id, 100, "")), nil)
	wantCode(t, "member commit again", commitCode(t, c, commitReq("managed", m.gen, m.id, 120, "")), nil)
	stop()

	c2, _ := e.start(e.testConfig())
	offs := fetchOffsets(t, c2, "simple")
	if offs[0].GetCommittedOffset() != 41 || offs[0].GetCommittedLeaderEpoch() != 3 || offs[0].GetMetadata() != "meta" ||
		offs[1].GetCommittedOffset() != 42 || offs[2].GetCommittedOffset() != -1 || offs[2].GetCommittedLeaderEpoch() != -1 {
		t.Fatalf("offsets after restart: %v", offs)
	}
	if o := fetchOffsets(t, c2, "managed"); o[0].GetCommittedOffset() != 120 {
		t.Fatalf("managed offsets %v", o)
	}
	// Several groups in one request (KIP-709), all topics, an unknown group.
	r, err := c2.OffsetFetch(ctx, &coordinatorv1.OffsetFetchRequest{Groups: []*coordinatorv1.OffsetFetchGroup{
		{GroupId: "managed", AllTopics: true}, {GroupId: "unknown", AllTopics: true}, {GroupId: ""}}})
	if err != nil {
		t.Fatal(err)
	}
	if gs := r.GetGroups(); len(gs) != 3 || len(gs[0].GetTopics()) != 1 || len(gs[0].GetTopics()[0].GetPartitions()) != 2 ||
		len(gs[1].GetTopics()) != 0 || gs[1].GetErrorCode() != 0 || gs[2].GetErrorCode() != code(kerr.InvalidGroupID) {
		t.Fatalf("multi-group fetch %v", r)
	}
	rc, err := c2.GetCommittedOffsets(ctx, &coordinatorv1.GetCommittedOffsetsRequest{Group: "managed", Topic: "t"})
	if err != nil || rc.GetState() != "Stable" || len(rc.GetPositions()) != 2 || rc.GetPositions()[1].GetCommittedOffset() != 121 ||
		rc.GetPositions()[1].GetNextSequence() != 122 || rc.GetPositions()[1].GetLag() != -1 {
		t.Fatalf("get committed: %v %v", err, rc)
	}
	if _, err := c2.GetCommittedOffsets(ctx, &coordinatorv1.GetCommittedOffsetsRequest{Group: "unknown"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get committed of unknown group: %v, want NotFound", err)
	}

	// The member from before the restart is still the group's (state is in Postgres).
	m.c = c2
	wantCode(t, "heartbeat after restart", m.heartbeat(), nil)

	lg, err := c2.ListGroups(ctx, &coordinatorv1.ListGroupsRequest{})
	if err != nil || len(lg.GetGroups()) != 2 {
		t.Fatalf("list: %v %v", err, lg)
	}
	lg, _ = c2.ListGroups(ctx, &coordinatorv1.ListGroupsRequest{StatesFilter: []string{"stable"}})
	if len(lg.GetGroups()) != 1 || lg.GetGroups()[0].GetGroupId() != "managed" || lg.GetGroups()[0].GetProtocolType() != "consumer" {
		t.Fatalf("list stable: %v", lg)
	}

	// OffsetDelete: refused for subscribed topics of an active consumer group, fine for
	// an empty group.
	meta := consumerSubscription("t")
	m.protos = []*coordinatorv1.GroupProtocol{{Name: "range", Metadata: meta}}
	waitRebalanceSignalAfter(t, m)
	od, err := c2.OffsetDelete(ctx, &coordinatorv1.OffsetDeleteRequest{GroupId: "managed", Topics: []*coordinatorv1.OffsetDeleteTopic{{Name: "t", Partitions: []int32{0}}}})
	if err != nil || od.GetTopics()[0].GetPartitions()[0].GetErrorCode() != code(kerr.GroupSubscribedToTopic) {
		t.Fatalf("offset delete subscribed: %v %v", err, od)
	}
	od, _ = c2.OffsetDelete(ctx, &coordinatorv1.OffsetDeleteRequest{GroupId: "simple", Topics: []*coordinatorv1.OffsetDeleteTopic{{Name: "t", Partitions: []int32{0}}}})
	if od.GetErrorCode() != 0 || od.GetTopics()[0].GetPartitions()[0].GetErrorCode() != 0 {
		t.Fatalf("offset delete: %v", od)
	}
	if o := fetchOffsets(t, c2, "simple"); o[0].GetCommittedOffset() != -1 || o[1].GetCommittedOffset() != 42 {
		t.Fatalf("after offset delete %v", o)
	}
	od, _ = c2.OffsetDelete(ctx, &coordinatorv1.OffsetDeleteRequest{GroupId: "unknown"})
	wantCode(t, "offset delete unknown group", od.GetErrorCode(), kerr.GroupIDNotFound)
}

// waitRebalanceSignalAfter rejoins m with its (changed) protocols and syncs.
func waitRebalanceSignalAfter(t *testing.T, m *client) {
	t.Helper()
	rebalance(t, m)
}

// consumerSubscription encodes a ConsumerProtocolSubscription v0 for topics.
func consumerSubscription(topics ...string) []byte {
	b := []byte{0, 0, 0, 0, 0, byte(len(topics))}
	for _, t := range topics {
		b = append(b, byte(len(t)>>8), byte(len(t)))
		b = append(b, t...)
	}
	return append(b, 0xff, 0xff, 0xff, 0xff)
}

func TestOffsetRetention(t *testing.T) {
	e := newEnv(t)
	cfg := e.testConfig()
	cfg.OffsetsRetention = 200 * time.Millisecond
	cfg.RetentionCheckInterval = 100 * time.Millisecond
	c, _ := e.start(cfg)
	waitSweeper(t, c)
	wantCode(t, "simple commit", commitCode(t, c, commitReq("old", -1, "", 1, "")), nil)
	eventually(t, 10*time.Second, "offsets and group expire", func() error {
		if o := fetchOffsets(t, c, "old"); o[0].GetCommittedOffset() != -1 {
			return errString("offset still there")
		}
		if d := describe(t, c, "old"); d.GetState() != "Dead" {
			return errString("group still " + d.GetState())
		}
		return nil
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// TestTwoReplicas runs two coordinators over one database and one NATS: members served
// by different replicas rebalance together (waking each other over NATS), and when the
// sweep-lock holder crashes (its NATS connection drops; the lock is not released), the
// other replica takes the lock within its TTL and expires sessions.
func TestTwoReplicas(t *testing.T) {
	e := newEnv(t)
	c1, nc1, stop1 := e.startReplica(e.testConfig())
	c2, nc2, stop2 := e.startReplica(e.testConfig())
	waitSweeper(t, c1, c2)
	if c1.HoldsSweepLock() && c2.HoldsSweepLock() {
		t.Fatal("both replicas hold the sweep lock")
	}
	a, b := newClient(t, c1, "g"), newClient(t, c2, "g")
	b.session = 1500
	rebalance(t, a)
	chb := b.joinAsync() // waits on replica 2, woken by replica 1's changes over NATS
	waitRebalanceSignal(t, a)
	l := rebalanceJoining(t, map[*client]<-chan *coordinatorv1.JoinGroupResponse{b: chb}, a, b)
	if len(l.GetMembers()) != 2 {
		t.Fatalf("members %d", len(l.GetMembers()))
	}

	other, ncHolder, stopHolder := c2, nc1, stop1
	if c2.HoldsSweepLock() {
		other, ncHolder, stopHolder = c1, nc2, stop2
	}
	ncHolder.Close() // crash: the lock stays in the KV bucket until its TTL ends
	stopHolder()
	eventually(t, 10*time.Second, "the other replica takes the sweep lock", func() error {
		if !other.HoldsSweepLock() {
			return errString("not yet")
		}
		return nil
	})
	// b stops heartbeating; a (moved to the surviving replica) sees the rebalance and
	// completes it alone.
	a.c, b.c = other, other
	waitRebalanceSignal(t, a)
	l = rebalance(t, a)
	if len(l.GetMembers()) != 1 {
		t.Fatalf("after expiry on the new lock holder: %d members", len(l.GetMembers()))
	}
	wantCode(t, "expired member", b.heartbeat(), kerr.UnknownMemberID)
}

// TestProtocolSelection: the group runs the protocol every member supports that most
// members prefer (Kafka's vote), and a member's metadata for it reaches the leader.
func TestProtocolSelection(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(e.testConfig())
	a, b := newClient(t, c, "g"), newClient(t, c, "g")
	a.protos = []*coordinatorv1.GroupProtocol{{Name: "range", Metadata: []byte("a-range")}, {Name: "roundrobin", Metadata: []byte("a-rr")}}
	b.protos = []*coordinatorv1.GroupProtocol{{Name: "roundrobin", Metadata: []byte("b-rr")}, {Name: "sticky", Metadata: []byte("b-st")}}
	chs := map[*client]<-chan *coordinatorv1.JoinGroupResponse{}
	chs[a] = a.joinAsync()
	eventually(t, 10*time.Second, "a joined", func() error {
		if describe(t, c, "g").GetState() == "Dead" {
			return errString("no group yet")
		}
		return nil
	})
	// a alone completes generation 1 with range; b's join starts generation 2.
	recv(t, chs[a])
	chs[b] = b.joinAsync()
	waitRebalanceSignal(t, a)
	delete(chs, a)
	var leader *coordinatorv1.JoinGroupResponse
	ca := a.joinAsync()
	for _, r := range []*coordinatorv1.JoinGroupResponse{recv(t, ca), recv(t, chs[b])} {
		if r.GetProtocolName() != "roundrobin" {
			t.Fatalf("selected %q, want roundrobin (the only common protocol)", r.GetProtocolName())
		}
		if r.GetLeader() == r.GetMemberId() {
			leader = r
		}
	}
	got := map[string]string{}
	for _, m := range leader.GetMembers() {
		got[m.GetMemberId()] = string(m.GetMetadata())
	}
	if got[a.id] != "a-rr" || got[b.id] != "b-rr" {
		t.Fatalf("leader got metadata %v", got)
	}
}

func TestOffsetFetchRequireStable(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(e.testConfig())
	ctx := ctxT(t)
	if code := commitCode(t, c, commitReq("g", -1, "", 10, "")); code != 0 {
		t.Fatalf("commit: %d", code)
	}
	// An open transaction has staged an offset of t-1 (TxnOffsetCommit).
	if _, err := e.pool.Exec(ctx, `INSERT INTO transactions (transactional_id, producer_id, producer_epoch, state, timeout_ms)
		VALUES ('tx', 1, 0, 'Ongoing', 60000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO transaction_offsets (transactional_id, group_id, topic, partition, committed_offset, commit_time)
		VALUES ('tx', 'g', 't', 1, 99, now())`); err != nil {
		t.Fatal(err)
	}
	fetch := func(stable bool) map[int32]*coordinatorv1.FetchedPartition {
		r, err := c.OffsetFetch(ctx, &coordinatorv1.OffsetFetchRequest{RequireStable: stable, Groups: []*coordinatorv1.OffsetFetchGroup{
			{GroupId: "g", Topics: []*coordinatorv1.OffsetFetchTopic{{Name: "t", Partitions: []int32{0, 1}}}}}})
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		out := map[int32]*coordinatorv1.FetchedPartition{}
		for _, p := range r.GetGroups()[0].GetTopics()[0].GetPartitions() {
			out[p.GetPartition()] = p
		}
		return out
	}
	got := fetch(true)
	if got[0].GetErrorCode() != 0 || got[0].GetCommittedOffset() != 10 {
		t.Fatalf("stable partition: %v", got[0])
	}
	wantCode(t, "pending partition with require_stable", got[1].GetErrorCode(), kerr.UnstableOffsetCommit)
	if got = fetch(false); got[1].GetErrorCode() != 0 || got[1].GetCommittedOffset() != 11 {
		t.Fatalf("pending partition without require_stable: %v (want the committed 11)", got[1])
	}
}
