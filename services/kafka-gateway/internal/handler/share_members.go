package handler

// The share group members ShareFetch serves. A ShareFetch acquires records, and the
// first one of a group on a partition creates the share-partition state (a storage-core
// queue) that only the group's deletion (DeleteGroups, DeleteShareGroupOffsets)
// removes; a fetch from a member id that is not in the share group (never joined,
// already left, or a group that does not exist, which nothing would ever delete) is
// refused before it reaches storage. Kafka's share-partition leader does not ask the
// group coordinator either: there the group coordinator initializes a partition's
// share state when it assigns it, and a fetch of a partition never initialized is
// refused by the share coordinator. Here state is made on first fetch, so the member
// is checked instead, against the coordinator's member list cached per group.
//
// Cost: a member this gateway saw heartbeat (ShareGroupHeartbeat passes through it)
// is trusted for shareMemberTTL from that heartbeat; otherwise a group's member list
// is read (DescribeShareGroups, one Postgres read) when a member is not cached or its
// entry ran out, at most once per shareMemberRefresh per group, concurrent misses
// sharing the read. Members heartbeat every 5 s, so a live member's fetches never wait
// for the coordinator; an unknown member id costs at most one read per group per
// shareMemberRefresh.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

const (
	// shareMemberTTL is how long a member is trusted after the coordinator listed it
	// or it heartbeated through this gateway.
	shareMemberTTL = 10 * time.Second
	// shareMemberRefresh is the least time between two member list reads of a group:
	// what an unknown member id costs at most, and how long a member that joined
	// through another gateway may be refused (a top-level error: the client backs off
	// and opens its session again; its first fetch carries no acknowledgements).
	shareMemberRefresh = 250 * time.Millisecond
	// maxShareMemberGroups bounds the groups remembered.
	maxShareMemberGroups = 10_000
)

// shareMembers caches share group members (Handler.members).
type shareMembers struct {
	ttl, refresh time.Duration

	mu     sync.Mutex
	groups map[string]*shareGroupMembers
}

type shareGroupMembers struct {
	// until is when each known member stops being trusted.
	until map[string]time.Time
	// listedAt is when the coordinator's member list was last stored (zero: never).
	listedAt time.Time
	// listing is closed when the list read under way ends (nil: none).
	listing chan struct{}
	// listFailed says the last read could not ask the coordinator.
	listFailed bool
}

func newShareMembers() *shareMembers {
	return &shareMembers{ttl: shareMemberTTL, refresh: shareMemberRefresh, groups: map[string]*shareGroupMembers{}}
}

// groupLocked returns group's entry, adding it (and making room) when missing.
func (s *shareMembers) groupLocked(group string) *shareGroupMembers {
	g := s.groups[group]
	if g != nil {
		return g
	}
	if len(s.groups) >= maxShareMemberGroups {
		now := time.Now()
		for id, o := range s.groups {
			if o.listing == nil && !o.anyLive(now) {
				delete(s.groups, id)
			}
		}
		for id, o := range s.groups {
			if len(s.groups) < maxShareMemberGroups {
				break
			}
			if o.listing == nil {
				delete(s.groups, id)
			}
		}
	}
	g = &shareGroupMembers{until: map[string]time.Time{}}
	s.groups[group] = g
	return g
}

func (g *shareGroupMembers) anyLive(now time.Time) bool {
	for _, u := range g.until {
		if u.After(now) {
			return true
		}
	}
	return false
}

// joined records that member heartbeated into group successfully.
func (s *shareMembers) joined(group, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groupLocked(group).until[member] = time.Now().Add(s.ttl)
}

// left records that member is no longer in group (it left, or the coordinator said
// it is unknown).
func (s *shareMembers) left(group, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[group]; g != nil {
		delete(g.until, member)
	}
}

// check answers whether member is in share group group: 0 when it is,
// UNKNOWN_MEMBER_ID (with a message) when the coordinator does not list it (or there
// is no such share group), COORDINATOR_NOT_AVAILABLE when the coordinator cannot be
// asked and the member was never known. list reads the group's members: found is
// false for no share group of that id.
func (s *shareMembers) check(ctx context.Context, group, member string, list func(context.Context, string) (members []string, found bool, err error)) (int16, string) {
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		g := s.groupLocked(group)
		now := time.Now()
		if u, ok := g.until[member]; ok && u.After(now) {
			s.mu.Unlock()
			return 0, ""
		}
		if attempt > 0 && g.listFailed {
			// The read waited for could not ask the coordinator.
			_, known := g.until[member]
			s.mu.Unlock()
			if known {
				return 0, ""
			}
			return kerr.CoordinatorNotAvailable.Code, ""
		}
		if attempt > 0 || !g.listedAt.IsZero() && now.Sub(g.listedAt) < s.refresh {
			// A member list younger than refresh (or the one just waited for) does
			// not have it.
			s.mu.Unlock()
			return kerr.UnknownMemberID.Code, fmt.Sprintf("member %s is not in share group %s", member, group)
		}
		if ch := g.listing; ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return kerr.CoordinatorNotAvailable.Code, ""
			}
		}
		ch := make(chan struct{})
		g.listing = ch
		start := now
		s.mu.Unlock()

		members, found, err := list(ctx, group)

		s.mu.Lock()
		g.listing = nil
		close(ch)
		g.listFailed = err != nil
		if err != nil {
			_, known := g.until[member]
			s.mu.Unlock()
			if known {
				return 0, "" // known before, the coordinator away: stale beats unavailable
			}
			return kerr.CoordinatorNotAvailable.Code, ""
		}
		// Entries made after the read began (a heartbeat through this gateway) stay;
		// the others are replaced by the list.
		keep := start.Add(s.ttl)
		until := make(map[string]time.Time, len(members))
		for m, u := range g.until {
			if u.After(keep) {
				until[m] = u
			}
		}
		end := time.Now()
		if found {
			for _, m := range members {
				until[m] = end.Add(s.ttl)
			}
		}
		g.until, g.listedAt = until, end
		s.mu.Unlock()
		// Looked up afresh: answer from the new list.
	}
}

// shareMemberCheck is shareMembers.check against the coordinator's
// DescribeShareGroups. Without a coordinator connection (unit tests) every member is
// taken as is.
func (h *Handler) shareMemberCheck(ctx context.Context, group, member string) (int16, string) {
	if h.shares == nil {
		return 0, ""
	}
	return h.members.check(ctx, group, member, func(ctx context.Context, group string) ([]string, bool, error) {
		cctx, cancel := groupCtx(ctx, groupCallTimeout)
		defer cancel()
		out, err := h.shares.DescribeShareGroups(cctx, &coordinatorv1.DescribeShareGroupsRequest{GroupIds: []string{group}})
		if err != nil {
			h.log.Warn("share group member list failed", zap.String("group", group), zap.Error(err))
			return nil, false, err
		}
		if len(out.GetGroups()) != 1 || out.GetGroups()[0].GetErrorCode() != 0 {
			return nil, false, nil
		}
		var ms []string
		for _, m := range out.GetGroups()[0].GetMembers() {
			ms = append(ms, m.GetMemberId())
		}
		return ms, true, nil
	})
}
