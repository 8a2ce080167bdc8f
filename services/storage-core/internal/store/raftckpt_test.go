package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRaftModeWALTruncation: with 32 KiB WAL files, 200 appends of 1 KiB fill several
// files on every node and the checkpoints remove them all but the last; a stopped
// follower holds back the others' truncation; with the old leader down and the other
// node restarted from its WAL (what is left of it), that node leads and catches the
// follower up from its log; every node then truncates again; a node stopped without
// its last checkpoint (a crash's state: its segments hold entries past the
// checkpoint) applies again only the entries above its checkpoint, and ends with the
// same bytes as the others.
func TestRaftModeWALTruncation(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.WALFileBytes = 32 << 10; o.CheckpointInterval = -1 })
	const name = "raft.trunc"
	group := c.create(name)
	value := strings.Repeat("v", 1000)
	next := int64(0)
	appendN := func(k int) {
		t.Helper()
		lead := c.leader(group)
		for i := 0; i < k; i++ {
			res, err := c.appendOn(lead, name, fmt.Sprintf("%06d%s", next, value), nil)
			if err != nil || res.BaseOffset != next {
				t.Fatalf("append %d on node %d: %+v %v", next, lead, res, err)
			}
			next++
		}
	}
	files := func(id uint64) int { return c.st[id].raft.w.Files() }
	walBytes := func(id uint64) int64 {
		ents, err := os.ReadDir(filepath.Join(c.dirs[id], raftWALDir))
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".wal") {
				n += fi.Size()
			}
		}
		return n
	}
	checkpointAll := func() {
		t.Helper()
		for id, s := range c.st {
			if err := s.RunRaftCheckpoint(); err != nil {
				t.Fatalf("node %d: %v", id, err)
			}
		}
	}
	truncated := func() {
		t.Helper()
		c.eventually(func() error {
			checkpointAll()
			for id := range c.st {
				if n := files(id); n > 2 {
					return fmt.Errorf("node %d has %d WAL files", id, n)
				}
			}
			return nil
		})
	}

	appendN(200)
	c.sameBytes(name, next)
	for id := range c.st {
		// A follower that lagged may have written many entries in one round (one file).
		if n := files(id); n < 2 || walBytes(id) < 200_000 {
			t.Fatalf("node %d has %d WAL files, %d bytes after 200 KB of appends", id, n, walBytes(id))
		}
	}
	truncated()

	// A stopped follower holds the others' WAL.
	lead := c.leader(group)
	var follower, other uint64
	for id := range c.st {
		if id != lead {
			if follower == 0 {
				follower = id
			} else {
				other = id
			}
		}
	}
	c.stop(follower)
	appendN(200)
	c.sameBytes(name, next)
	for i := 0; i < 5; i++ {
		checkpointAll()
		time.Sleep(100 * time.Millisecond)
	}
	for id := range c.st {
		if n := walBytes(id); n < 200_000 {
			t.Fatalf("node %d has %d bytes of WAL files while node %d lacks 200 KB of entries", id, n, follower)
		}
	}

	// The old leader down, the other node restarted from its WAL: it leads (the
	// follower's log is behind) and catches the follower up from its own log.
	c.stop(lead)
	c.stop(other)
	c.start(other)
	c.start(follower)
	if l := c.leader(group); l != other {
		t.Fatalf("node %d leads, want node %d (the follower's log is behind)", l, other)
	}
	c.sameBytes(name, next)
	c.start(lead)
	c.sameBytes(name, next)
	appendN(20)
	c.sameBytes(name, next)
	truncated()

	// A crash's state: the leader stops without its last checkpoint, 30 entries
	// after its checkpoint.
	lead = c.leader(group)
	checkpointAll()
	appendN(30)
	c.sameBytes(name, next)
	c.st[lead].raft.skipCloseCheckpoint = true
	c.stop(lead)
	appendN(5) // under the new leader
	c.start(lead)
	c.sameBytes(name, next)
	if a := c.st[lead].raft.node.Stats().Applies; a < 35 || a > 40 {
		t.Fatalf("node %d applied %d entries again after its restart, want those above its checkpoint: 35 (of %d)", lead, a, next)
	}
	for id := range c.st {
		if id != lead {
			continue
		}
		l, _ := c.st[id].Get(name)
		recs, _, err := l.ReadRecords(0, int(next), 64<<20)
		if err != nil || int64(len(recs)) != next {
			t.Fatalf("node %d: %d records, %v", id, len(recs), err)
		}
		for i, r := range recs {
			if want := fmt.Sprintf("%06d%s", i, value); string(r.Value) != want || r.Offset != int64(i) {
				t.Fatalf("node %d record %d: offset %d value %.10q", id, i, r.Offset, r.Value)
			}
		}
	}
}

