package raftnode

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// GroupID is the Raft group id of a replicated channel: the first 8 bytes of
// SHA-256(name, 0x00, incarnation), never 0 or 1 (0 is "none" to raft's messages, 1 is
// kept for the node's metadata group that will order creates and deletes). The
// incarnation is what makes a re-created channel a new group whose entries never mix
// with the deleted one's: every replica must derive the same value, so it comes from
// the replicated create (the create entry's index in the metadata group), never from a
// node's own clock or a random draw.
func GroupID(channel string, incarnation uint64) uint64 {
	h := sha256.New()
	h.Write([]byte(channel))
	var b [9]byte
	binary.BigEndian.PutUint64(b[1:], incarnation)
	h.Write(b[:])
	id := binary.BigEndian.Uint64(h.Sum(nil))
	if id <= 1 {
		id += 2
	}
	return id
}

// Replay collects what the node WAL holds per group at start: hook its Entry and
// HardState into wal.Options.ReplayEntry / ReplayHardState, then hand it to New. Raft's
// log rule is applied here: an entry at index i replaces every earlier-logged entry
// from i on (the WAL keeps records in lsn order and never rewrites, so a deposed
// leader's uncommitted tail and its replacement are both in it; the later one wins).
// The entries kept are in index order but not always contiguous: AddGroup decides what
// a jump means.
type Replay struct {
	mu     sync.Mutex
	groups map[uint64]*replayed
}

type replayed struct {
	ents []raftpb.Entry
	hs   raftpb.HardState
}

// NewReplay returns an empty Replay.
func NewReplay() *Replay { return &Replay{groups: map[uint64]*replayed{}} }

func (r *Replay) group(g uint64) *replayed {
	rg := r.groups[g]
	if rg == nil {
		rg = &replayed{}
		r.groups[g] = rg
	}
	return rg
}

// Entry records one replayed entry of group g (wal.Options.ReplayEntry). e.Data is
// copied.
func (r *Replay) Entry(g uint64, e *raftpb.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rg := r.group(g)
	c := *e
	c.Data = append([]byte(nil), e.Data...)
	if n := len(rg.ents); n > 0 && c.Index <= rg.ents[n-1].Index {
		// By search, not by offset: the indices may jump (a log restarted above
		// the WAL's end, AddGroup).
		k := sort.Search(n, func(i int) bool { return rg.ents[i].Index >= c.Index })
		rg.ents = rg.ents[:k]
	}
	rg.ents = append(rg.ents, c)
	return nil
}

// HardState records group g's latest hard state (wal.Options.ReplayHardState).
func (r *Replay) HardState(g uint64, hs raftpb.HardState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.group(g).hs = hs
	return nil
}

// Commit is the commit index of group g's replayed hard state (0: none): what the
// group applies again right after AddGroup.
func (r *Replay) Commit(g uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rg := r.groups[g]; rg != nil {
		return rg.hs.Commit
	}
	return 0
}

// take hands over (and forgets) what was replayed for g.
func (r *Replay) take(g uint64) (raftpb.HardState, []raftpb.Entry) {
	if r == nil {
		return raftpb.HardState{}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rg := r.groups[g]
	if rg == nil {
		return raftpb.HardState{}, nil
	}
	delete(r.groups, g)
	return rg.hs, rg.ents
}
