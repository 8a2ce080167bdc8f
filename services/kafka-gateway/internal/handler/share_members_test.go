package handler

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// fakeShareGroups is a coordinator share group service holding members per group.
type fakeShareGroups struct {
	coordinatorv1.ShareGroupServiceClient
	mu        sync.Mutex
	groups    map[string]map[string]bool
	describes int
	down      bool
	delay     time.Duration // each DescribeShareGroups takes this long
}

func (f *fakeShareGroups) add(group, member string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.groups == nil {
		f.groups = map[string]map[string]bool{}
	}
	if f.groups[group] == nil {
		f.groups[group] = map[string]bool{}
	}
	f.groups[group][member] = true
}

func (f *fakeShareGroups) describeCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.describes
}

func (f *fakeShareGroups) ShareGroupHeartbeat(_ context.Context, in *coordinatorv1.ShareGroupHeartbeatRequest, _ ...grpc.CallOption) (*coordinatorv1.ShareGroupHeartbeatResponse, error) {
	switch in.MemberEpoch {
	case 0:
		f.add(in.GroupId, in.MemberId)
		return &coordinatorv1.ShareGroupHeartbeatResponse{MemberId: in.MemberId, MemberEpoch: 1, HeartbeatIntervalMs: 5000}, nil
	case -1:
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.groups[in.GroupId][in.MemberId] {
			return &coordinatorv1.ShareGroupHeartbeatResponse{ErrorCode: int32(kerr.UnknownMemberID.Code)}, nil
		}
		delete(f.groups[in.GroupId], in.MemberId)
		return &coordinatorv1.ShareGroupHeartbeatResponse{MemberId: in.MemberId, MemberEpoch: -1}, nil
	}
	return nil, status.Error(codes.Unimplemented, "fake: join or leave only")
}

