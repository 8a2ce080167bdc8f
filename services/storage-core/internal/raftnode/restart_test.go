package raftnode

import (
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// TestReplayJumpReplacesTail: an entry that replaces a tail whose indices jump cuts the
// tail at its own index, not at an offset from the first entry.
func TestReplayJumpReplacesTail(t *testing.T) {
	r := NewReplay()
	var in []raftpb.Entry
	for _, i := range []uint64{2, 3, 4, 5, 9, 10, 11, 12} {
		in = append(in, raftpb.Entry{Index: i, Term: 1})
	}
	in = append(in, raftpb.Entry{Index: 10, Term: 2})
	for i := range in {
		if err := r.Entry(7, &in[i]); err != nil {
			t.Fatal(err)
		}
	}
	_, ents := r.take(7)
	var got []uint64
	for _, e := range ents {
		got = append(got, e.Index*10+e.Term)
	}
	want := []uint64{21, 31, 41, 51, 91, 102}
	if len(got) != len(want) {
		t.Fatalf("replay = %v (index*10+term), want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("replay = %v (index*10+term), want %v", got, want)
		}
	}
}

// TestAddGroupWALLacksEntries: a WAL that lacks entries above the floor (it resumes
// above it, or its indices jump) restarts the group's log at the applied entry when
// it holds every entry after that one, and is refused when it does not; the log never
// holds a jump.
func TestAddGroupWALLacksEntries(t *testing.T) {
	run := func(from, to, term uint64) []raftpb.Entry {
		var e []raftpb.Entry
		for i := from; i <= to; i++ {
			e = append(e, raftpb.Entry{Index: i, Term: term})
		}
		return e
	}
	for _, c := range []struct {
		what        string
		ents        []raftpb.Entry
		r           Restart
		first, last uint64 // of the MemoryStorage; 0: AddGroup fails
		err         string
	}{
		{"contiguous above the floor", run(2, 10, 1), Restart{Applied: Floor{8, 1}, Floor: Floor{5, 1}}, 6, 10, ""},
		{"resumes above the floor, at most one past the checkpoint", run(9, 12, 1), Restart{Applied: Floor{8, 1}, Floor: Floor{5, 1}}, 9, 12, ""},
		{"resumes past the checkpoint", run(10, 12, 1), Restart{Applied: Floor{8, 1}, Floor: Floor{5, 1}}, 0, 0, "lacks entries 6 to 9"},
		{"jumps, at most one past the checkpoint", append(run(2, 10, 1), run(21, 25, 2)...), Restart{Applied: Floor{20, 2}, Floor: Floor{5, 1}}, 21, 25, ""},
		{"jumps below the checkpoint", append(run(2, 10, 1), run(15, 25, 2)...), Restart{Applied: Floor{20, 2}, Floor: Floor{5, 1}}, 21, 25, ""},
		{"jumps past the checkpoint", append(run(2, 10, 1), run(21, 25, 2)...), Restart{Applied: Floor{15, 2}, Floor: Floor{5, 1}}, 0, 0, "lacks entries 11 to 20"},
		{"another term at the checkpoint", append(run(2, 10, 1), run(15, 25, 2)...), Restart{Applied: Floor{20, 1}, Floor: Floor{5, 1}}, 0, 0, "has term 2"},
	} {
		t.Run(c.what, func(t *testing.T) {
			rp := NewReplay()
			w, err := wal.Open(t.TempDir(), wal.Options{}, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Close() }()
			for i := range c.ents {
				if err := rp.Entry(9, &c.ents[i]); err != nil {
					t.Fatal(err)
				}
			}
			n, err := New(Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1"}, Tick: 10 * time.Millisecond}, w, rp, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			err = n.AddGroup(9, &logSM{}, c.r)
			if c.first == 0 {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("AddGroup: %v, want an error saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ms := n.group(9).ms
			first, _ := ms.FirstIndex()
			last, _ := ms.LastIndex()
			if first != c.first || last != c.last {
				t.Fatalf("log %d..%d, want %d..%d", first, last, c.first, c.last)
			}
			ents, err := ms.Entries(first, last+1, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			for k, e := range ents {
				if e.Index != first+uint64(k) {
					t.Fatalf("log entry %d has index %d", first+uint64(k), e.Index)
				}
			}
		})
	}
}

// TestRestartedPeerReconnectsAtOnce: a node down for 20 s (its peers' dials of it
// failing all along) is caught up within 3 s of its restart. gRPC's own reconnect
// backoff grows to 2 minutes; after 20 s down, its next attempt came about 6 s after
// the restart, and after a few minutes down, up to 2 minutes after it: the node
// stayed out of every group (and out of the ISR) that long.
func TestRestartedPeerReconnectsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps a node down for 20 s")
	}
	c := newCluster(t)
	const down = 3 // dialed by both others: the lower id dials
	lead := c.waitLeader()
	want := c.proposeAll(lead, "a", 5, nil)
	c.waitValues(want, 1, 2, 3)
	c.stop(down)
	time.Sleep(20 * time.Second)
	lead = c.waitLeader(down)
	want = c.proposeAll(lead, "b", 5, want)
	c.start(down)
	start := time.Now()
	for len(c.m[down].sm.values()) != len(want) {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("node %d has %d of %d values 3 s after its restart", down, len(c.m[down].sm.values()), len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("node %d caught up %v after its restart", down, time.Since(start).Round(time.Millisecond))
	c.waitValues(want, 1, 2, 3)
}