// TestRaftModeResumeAfterDeleteRecords: DeleteRecords to the end of the log removes
// every segment but a new empty one; a follower stopped without its last checkpoint
// (and with no checkpoint loop) resumes from the checkpoint that entry took before
// removing them, applies the entries after it again, and holds the same log start and
// bytes as the others. Without that checkpoint the follower would have to cut its
// segments back to offset 0, which no longer exists.
func TestRaftModeResumeAfterDeleteRecords(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.CheckpointInterval = -1 })
	const name = "raft.trimresume"
	group := c.create(name)
	lead := c.leader(group)
	ll, _ := c.st[lead].Get(name)
	for i := 0; i < 10; i++ {
		mustAppend(t, ll, kbatch(t, batchOpt{}, fmt.Sprintf("v%d", i)))
	}
	if got, err := ll.DeleteRecords(-1); err != nil || got != 10 {
		t.Fatalf("DeleteRecords(-1): %d %v, want 10", got, err)
	}
	for i := 10; i < 13; i++ {
		mustAppend(t, ll, kbatch(t, batchOpt{}, fmt.Sprintf("v%d", i)))
	}
	same := func() {
		t.Helper()
		c.eventually(func() error {
			var ref []byte
			for id, s := range c.st {
				l, err := s.Get(name)
				if err != nil {
					return err
				}
				if l.HighWatermark() != 13 || l.LogStart() != 10 {
					return fmt.Errorf("node %d: high watermark %d, log start %d", id, l.HighWatermark(), l.LogStart())
				}
				b, err := l.ReadRaw(10, 1<<20)
				if err != nil {
					return fmt.Errorf("node %d: %v", id, err)
				}
				if ref != nil && !bytes.Equal(b, ref) {
					t.Fatalf("node %d holds other bytes from offset 10", id)
				}
				ref = b
			}
			return nil
		})
	}
	same()
	var f uint64
	for id := range c.st {
		if id != lead {
			f = id
			break
		}
	}
	c.st[f].raft.skipCloseCheckpoint = true
	c.stop(f)
	c.start(f)
	same()
	if a := c.st[f].raft.node.Stats().Applies; a != 4 {
		t.Fatalf("node %d applied %d entries again, want 4 (the DeleteRecords and 3 appends)", f, a)
	}
}

// TestRaftModeResumeRecreatedChannel: a channel deleted and created again, then every
// node stopped without its last checkpoint (a crash of all three, the checkpoint loop
// off): each resumes from what the metadata entries checkpointed as they applied, and
// holds the new channel's records only, under the new group.
func TestRaftModeResumeRecreatedChannel(t *testing.T) {
	c := newRaftClusterWith(t, func(o *Options) { o.CheckpointInterval = -1 })
	const name = "raft.again"
	old := c.create(name)
	c.appendValues(old, name, "old", 3)
	c.sameBytes(name, 3)
	if err := c.st[c.leader(metaGroup)].Delete(name, false); err != nil {
		t.Fatal(err)
	}
	c.eventually(func() error {
		for id, s := range c.st {
			if _, err := s.Get(name); err == nil {
				return fmt.Errorf("node %d still has %s", id, name)
			}
		}
		return nil
	})
	group := c.create(name)
	if group == old {
		t.Fatal("the re-created channel has the deleted one's group")
	}
	c.appendValues(group, name, "new", 2)
	raw := c.sameBytes(name, 2)
	for id := range c.dirs {
		c.st[id].raft.skipCloseCheckpoint = true
		c.stop(id)
	}
	for id := range c.dirs {
		c.start(id)
	}
	if got := c.sameBytes(name, 2); !bytes.Equal(got, raw) {
		t.Fatal("the re-created channel's bytes changed across the restart")
	}
	for id, s := range c.st {
		l, _ := s.Get(name)
		if l.wal.group != group {
			t.Fatalf("node %d: group %d, want %d", id, l.wal.group, group)
		}
		recs, _, err := l.ReadRecords(0, 10, 1<<20)
		if err != nil || len(recs) != 2 || string(recs[0].Value) != "new0" || string(recs[1].Value) != "new1" {
			t.Fatalf("node %d: %d records, %v", id, len(recs), err)
		}
		if a := s.raft.node.Stats().Applies; a != 2 {
			t.Fatalf("node %d applied %d entries again, want the 2 appends above the channel's (absent) checkpoint", id, a)
		}
	}
}
