package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestRaftKillTornCheckpoint: a checkpoint file cut mid-record, or garbage, makes
// Open refuse with ErrDataLoss; a leftover checkpoint.tmp does not stop a start.
func TestRaftKillTornCheckpoint(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.CheckpointInterval = -1 })
	const name = "raft.torn"
	group := c.create(name)
	c.appendValues(group, name, "v", 5)
	c.sameBytes(name, 5)
	f := uint64(1)
	if c.leader(group) == f {
		f = 2
	}
	if err := c.st[f].RunRaftCheckpoint(); err != nil {
		t.Fatal(err)
	}
	c.stop(f)
	path := filepath.Join(c.dirs[f], raftWALDir, raftCheckpointFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Raft: &RaftOptions{NodeID: f, Peers: c.peers, Tick: 10 * time.Millisecond}, RetentionInterval: -1, CheckpointInterval: -1, Cleaner: CleanerOptions{Threads: -1}}
	for _, bad := range [][]byte{good[:len(good)/2], good[:len(good)-1], append([]byte("garbage"), good[7:]...), {}} {
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(c.dirs[f], o, zap.NewNop())
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open with a %d-byte damaged checkpoint succeeded", len(bad))
		}
		if !errors.Is(err, ErrDataLoss) {
			t.Fatalf("Open with a damaged checkpoint: %v, want ErrDataLoss", err)
		}
	}
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	c.start(f)
	c.sameBytes(name, 5)
}

// TestRaftKillCompactedRestartAll: a compacted channel cleaned on every node, 30 more
// batches appended (segments rolled past the checkpoint), then all three stopped
// without their last checkpoint and started at once: each holds every key's newest
// record at its offset and only records that were written there, cleans again, and
// takes more appends.
func TestRaftKillCompactedRestartAll(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.CheckpointInterval = -1; o.WALFileBytes = 32 << 10 })
	const name = "raft.kill.compact"
	group := c.create(name)
	ml, _ := c.st[c.leader(metaGroup)].Get(name)
	if err := ml.UpdateConfigFields(ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 4 << 10, MinCleanableDirtyRatio: -1},
		[]string{"cleanup_policy", "segment_bytes", "min_cleanable_dirty_ratio"}); err != nil {
		t.Fatal(err)
	}
	c.eventually(func() error {
		for id, s := range c.st {
			if l, _ := s.Get(name); !l.Config().Compacted() || l.Config().SegmentBytes != 4<<10 {
				return fmt.Errorf("node %d not compacted yet", id)
			}
		}
		return nil
	})
	clk := &clock{}
	clk.ms.Store(time.Now().UnixMilli())
	ll, _ := c.st[c.leader(group)].Get(name)
	written := compactWorkload(t, ll, clk, 50, 8)
	c.sameBytes(name, int64(len(written)))
	check := func() {
		t.Helper()
		newest := map[string]int64{}
		for off, kv := range written {
			if off >= newest[string(kv[0])] {
				newest[string(kv[0])] = off
			}
		}
		for id, s := range c.st {
			l, _ := s.Get(name)
			if l.failed != nil {
				t.Fatalf("node %d fenced: %v", id, l.failed)
			}
			got := map[int64]bool{}
			for _, r := range readAll(t, l, l.LogStart()) {
				kv, ok := written[r.Offset]
				if !ok || !bytes.Equal(r.Key, kv[0]) || !bytes.Equal(r.Value, kv[1]) {
					t.Fatalf("node %d offset %d: key %q value %q, written %q %q", id, r.Offset, r.Key, r.Value, kv[0], kv[1])
				}
				got[r.Offset] = true
			}
			for k, off := range newest {
				if !got[off] {
					t.Fatalf("node %d lacks key %s's newest record at %d", id, k, off)
				}
			}
		}
	}
	for id, s := range c.st {
		if err := s.RunRaftCheckpoint(); err != nil {
			t.Fatal(err)
		}
		if s.RunCleaner() == 0 {
			t.Fatalf("node %d ran no cleaner pass", id)
		}
	}
	check()
	more := compactWorkload(t, ll, clk, 50, 6)
	for off, kv := range more { // at the log's offsets
		written[off] = kv
	}
	c.eventually(func() error {
		for id, s := range c.st {
			if l, _ := s.Get(name); l.HighWatermark() != int64(len(written)) {
				return fmt.Errorf("node %d high watermark %d, want %d", id, l.HighWatermark(), len(written))
			}
		}
		return nil
	})
	for id := range c.dirs {
		c.st[id].raft.skipCloseCheckpoint = true
		c.stop(id)
	}
	for id := range c.dirs {
		c.start(id)
	}
	c.eventually(func() error {
		for id, s := range c.st {
			if l, _ := s.Get(name); l.HighWatermark() != int64(len(written)) {
				return fmt.Errorf("node %d high watermark %d, want %d", id, l.HighWatermark(), len(written))
			}
		}
		return nil
	})
	check()
	for _, s := range c.st {
		if err := s.RunRaftCheckpoint(); err != nil {
			t.Fatal(err)
		}
		s.RunCleaner()
	}
	check()
}

