package raftnode

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestKeepFrom: a group keeps its last KeepEntries applied entries, and of those no
// more than KeepBytes of data; entries not yet applied are always kept; an applied
// index past the MemoryStorage's last entry (a leader applies before its own WAL
// write is durable) is weighed up to that entry, without raft's out-of-bound panic.
func TestKeepFrom(t *testing.T) {
	ms := raft.NewMemoryStorage()
	var ents []raftpb.Entry
	for i := uint64(1); i <= 20; i++ {
		ents = append(ents, raftpb.Entry{Index: i, Term: 1, Data: bytes.Repeat([]byte{'d'}, 100)})
	}
	if err := ms.Append(ents); err != nil {
		t.Fatal(err)
	}
	g := &group{ms: ms}
	for _, c := range []struct {
		applied, keepEntries, keepBytes, want uint64
	}{
		{20, 10, 1 << 20, 10}, // the entry count binds
		{20, 10, 350, 17},     // the bytes bind: 18..20 are 300 bytes
		{15, 10, 350, 12},     // 16..20 are not applied: kept whatever their size
		{5, 10, 1 << 20, 0},   // nothing beyond the window
		{5, 10, 150, 4},       // only 5 fits in 150 bytes
		{25, 10, 350, 17},     // applied past the storage (a leader ahead of its WAL): weighed up to 20
	} {
		g.applied.Store(c.applied)
		n := &Node{cfg: Config{KeepEntries: c.keepEntries, KeepBytes: c.keepBytes}}
		if got := n.keepFrom(g); got != c.want {
			t.Fatalf("applied %d, keep %d entries / %d bytes: compact to %d, want %d", c.applied, c.keepEntries, c.keepBytes, got, c.want)
		}
	}
}
