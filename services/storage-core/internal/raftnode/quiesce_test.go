package raftnode

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The quiescence tests' timing: 10 ms ticks, an election timeout of 20 ticks, so a
// group quiesces after 40 idle ticks, liveness batches go out every 5 ticks and a
// silent peer is dead after 20.
const (
	qElectionTicks = 20
	qLivenessTicks = 5
)

func quiesceTuning(c *cluster) {
	prev := c.tune
	c.tune = func(cfg *Config) {
		if prev != nil {
			prev(cfg)
		}
		cfg.ElectionTicks = qElectionTicks
		cfg.LivenessInterval = qLivenessTicks * cfg.Tick
	}
}

func noQuiesce(c *cluster) {
	prev := c.tune
	c.tune = func(cfg *Config) {
		if prev != nil {
			prev(cfg)
		}
		cfg.DisableQuiesce = true
	}
}

// withGroups gives every node k more groups.
func withGroups(k int) func(*cluster) {
	return func(c *cluster) {
		for i := 0; i < k; i++ {
			c.groups = append(c.groups, GroupID(fmt.Sprintf("idle.%d", i), 1))
		}
	}
}

// waitQuiesced waits until every group is quiesced on each of ids.
func (c *cluster) waitQuiesced(ids ...uint64) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			st := c.m[id].n.Stats()
			if st.Quiesced == len(c.groups) {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d: %d of %d groups quiesced after 30 s", id, st.Quiesced, len(c.groups))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// traffic is what one node did over a window.
type traffic struct {
	ticks, groupTicks, batches, msgs uint64
}

// window measures what each of ids does while it ticks k times.
func (c *cluster) window(k uint64, ids ...uint64) map[uint64]traffic {
	c.t.Helper()
	start := map[uint64]traffic{}
	for _, id := range ids {
		st := c.m[id].n.Stats()
		start[id] = traffic{st.Ticks, st.GroupTicks, c.batches[id].Load(), c.msgs[id].Load()}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for c.m[id].n.Stats().Ticks < start[id].ticks+k {
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d did not tick %d times in 30 s", id, k)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	got := map[uint64]traffic{}
	for _, id := range ids {
		st := c.m[id].n.Stats()
		s := start[id]
		got[id] = traffic{st.Ticks - s.ticks, st.GroupTicks - s.groupTicks, c.batches[id].Load() - s.batches, c.msgs[id].Load() - s.msgs}
	}
	return got
}

// livenessBound is the most batches a node with quiesced groups sends its 2 peers
// over ticks ticks: one liveness batch per peer per liveness interval (plus the
// window's two ends). It does not depend on the number of groups.
func livenessBound(ticks uint64) uint64 { return 2 * (ticks/qLivenessTicks + 2) }

// TestIdleGroupsStopTicking: once 101 idle groups quiesce, no group ticks and no raft
// message is sent; each node sends only its liveness batches, bounded by its peers,
// not by the groups (with quiescence disabled the same window carries thousands of
// heartbeats). A proposal to a quiesced group commits on all three, and the group
// quiesces again.
func TestIdleGroupsStopTicking(t *testing.T) {
	const idle = 100
	c := newCluster(t, withGroups(idle), quiesceTuning)
	for _, g := range c.groups {
		c.waitLeaderOf(g)
	}
	c.waitQuiesced(1, 2, 3)
	for id, w := range c.window(5*qElectionTicks, 1, 2, 3) {
		t.Logf("node %d quiesced: %+v", id, w)
		if w.groupTicks != 0 || w.msgs != 0 {
			t.Fatalf("node %d with every group quiesced ticked groups %d times and sent %d raft messages", id, w.groupTicks, w.msgs)
		}
		if w.batches == 0 || w.batches > livenessBound(w.ticks) {
			t.Fatalf("node %d sent %d batches over %d ticks, want 1..%d", id, w.batches, w.ticks, livenessBound(w.ticks))
		}
	}

	for i, g := range []uint64{c.group, c.groups[idle]} {
		l := c.waitLeaderOf(g)
		v := fmt.Sprintf("wake-%d", i)
		if pos, err := c.proposeTo(l, g, v); err != nil || pos != 0 {
			t.Fatalf("proposal to quiesced group %d on leader %d: position %d, %v", g, l, pos, err)
		}
		c.waitValuesOf(g, []string{v}, 1, 2, 3)
	}
	c.waitQuiesced(1, 2, 3)

	t.Run("disabled", func(t *testing.T) {
		c := newCluster(t, withGroups(idle), quiesceTuning, noQuiesce)
		for _, g := range c.groups {
			c.waitLeaderOf(g)
		}
		for id, w := range c.window(5*qElectionTicks, 1, 2, 3) {
			t.Logf("node %d not quiesced: %+v", id, w)
			if w.groupTicks < w.ticks*uint64(len(c.groups))/2 || w.msgs <= livenessBound(w.ticks) {
				t.Fatalf("node %d without quiescence: %+v, want every group ticking and heartbeats past %d", id, w, livenessBound(w.ticks))
			}
		}
	})
}

// TestQuiescedLeaderDies: the node leading the most quiesced groups stops; the other
// two declare it dead from its missing liveness batches and elect new leaders for
// each of its groups within a bound of their own ticks (quiesced followers do not
// tick: without liveness they would never elect), the new leaders commit, the groups
// quiesce again without the dead node, and once it returns it catches up.
func TestQuiescedLeaderDies(t *testing.T) {
	c := newCluster(t, withGroups(30), quiesceTuning)
	leads := map[uint64][]uint64{}
	for _, g := range c.groups {
		l := c.waitLeaderOf(g)
		leads[l] = append(leads[l], g)
	}
	c.waitQuiesced(1, 2, 3)
	victim := uint64(1)
	for id := range leads {
		if len(leads[id]) > len(leads[victim]) {
			victim = id
		}
	}
	var rest []uint64
	for id := range c.m {
		if id != victim {
			rest = append(rest, id)
		}
	}
	start := map[uint64]uint64{}
	for _, id := range rest {
		start[id] = c.m[id].n.Stats().Ticks
	}
	began := time.Now()
	c.stop(victim)
	newLeader := map[uint64]uint64{}
	for _, g := range leads[victim] {
		newLeader[g] = c.waitLeaderOf(g, victim)
	}
	ticks := uint64(0)
	for _, id := range rest {
		ticks = max(ticks, c.m[id].n.Stats().Ticks-start[id])
	}
	t.Logf("node %d led %d of %d quiesced groups; all had new leaders after %d ticks (%v)", victim, len(leads[victim]), len(c.groups), ticks, time.Since(began))
	// Detection takes an election timeout; a pre-vote and a vote, and at worst one
	// more randomized election timeout for a tie or a peer that detected later.
	if bound := uint64(5 * qElectionTicks); ticks > bound {
		t.Fatalf("new leaders took %d ticks, want at most %d", ticks, bound)
	}

	moved := leads[victim][:min(3, len(leads[victim]))]
	for _, g := range moved {
		if _, err := c.proposeTo(newLeader[g], g, "after"); err != nil {
			t.Fatalf("group %d on new leader %d: %v", g, newLeader[g], err)
		}
		c.waitValuesOf(g, []string{"after"}, rest...)
	}
	c.waitQuiesced(rest...)

	c.start(victim)
	for _, g := range moved {
		c.waitValuesOf(g, []string{"after"}, 1, 2, 3)
	}
	c.waitQuiesced(1, 2, 3)
}

// TestPartitionedQuiescedFollowerCatchesUp: a follower cut off from both peers while
// its groups are quiesced misses values the other two commit (the leader wakes for
// them and quiesces again with the follower lagging, since it is dead to it); once
// the link heals it catches up, and the leader and its term stay the same (its
// campaigns while cut off were pre-votes, which change no term).
func TestPartitionedQuiescedFollowerCatchesUp(t *testing.T) {
	c := newCluster(t, withGroups(10), quiesceTuning)
	for _, g := range c.groups {
		c.waitLeaderOf(g)
	}
	c.waitQuiesced(1, 2, 3)
	l := c.waitLeader()
	_, _, term, _ := c.m[l].n.Leader(c.group)
	var f, other uint64
	for id := range c.m {
		if id != l {
			if f == 0 {
				f = id
			} else {
				other = id
			}
		}
	}
	c.cut(f, l, true)
	c.cut(f, other, true)
	want := c.proposeAll(l, "p", 5, nil)
	c.waitValues(want, l, other)
	c.waitQuiesced(l, other)
	if n := len(c.m[f].sm.values()); n != 0 {
		t.Fatalf("the cut-off follower applied %d values", n)
	}

	c.cut(f, l, false)
	c.cut(f, other, false)
	c.waitValues(want, 1, 2, 3)
	c.waitQuiesced(1, 2, 3)
	l2, _, term2, _ := c.m[l].n.Leader(c.group)
	if l2 != l || term2 != term {
		t.Fatalf("leader %d term %d after the heal, want %d term %d", l2, term2, l, term)
	}
	if got := c.m[f].sm.values(); !slices.EqualFunc(got, want, func(a []byte, b string) bool { return string(a) == b }) {
		t.Fatalf("follower applied %q", got)
	}
}

// TestRestartedFollowerKeepsQuiescedLeaders: a node restarted from its WAL ticks its
// groups from the start, with no leader known, and pre-votes for those whose leader
// it does not hear from; the quiesced followers refuse (CheckQuorum's lease) and wake
// their leaders (RaftMessage.wake), which take it back. No group led by another node
// changes leader or term, and every group quiesces again on all three.
func TestRestartedFollowerKeepsQuiescedLeaders(t *testing.T) {
	c := newCluster(t, withGroups(20), quiesceTuning)
	type lt struct{ lead, term uint64 }
	before := map[uint64]lt{}
	for _, g := range c.groups {
		l := c.waitLeaderOf(g)
		_, _, term, _ := c.m[l].n.Leader(g)
		before[g] = lt{l, term}
	}
	c.waitQuiesced(1, 2, 3)
	counts := map[uint64]int{}
	for _, v := range before {
		counts[v.lead]++
	}
	// The node leading the fewest groups restarts; the others keep theirs.
	f := uint64(1)
	for id := uint64(2); id <= 3; id++ {
		if counts[id] < counts[f] {
			f = id
		}
	}
	c.stop(f)
	c.start(f)
	c.waitQuiesced(1, 2, 3)
	kept := 0
	for _, g := range c.groups {
		if before[g].lead == f {
			continue
		}
		kept++
		for id := uint64(1); id <= 3; id++ {
			l, _, term, _ := c.m[id].n.Leader(g)
			if l != before[g].lead || term != before[g].term {
				t.Fatalf("group %d on node %d: leader %d term %d after node %d restarted, want %d term %d", g, id, l, term, f, before[g].lead, before[g].term)
			}
		}
	}
	if kept == 0 {
		t.Fatal("every group was led by the restarted node: the test proves nothing")
	}
}
