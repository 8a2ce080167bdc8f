package raftnode

import (
	"fmt"
	"testing"
	"time"
)

// TestCompactedWaitsForEveryVoter: the leader's compacted point (every voter has
// persisted the log up to it) reaches every node, at the last index once the group is
// idle; while a follower is down it stays at or below that follower's last index on
// every node, however much the others commit; once the follower is back and caught up
// it reaches the new last index everywhere.
func TestCompactedWaitsForEveryVoter(t *testing.T) {
	c := newCluster(t)
	l := c.waitLeader()
	want := c.proposeAll(l, "a", 20, nil)
	c.waitValues(want, 1, 2, 3)
	compactedAt := func(index uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			bad := ""
			for id, m := range c.m {
				if !m.live {
					continue
				}
				f, err := m.n.Compacted(c.group)
				if err != nil {
					t.Fatal(err)
				}
				if f.Index != index {
					bad = fmt.Sprintf("node %d compacted at %d, want %d", id, f.Index, index)
					break
				}
				if term, err := m.n.groups[c.group].ms.Term(index); err == nil && term != f.Term {
					t.Fatalf("node %d compacted at %d with term %d, the entry's is %d", id, f.Index, f.Term, term)
				}
			}
			if bad == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal(bad)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	last, err := c.m[l].n.DurableIndex(c.group)
	if err != nil {
		t.Fatal(err)
	}
	compactedAt(last)

	var down uint64
	for id := range c.m {
		if id != l {
			down = id
			break
		}
	}
	c.stop(down)
	want = c.proposeAll(l, "b", 20, want)
	time.Sleep(60 * 10 * time.Millisecond) // more than 10 compaction rounds of 5 ticks
	for id, m := range c.m {
		if !m.live {
			continue
		}
		if f, _ := m.n.Compacted(c.group); f.Index > last {
			t.Fatalf("node %d compacted at %d while node %d, down, has the log up to %d only", id, f.Index, down, last)
		}
	}

	c.start(down)
	c.waitValues(want, 1, 2, 3)
	l = c.waitLeader()
	last, _ = c.m[l].n.DurableIndex(c.group)
	compactedAt(last)
}