func (f *fakeShareGroups) DescribeShareGroups(_ context.Context, in *coordinatorv1.DescribeShareGroupsRequest, _ ...grpc.CallOption) (*coordinatorv1.DescribeShareGroupsResponse, error) {
	f.mu.Lock()
	delay := f.delay
	f.mu.Unlock()
	time.Sleep(delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes++
	if f.down {
		return nil, status.Error(codes.Unavailable, "fake: down")
	}
	out := &coordinatorv1.DescribeShareGroupsResponse{}
	for _, id := range in.GroupIds {
		g := &coordinatorv1.ShareGroupDescription{GroupId: id}
		ms, ok := f.groups[id]
		if !ok {
			g.ErrorCode = int32(kerr.GroupIDNotFound.Code)
		}
		var names []string
		for m := range ms {
			names = append(names, m)
		}
		sort.Strings(names)
		for _, m := range names {
			g.Members = append(g.Members, &coordinatorv1.ShareGroupMemberDescription{MemberId: m})
		}
		out.Groups = append(out.Groups, g)
	}
	return out, nil
}

func (f *fakeShareGroups) GetShareGroupConfig(context.Context, *coordinatorv1.GetShareGroupConfigRequest, ...grpc.CallOption) (*coordinatorv1.GetShareGroupConfigResponse, error) {
	return &coordinatorv1.GetShareGroupConfigResponse{}, nil
}

// TestShareFetchNonMember: a ShareFetch from a member id the share group does not
// have (never joined, left, no such group) is refused with UNKNOWN_MEMBER_ID before
// storage is asked, so it starts no share state; a member's fetches are served from
// the membership cache without asking the coordinator each time, and a flood of
// unknown member ids costs one member list read per group per refresh interval.
func TestShareFetchNonMember(t *testing.T) {
	sg := &fakeShareGroups{}
	e := newShareEnv(t, func(d *Deps) { d.Shares = sg })
	tid := e.topicID(t, "t")
	parts := map[[16]byte][]int32{tid: {0, 1}}
	fetch := func(e *shareEnv, member string, epoch int32) *kmsg.ShareFetchResponse {
		t.Helper()
		return e.do(t, shareFetchReq(member, epoch, parts, epoch > 0), 1).(*kmsg.ShareFetchResponse)
	}
	storageCalls := func() int {
		e.fs.mu.Lock()
		defer e.fs.mu.Unlock()
		return len(e.fs.fetches) + len(e.fs.acks)
	}
	heartbeat := func(member string, epoch int32) {
		t.Helper()
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.GroupID, req.MemberID, req.MemberEpoch = "g", member, epoch
		if epoch == 0 {
			req.SubscribedTopicNames = []string{"t"}
		}
		if r := e.do(t, req, 1).(*kmsg.ShareGroupHeartbeatResponse); r.ErrorCode != 0 {
			t.Fatalf("heartbeat %s at %d: %v", member, epoch, kerr.ErrorForCode(r.ErrorCode))
		}
	}

	// No such share group: refused, nothing reaches storage, no session opens.
	if r := fetch(e, "stranger", 0); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("fetch in a group that does not exist: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if n := storageCalls(); n != 0 {
		t.Fatalf("a non-member's fetch reached storage (%d calls)", n)
	}
	if r := fetch(e, "stranger", 1); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("a refused fetch opened a session: epoch 1 answered %v", kerr.ErrorForCode(r.ErrorCode))
	}

	// A member that joined through this gateway: served, without asking for the
	// member list, fetch after fetch.
	heartbeat("m1", 0)
	d0 := sg.describeCalls()
	for epoch := int32(0); epoch < 20; epoch++ {
		if r := fetch(e, "m1", epoch); r.ErrorCode != 0 {
			t.Fatalf("member m1 at epoch %d: %v", epoch, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if n := sg.describeCalls() - d0; n != 0 {
		t.Fatalf("a member's 20 fetches read the member list %d times", n)
	}
	if n := storageCalls(); n != 20 {
		t.Fatalf("member's fetches: %d storage calls, want 20", n)
	}

	// A member that joined through another gateway: once the refresh interval has
	// passed since the last read, one member list read, then served from the cache.
	sg.add("g", "m2")
	e.h.members.mu.Lock()
	e.h.members.refresh = 20 * time.Millisecond
	e.h.members.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	other := &shareEnv{h: e.h, co: e.co, fs: e.fs, sess: NewSession(false, AnonymousPrincipal)}
	d0 = sg.describeCalls()
	for epoch := int32(0); epoch < 20; epoch++ {
		if r := fetch(other, "m2", epoch); r.ErrorCode != 0 {
			t.Fatalf("member m2 at epoch %d: %v", epoch, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if n := sg.describeCalls() - d0; n != 1 {
		t.Fatalf("20 fetches of a member joined elsewhere read the member list %d times, want 1", n)
	}

	// Many unknown member ids of an existing group, at once and one after another:
	// refused, at most one member list read in the refresh interval.
	e.h.members.mu.Lock()
	e.h.members.refresh = time.Minute
	e.h.members.groups["g"].listedAt = time.Time{} // as if the last read were long ago
	e.h.members.mu.Unlock()
	d0 = sg.describeCalls()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := &shareEnv{h: e.h, co: e.co, fs: e.fs, sess: NewSession(false, AnonymousPrincipal)}
			req := shareFetchReq(fmt.Sprintf("bogus-%d", i), 0, parts, false)
			req.SetVersion(1)
			resp, err := s.h.Handle(context.Background(), &Request{Body: req, Session: s.sess})
			if err != nil {
				errs <- err
				return
			}
			if c := resp.(*kmsg.ShareFetchResponse).ErrorCode; c != kerr.UnknownMemberID.Code {
				errs <- fmt.Errorf("bogus member %d: %v", i, kerr.ErrorForCode(c))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := sg.describeCalls() - d0; n != 1 {
		t.Fatalf("100 fetches of unknown members read the member list %d times, want 1", n)
	}
	if n := storageCalls(); n != 40 {
		t.Fatalf("unknown members' fetches reached storage: %d calls, want 40", n)
	}

	// m1 leaves (through this gateway): its open session cannot fetch any more, but
	// it may still close it, applying its last acknowledgements.
	heartbeat("m1", -1)
	if r := fetch(e, "m1", 20); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("fetch after leaving: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if n := storageCalls(); n != 40 {
		t.Fatalf("a departed member's fetch reached storage")
	}
	final := shareFetchReq("m1", -1, parts, true)
	if r := e.do(t, final, 1).(*kmsg.ShareFetchResponse); r.ErrorCode != 0 {
		t.Fatalf("closing the session after leaving: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	e.fs.mu.Lock()
	acks := len(e.fs.acks)
	e.fs.mu.Unlock()
	if acks != 1 {
		t.Fatalf("final acknowledgements after leaving: %d storage acknowledgements, want 1", acks)
	}

	// The coordinator away: a member never seen is COORDINATOR_NOT_AVAILABLE
	// (retriable); one known before is still served.
	sg.mu.Lock()
	sg.down = true
	sg.mu.Unlock()
	e.h.members.mu.Lock()
	e.h.members.groups["g"].listedAt = time.Time{}
	e.h.members.groups["g"].until["m2"] = time.Now().Add(-time.Second) // ran out
	e.h.members.mu.Unlock()
	if r := fetch(&shareEnv{h: e.h, sess: NewSession(false, AnonymousPrincipal)}, "new", 0); r.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("unknown member, coordinator down: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	e.h.members.mu.Lock()
	e.h.members.groups["g"].listedAt = time.Time{}
	e.h.members.mu.Unlock()
	if r := fetch(other, "m2", 20); r.ErrorCode != 0 {
		t.Fatalf("known member, coordinator down: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	// Unknown members arriving together while the coordinator is away: the ones
	// that waited for another's failed read are not told UNKNOWN_MEMBER_ID either.
	sg.mu.Lock()
	sg.delay = 100 * time.Millisecond
	sg.mu.Unlock()
	e.h.members.mu.Lock()
	e.h.members.groups["g"].listedAt = time.Time{}
	e.h.members.mu.Unlock()
	codes := make(chan int16, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := shareFetchReq(fmt.Sprintf("later-%d", i), 0, parts, false)
			req.SetVersion(1)
			resp, err := e.h.Handle(context.Background(), &Request{Body: req, Session: NewSession(false, AnonymousPrincipal)})
			if err != nil {
				codes <- -1
				return
			}
			codes <- resp.(*kmsg.ShareFetchResponse).ErrorCode
		}(i)
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != kerr.CoordinatorNotAvailable.Code {
			t.Fatalf("unknown member while the coordinator is away: %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(c))
		}
	}
}