// TestRaftKillMissingCheckpointAfterTruncation: once the WAL is truncated, a start
// without the checkpoint file (an operator removing a damaged one, a copy without it)
// cannot rebuild from the WAL: Open must refuse, and must not have emptied the
// channels directory first.
func TestRaftKillMissingCheckpointAfterTruncation(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.WALFileBytes = 16 << 10; o.CheckpointInterval = -1 })
	const name = "raft.nockpt"
	group := c.create(name)
	value := strings.Repeat("m", 1000)
	for i := 0; i < 100; i++ {
		if _, err := c.appendOn(c.leader(group), name, value, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.sameBytes(name, 100)
	c.eventually(func() error {
		for id, s := range c.st {
			if err := s.RunRaftCheckpoint(); err != nil {
				return err
			}
			if n := s.raft.w.Files(); n > 2 {
				return fmt.Errorf("node %d has %d WAL files", id, n)
			}
		}
		return nil
	})
	f := uint64(1)
	if c.leader(group) == f {
		f = 2
	}
	c.stop(f)
	if err := os.Remove(filepath.Join(c.dirs[f], raftWALDir, raftCheckpointFile)); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(c.dirs[f], "channels", "*", "*.log"))
	if len(segs) == 0 {
		t.Fatal("no segments before the start")
	}
	o := Options{Raft: &RaftOptions{NodeID: f, Peers: c.peers, Tick: 10 * time.Millisecond}, RetentionInterval: -1, CheckpointInterval: -1, Cleaner: CleanerOptions{Threads: -1}}
	s, err := Open(c.dirs[f], o, zap.NewNop())
	if err == nil {
		l, gerr := s.Get(name)
		hw := int64(-1)
		if gerr == nil {
			hw = l.HighWatermark()
		}
		_ = s.Close()
		t.Fatalf("Open without the checkpoint of a truncated WAL succeeded (%s: high watermark %d, %v)", name, hw, gerr)
	}
	t.Logf("Open: %v", err)
	after, _ := filepath.Glob(filepath.Join(c.dirs[f], "channels", "*", "*.log"))
	if len(after) != len(segs) {
		t.Fatalf("the failed Open left %d of %d segment files", len(after), len(segs))
	}
}

// TestRaftKillFloorBehindTruncation: a follower restarts from a checkpoint file whose
// WAL floor is older than the WAL's truncation (the checkpoint as it was before a
// round that raised the floor and removed the files below it: what a copy of the data
// directory that read the checkpoint before the WAL holds). Its WAL resumes above the
// old floor but not above the old checkpoint's applied entry, so the follower
// restarts its log at that entry: it starts, holds every acknowledged record and
// takes part in the appends that follow. Before, Open refused: "the WAL holds entries
// from index N only, its floor is F".
func TestRaftKillFloorBehindTruncation(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.WALFileBytes = 16 << 10; o.CheckpointInterval = -1 })
	const name = "raft.stalefloor"
	group := c.create(name)
	value := strings.Repeat("f", 1000)
	next := 0
	appendN := func(k int) {
		t.Helper()
		for i := 0; i < k; i++ {
			if _, err := c.appendOn(c.leader(group), name, fmt.Sprintf("%06d%s", next, value), nil); err != nil {
				t.Fatal(err)
			}
			next++
		}
		c.sameBytes(name, int64(next))
	}
	appendN(20)
	lead := c.leader(group)
	var f, x uint64
	for id := range c.st {
		switch {
		case id == lead:
		case f == 0:
			f = id
		default:
			x = id
		}
	}
	// With x down the floor stays at x's match while f's checkpoint moves on.
	c.stop(x)
	appendN(100)
	if err := c.st[f].RunRaftCheckpoint(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.dirs[f], raftWALDir, raftCheckpointFile)
	stale, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := readRaftCheckpoint(filepath.Join(c.dirs[f], raftWALDir))
	if err != nil {
		t.Fatal(err)
	}
	if ck := old[group]; ck.floor.Index >= ck.index {
		t.Fatalf("checkpoint %d, floor %d: the floor should lag while node %d is down", ck.index, ck.floor.Index, x)
	}
	// x back: the compacted point reaches the commit index and f's floor follows it,
	// removing the WAL files the old floor still needed.
	c.start(x)
	c.sameBytes(name, int64(next))
	c.eventually(func() error {
		if err := c.st[f].RunRaftCheckpoint(); err != nil {
			return err
		}
		seqs, err := os.ReadDir(filepath.Join(c.dirs[f], raftWALDir))
		if err != nil {
			return err
		}
		if n := c.st[f].raft.w.Files(); n > 2 || len(seqs) == 0 {
			return fmt.Errorf("node %d has %d WAL files", f, n)
		}
		return nil
	})
	c.st[f].raft.skipCloseCheckpoint = true
	c.stop(f)
	if err := os.WriteFile(path, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		c.sameBytes(name, int64(next))
		l, _ := c.st[f].Get(name)
		recs := readAll(t, l, 0)
		if len(recs) != next {
			t.Fatalf("node %d holds %d records, want %d", f, len(recs), next)
		}
		for i, r := range recs {
			if want := fmt.Sprintf("%06d%s", i, value); r.Offset != int64(i) || string(r.Value) != want {
				t.Fatalf("node %d record %d: offset %d value %.10q", f, i, r.Offset, r.Value)
			}
		}
	}
	c.start(f)
	check()
	appendN(10)
	check()
	// Again, from the log it restarted at the checkpoint (its floor is still the old
	// one): the WAL holds every entry after the checkpoint.
	c.st[f].raft.skipCloseCheckpoint = true
	c.stop(f)
	c.start(f)
	appendN(5)
	check()
}
