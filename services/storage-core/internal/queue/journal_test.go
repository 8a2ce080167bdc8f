package queue

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
)

// journalPath is e's state journal.
func journalPath(e *env) string { return filepath.Join(e.dir, "store", "queues.db.journal") }

// TestStateJournalAcks: a share partition's acknowledgements are one journal append
// each (one fdatasync, no queues.db transaction), durable when answered: a crash
// copy taken while they are only in the journal opens with them applied (the
// accepted records never come back, the start offset past them) and its journal
// emptied; the delivery counts written with them hold too.
func TestStateJournalAcks(t *testing.T) {
	e := newEnv(t)
	publish(t, e.log("kafka.t"), "0", "1", "2", "3", "4", "5")
	q := earliestSharePartition(t, e)
	shareFetch(t, e, "m", 6, q)
	m := e.m.opts.Metrics
	commits, journaled := testutil.ToFloat64(m.StateCommits), testutil.ToFloat64(m.StateJournalCommits)
	for _, b := range []ShareAckBatch{{First: 0, Last: 1, Types: []uint8{ShareAccept}}, {First: 2, Last: 2, Types: []uint8{ShareReject}}} {
		if err := q.ShareAck("m", []ShareAckBatch{b}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if c, j := testutil.ToFloat64(m.StateCommits)-commits, testutil.ToFloat64(m.StateJournalCommits)-journaled; c != 2 || j != 2 {
		t.Fatalf("%v state commits, %v through the journal, for two acknowledgements; want 2 and 2", c, j)
	}
	if fi, err := os.Stat(journalPath(e)); err != nil || fi.Size() == 0 {
		t.Fatalf("journal after the acknowledgements: %v %v", fi, err)
	}

	crashed, cq := crashCopyShare(t, e)
	if so, lag, err := cq.ShareState(); err != nil || so != 3 || lag != 3 {
		t.Fatalf("after the crash: start offset %d lag %d %v, want 3 and 3", so, lag, err)
	}
	if got := shareOffsets(shareFetch(t, crashed, "m", 3, cq)); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("after the crash acquired %v, want 3 4 5", got)
	}
	if fi, err := os.Stat(journalPath(crashed)); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after the replay: %v %v, want empty", fi, err)
	}
}

// TestStateJournalCheckpoint: a change without a journal record (here a RELEASE's
// delivery counts) and a view apply the journaled acknowledgements to queues.db
// first and empty the journal; a journal left as it was before such a checkpoint
// (its truncation lost in a crash) is not applied again over the later state, which
// would move the start offset back; a torn record after its last whole one is
// ignored.
func TestStateJournalCheckpoint(t *testing.T) {
	e := newEnv(t)
	publish(t, e.log("kafka.t"), "0", "1", "2", "3", "4", "5")
	q := earliestSharePartition(t, e)
	shareFetch(t, e, "m", 6, q)
	ack := func(first, last int64, typ uint8) {
		t.Helper()
		if err := q.ShareAck("m", []ShareAckBatch{{First: first, Last: last, Types: []uint8{typ}}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	journalSize := func() int64 {
		t.Helper()
		fi, err := os.Stat(journalPath(e))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	ack(0, 0, ShareAccept)
	stale, err := os.ReadFile(journalPath(e))
	if err != nil || len(stale) <= journalHeader {
		t.Fatalf("journal: %d bytes, %v", len(stale), err)
	}
	ack(1, 1, ShareRelease)
	if n := journalSize(); n != 0 {
		t.Fatalf("journal of %d bytes after a change without a record, want empty", n)
	}
	if rs := shareFetch(t, e, "m", 1, q); rs[0].Record.Offset != 1 || rs[0].DeliveryCount != 2 {
		t.Fatalf("released offset %d redelivered at count %d", rs[0].Record.Offset, rs[0].DeliveryCount)
	}
	ack(1, 3, ShareAccept)
	if n := journalSize(); n == 0 {
		t.Fatal("journal empty after an accept")
	}
	if err := e.m.db.view(func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := journalSize(); n != 0 {
		t.Fatalf("journal of %d bytes after a view, want empty", n)
	}
	// The crash: the first journal back, and the start of a record torn after it.
	torn := slices.Clone(stale[:len(stale)-1])
	binary.BigEndian.PutUint64(torn[8:], binary.BigEndian.Uint64(stale[8:])+1)
	if err := os.WriteFile(journalPath(e), append(slices.Clone(stale), torn...), 0o644); err != nil {
		t.Fatal(err)
	}
	crashed, cq := crashCopyShare(t, e)
	if so, lag, err := cq.ShareState(); err != nil || so != 4 || lag != 2 {
		t.Fatalf("after the crash: start offset %d lag %d %v, want 4 and 2", so, lag, err)
	}
	if got := shareOffsets(shareFetch(t, crashed, "m", 2, cq)); !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("after the crash acquired %v, want 4 5", got)
	}
}
