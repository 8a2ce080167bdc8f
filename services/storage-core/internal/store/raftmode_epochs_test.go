package store

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// offsetForEpoch asks node id's channel name for requested and fails on an error.
func (c *raftCluster) offsetForEpoch(id uint64, name string, requested int32) EpochEnd {
	c.t.Helper()
	l, err := c.st[id].Get(name)
	if err != nil {
		c.t.Fatal(err)
	}
	e, err := l.OffsetForLeaderEpoch(requested)
	if err != nil {
		c.t.Fatalf("OffsetForLeaderEpoch(%d) on node %d: %v", requested, id, err)
	}
	return e
}

// sameEpochs waits until every live node's epoch index of name is want.
func (c *raftCluster) sameEpochs(name string, want []epochEntry) {
	c.t.Helper()
	c.eventually(func() error {
		for id, s := range c.st {
			l, err := s.Get(name)
			if err != nil {
				return err
			}
			l.epochs.mu.Lock()
			got := append([]epochEntry(nil), l.epochs.e...)
			l.epochs.mu.Unlock()
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("node %d epoch index %v, want %v", id, got, want)
			}
		}
		return nil
	})
}

// TestRaftModeOffsetForLeaderEpoch: the leader-epoch index (term → first offset) is
// built at apply on every replica alike, persisted, trimmed with the log start, and
// OffsetForLeaderEpoch answers from it as Kafka's leader does: the current epoch ends
// at the high watermark, an older one at the next epoch's start (with the largest
// epoch at or below the one asked), one above the current is UNDEFINED; a new leader
// answers only once its term is in the index (earlier terms applied); a follower
// refuses with ErrNotLeader.
func TestRaftModeOffsetForLeaderEpoch(t *testing.T) {
	c := newRaftCluster(t)
	const ch = "raft.epochs"
	group := c.create(ch)
	l1 := c.leader(group)
	_, _, t1, _ := c.st[l1].raft.node.Leader(group)
	e1 := int32(t1)
	for id := range c.st {
		if id == l1 {
			continue
		}
		l, _ := c.st[id].Get(ch)
		if _, err := l.OffsetForLeaderEpoch(e1); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower %d: %v, want ErrNotLeader", id, err)
		}
	}
	// No record yet: the leader opens its term at offset 0.
	if got := c.offsetForEpoch(l1, ch, e1); got != (EpochEnd{Epoch: e1, EndOffset: 0, Current: e1}) {
		t.Fatalf("current epoch of an empty log: %+v", got)
	}
	c.sameEpochs(ch, []epochEntry{{e1, 0}})
	for i := 0; i < 5; i++ {
		if _, err := c.appendOn(l1, ch, fmt.Sprintf("a%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	c.sameBytes(ch, 5)
	for _, q := range []struct {
		req  int32
		want EpochEnd
	}{
		{e1, EpochEnd{e1, 5, e1}},
		{e1 + 1, EpochEnd{-1, -1, e1}},
		{-1, EpochEnd{-1, -1, e1}},
		{0, EpochEnd{0, 0, e1}}, // older than every epoch: that epoch, the first start
	} {
		if got := c.offsetForEpoch(l1, ch, q.req); got != q.want {
			t.Fatalf("term %d, epoch %d: %+v, want %+v", e1, q.req, got, q.want)
		}
	}

	c.stop(l1)
	l2 := c.leader(group)
	_, _, t2, _ := c.st[l2].raft.node.Leader(group)
	e2 := int32(t2)
	for i := 5; i < 8; i++ {
		if _, err := c.appendOn(l2, ch, fmt.Sprintf("b%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	c.start(l1) // rebuilt from its WAL
	c.sameBytes(ch, 8)
	c.sameEpochs(ch, []epochEntry{{e1, 0}, {e2, 5}})
	for _, q := range []struct {
		req  int32
		want EpochEnd
	}{
		{e1, EpochEnd{e1, 5, e2}},
		{e2, EpochEnd{e2, 8, e2}},
		{e2 - 1, EpochEnd{e1, 5, e2}}, // e1 < e2-1 when an election took more than one term
		{e2 + 1, EpochEnd{-1, -1, e2}},
	} {
		if got := c.offsetForEpoch(l2, ch, q.req); got != q.want {
			t.Fatalf("terms %d, %d; epoch %d: %+v, want %+v", e1, e2, q.req, got, q.want)
		}
	}
	if e, err := c.st[l2].mustGet(t, ch).scanEpochs(); err != nil || !reflect.DeepEqual(e, []epochEntry{{e1, 0}, {e2, 5}}) {
		t.Fatalf("index rebuilt from the batches: %v %v", e, err)
	}

	// A new leader without an append of its own: its term opens at the log end once
	// every earlier entry is applied.
	c.stop(l2)
	l3 := c.leader(group)
	_, _, t3, _ := c.st[l3].raft.node.Leader(group)
	e3 := int32(t3)
	if got := c.offsetForEpoch(l3, ch, e2); got != (EpochEnd{e2, 8, e3}) {
		t.Fatalf("epoch %d under leader of term %d: %+v", e2, e3, got)
	}
	if got := c.offsetForEpoch(l3, ch, e3); got != (EpochEnd{e3, 8, e3}) {
		t.Fatalf("current epoch %d: %+v", e3, got)
	}
	c.start(l2)
	c.sameEpochs(ch, []epochEntry{{e1, 0}, {e2, 5}, {e3, 8}})

	// DeleteRecords trims the index as Kafka's truncateFromStart.
	ll := c.st[l3].mustGet(t, ch)
	if _, err := ll.DeleteRecords(6); err != nil {
		t.Fatal(err)
	}
	c.sameEpochs(ch, []epochEntry{{e2, 6}, {e3, 8}})
	if got := c.offsetForEpoch(l3, ch, e1); got != (EpochEnd{e1, 6, e3}) {
		t.Fatalf("epoch %d below the log start: %+v", e1, got)
	}
	// The file holds what the index holds.
	for id, s := range c.st {
		got, ok, err := readEpochFile(s.mustGet(t, ch).dir)
		if err != nil || !ok || !reflect.DeepEqual(got, []epochEntry{{e2, 6}, {e3, 8}}) {
			t.Fatalf("node %d %s: %v %v %v", id, epochFile, got, ok, err)
		}
	}
}

func (s *Store) mustGet(t *testing.T, name string) *Log {
	t.Helper()
	l, err := s.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestOffsetForLeaderEpochDefaultMode: with one node the epoch is 0 forever and
// there is no index: any epoch >= 0 ends at the high watermark, -1 is UNDEFINED.
func TestOffsetForLeaderEpochDefaultMode(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l, _, err := s.Create("epochs", ChannelConfig{}, false)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, kbatch(t, batchOpt{}, "a", "b"))
	if l.epochs != nil {
		t.Fatal("the default mode keeps an epoch index")
	}
	for _, q := range []struct {
		req  int32
		want EpochEnd
	}{{0, EpochEnd{0, 2, 0}}, {3, EpochEnd{0, 2, 0}}, {-1, EpochEnd{-1, -1, 0}}} {
		if got, err := l.OffsetForLeaderEpoch(q.req); err != nil || got != q.want {
			t.Fatalf("epoch %d: %+v %v, want %+v", q.req, got, err, q.want)
		}
	}
}

// TestEpochIndex: Kafka's LeaderEpochFileCache rules for assign, truncation from
// the start and the end, and endOffsetFor.
func TestEpochIndex(t *testing.T) {
	x := &epochIndex{dir: t.TempDir()}
	for _, a := range []epochEntry{{2, 0}, {2, 3}, {4, 3}, {5, 3}, {7, 10}} {
		if err := x.assign(a.epoch, a.start); err != nil {
			t.Fatal(err)
		}
	}
	// {4,3} gave way to {5,3}: an epoch without records.
	if want := []epochEntry{{2, 0}, {5, 3}, {7, 10}}; !reflect.DeepEqual(x.e, want) {
		t.Fatalf("index %v, want %v", x.e, want)
	}
	for _, q := range []struct {
		req       int32
		ep        int32
		end       int64
		leo       int64
		requested string
	}{
		{7, 7, 12, 12, "current"}, {5, 5, 10, 12, "older"}, {6, 5, 10, 12, "gap"},
		{3, 2, 3, 12, "gap below"}, {1, 1, 0, 12, "below every epoch"},
		{8, -1, -1, 12, "above"}, {-1, -1, -1, 12, "undefined"},
	} {
		if ep, end := x.endOffsetFor(q.req, q.leo); ep != q.ep || end != q.end {
			t.Fatalf("%s (%d): (%d, %d), want (%d, %d)", q.requested, q.req, ep, end, q.ep, q.end)
		}
	}
	if err := x.trimStart(5); err != nil {
		t.Fatal(err)
	}
	if want := []epochEntry{{5, 5}, {7, 10}}; !reflect.DeepEqual(x.e, want) {
		t.Fatalf("after trimStart(5): %v, want %v", x.e, want)
	}
	x.cutEnd(9)
	if want := []epochEntry{{5, 5}}; !reflect.DeepEqual(x.e, want) {
		t.Fatalf("after cutEnd(9): %v, want %v", x.e, want)
	}
	if err := x.assign(3, 4); err != nil { // an older epoch replayed: later ones give way
		t.Fatal(err)
	}
	got, ok, err := readEpochFile(x.dir)
	if err != nil || !ok || !reflect.DeepEqual(got, []epochEntry{{3, 4}}) {
		t.Fatalf("file %v %v %v", got, ok, err)
	}
}
