package queue

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
)

// The tests below drive the state committer directly: one queue state "q"
// (incarnation 7) whose floor each ack sets, and crash copies of queues.db and its
// journal taken at chosen points (the committer idle: what a kill -9 leaves).

const jq, jinc = "q", 7

func openJournalTestDB(t *testing.T, dir string) (*stateDB, *Metrics) {
	t.Helper()
	m := NewMetrics(nil)
	d, err := openStateDB(filepath.Join(dir, "queues.db"), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.close() })
	return d, m
}

// newJournalTestDB opens a state file in a new directory with state q at floor 0.
func newJournalTestDB(t *testing.T) (string, *stateDB, *Metrics) {
	t.Helper()
	dir := t.TempDir()
	d, m := openJournalTestDB(t, dir)
	err := d.update(func(tx *bolt.Tx) error {
		b, err := createStateBucket(tx, jq)
		if err != nil {
			return err
		}
		if err := b.Put(keyInc, offKey(jinc)); err != nil {
			return err
		}
		return b.Put(keyFloor, offKey(0))
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, d, m
}

// ackFloor commits an ack (journal record) moving q's floor to floor.
func ackFloor(t *testing.T, d *stateDB, floor int64) {
	t.Helper()
	c := &ackCommit{name: jq, inc: jinc, floor: floor, mark: -1}
	if err := d.enqueueRec(c.apply, c.encode()).wait(); err != nil {
		t.Fatal(err)
	}
}

// setFloor commits a change without a journal record (as a seek does).
func setFloor(t *testing.T, d *stateDB, floor int64) {
	t.Helper()
	err := d.update(func(tx *bolt.Tx) error { return incStateBucket(tx, jq, jinc).Put(keyFloor, offKey(floor)) })
	if err != nil {
		t.Fatal(err)
	}
}

// boltFloor reads q's floor from the bbolt file alone (no checkpoint first).
func boltFloor(t *testing.T, d *stateDB) int64 {
	t.Helper()
	var f int64
	err := d.b.View(func(tx *bolt.Tx) error {
		f = keyOff(incStateBucket(tx, jq, jinc).Get(keyFloor))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crashCopy copies dir's queues.db and, when journal is nil, its journal as they
// are, else journal as the journal, into a new directory and opens it.
func crashCopy(t *testing.T, dir string, journal []byte) (string, *stateDB) {
	t.Helper()
	to := t.TempDir()
	if journal == nil {
		journal = readFile(t, filepath.Join(dir, "queues.db.journal"))
	}
	if err := os.WriteFile(filepath.Join(to, "queues.db"), readFile(t, filepath.Join(dir, "queues.db")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, "queues.db.journal"), journal, 0o644); err != nil {
		t.Fatal(err)
	}
	d, _ := openJournalTestDB(t, to)
	return to, d
}

// TestStateJournalCrashPoints: a crash after the journal's fdatasync (before any
// checkpoint) keeps the answered acks; a crash after a checkpoint's bbolt commit but
// before the emptying of the journal reached the disk does not apply its records
// again over the newer change that checkpoint committed after them.
func TestStateJournalCrashPoints(t *testing.T) {
	dir, d, m := newJournalTestDB(t)
	journaled := testutil.ToFloat64(m.StateJournalCommits)
	ackFloor(t, d, 1)
	ackFloor(t, d, 2)
	if n := testutil.ToFloat64(m.StateJournalCommits) - journaled; n != 2 {
		t.Fatalf("%v journal commits for two acks, want 2", n)
	}
	if f := boltFloor(t, d); f != 0 {
		t.Fatalf("queues.db floor %d before a checkpoint, want 0 (the acks only journaled)", f)
	}
	_, c := crashCopy(t, dir, nil)
	if f := boltFloor(t, c); f != 2 {
		t.Fatalf("floor %d after a crash with the acks journaled, want 2", f)
	}

	stale := readFile(t, filepath.Join(dir, "queues.db.journal"))
	setFloor(t, d, 0) // the checkpoint: acks 1 and 2, then this change
	if n := len(readFile(t, filepath.Join(dir, "queues.db.journal"))); n != 0 {
		t.Fatalf("journal of %d bytes after a checkpoint, want empty", n)
	}
	_, c = crashCopy(t, dir, stale)
	if f := boltFloor(t, c); f != 0 {
		t.Fatalf("floor %d after a crash that lost the journal's emptying, want 0 (its acks came before the change to 0)", f)
	}
}

// TestStateJournalTornThenAppend: a torn last record is ignored at start and cut
// before anything is appended: an ack answered after the restart is replayed after
// a second crash, and the journal then holds only the records written since.
func TestStateJournalTornThenAppend(t *testing.T) {
	dir, d, _ := newJournalTestDB(t)
	ackFloor(t, d, 1)
	one := len(readFile(t, filepath.Join(dir, "queues.db.journal")))
	ackFloor(t, d, 2)
	j := readFile(t, filepath.Join(dir, "queues.db.journal"))
	torn := j[:one+(len(j)-one)/2] // the second record half written: never answered

	dir2, d2 := crashCopy(t, dir, torn)
	if f := boltFloor(t, d2); f != 1 {
		t.Fatalf("floor %d after the torn record, want 1", f)
	}
	ackFloor(t, d2, 5)
	if n := len(readFile(t, filepath.Join(dir2, "queues.db.journal"))); n != one {
		t.Fatalf("journal of %d bytes after one append following the torn record, want %d (the torn bytes cut)", n, one)
	}
	_, d3 := crashCopy(t, dir2, nil)
	if f := boltFloor(t, d3); f != 5 {
		t.Fatalf("floor %d after a second crash, want 5 (the ack answered after the first)", f)
	}
}

// TestStateJournalAppendFails: an append that fails (a disk full, here a descriptor
// that refuses writes) answers nothing from the journal: the acks go into a queues.db
// transaction and are answered from it, durable without the journal; the sequences
// that append used stay used, so the records appended afterwards, and after a
// restart, are replayed after a crash.
func TestStateJournalAppendFails(t *testing.T) {
	dir, d, m := newJournalTestDB(t)
	jpath := filepath.Join(dir, "queues.db.journal")
	ro, err := os.Open(jpath)
	if err != nil {
		t.Fatal(err)
	}
	rw := d.j.f
	d.j.f = ro // the committer is idle: no append runs meanwhile
	journaled := testutil.ToFloat64(m.StateJournalCommits)
	ackFloor(t, d, 3)
	d.j.f = rw
	_ = ro.Close()
	if n := testutil.ToFloat64(m.StateJournalCommits) - journaled; n != 0 {
		t.Fatalf("%v journal commits for an ack whose append failed, want 0", n)
	}
	if f := boltFloor(t, d); f != 3 {
		t.Fatalf("queues.db floor %d after an ack whose append failed, want 3", f)
	}
	_, c := crashCopy(t, dir, []byte{})
	if f := boltFloor(t, c); f != 3 {
		t.Fatalf("floor %d after a crash that lost the journal, want 3", f)
	}

	ackFloor(t, d, 4)
	_, c = crashCopy(t, dir, nil)
	if f := boltFloor(t, c); f != 4 {
		t.Fatalf("floor %d after a crash following the failed append, want 4", f)
	}

	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	d, _ = openJournalTestDB(t, dir)
	ackFloor(t, d, 6)
	_, c = crashCopy(t, dir, nil)
	if f := boltFloor(t, c); f != 6 {
		t.Fatalf("floor %d after a restart and a crash, want 6 (its sequence above the applied one)", f)
	}
}

// TestStateJournalRacingChanges: acks (journaled) race changes without a record
// (a seek's floor, a delete and create of the queue under a new incarnation) from
// several goroutines, each enqueued under one lock as Queue.mu orders them; the
// state read, a crash copy and a restart all end at the last change made, in the
// last incarnation: no journaled ack lands after a newer change, nor in the state
// of the queue created after its own was deleted.
func TestStateJournalRacingChanges(t *testing.T) {
	dir, d, m := newJournalTestDB(t)
	var (
		mu   sync.Mutex
		next int64
		inc  uint64 = jinc
	)
	step := func(g int) *dbOp {
		mu.Lock()
		defer mu.Unlock()
		next++
		v, cur := next, inc
		switch {
		case v%17 == 0:
			inc++
			cur = inc
			return d.enqueue(func(tx *bolt.Tx) error {
				b, err := createStateBucket(tx, jq)
				if err != nil {
					return err
				}
				if err := b.Put(keyInc, offKey(int64(cur))); err != nil {
					return err
				}
				return b.Put(keyFloor, offKey(v))
			})
		case (v+int64(g))%5 == 0:
			return d.enqueue(func(tx *bolt.Tx) error { return incStateBucket(tx, jq, cur).Put(keyFloor, offKey(v)) })
		}
		c := &ackCommit{name: jq, inc: cur, floor: v, mark: -1}
		return d.enqueueRec(c.apply, c.encode())
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				if err := step(g).wait(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if testutil.ToFloat64(m.StateJournalCommits) == 0 {
		t.Fatal("no ack went through the journal")
	}
	floorOf := func(d *stateDB, view func(func(*bolt.Tx) error) error) (int64, bool) {
		t.Helper()
		var f int64
		ok := false
		err := view(func(tx *bolt.Tx) error {
			if b := incStateBucket(tx, jq, inc); b != nil {
				f, ok = keyOff(b.Get(keyFloor)), true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return f, ok
	}
	_, c := crashCopy(t, dir, nil)
	if f, ok := floorOf(c, c.b.View); !ok || f != next {
		t.Fatalf("after a crash: floor %d (incarnation %d found: %v), want %d", f, inc, ok, next)
	}
	if f, ok := floorOf(d, d.view); !ok || f != next {
		t.Fatalf("floor %d (incarnation %d found: %v), want %d", f, inc, ok, next)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	d, _ = openJournalTestDB(t, dir)
	if f, ok := floorOf(d, d.b.View); !ok || f != next {
		t.Fatalf("after a restart: floor %d (incarnation %d found: %v), want %d", f, inc, ok, next)
	}
}

// TestStateJournalStaleAfterReplay: the bytes after a torn record (here a whole
// record of the same unanswered append, written out of order) are cut at start,
// but a crash may lose that cut: the records appended after the restart then lie
// over the old file, and an old record right after them whose sequence is above
// theirs (sequences restart from the last applied one) would be applied over the
// newer state. Records verify only against the queues.db commit they followed.
func TestStateJournalStaleAfterReplay(t *testing.T) {
	dir, d, _ := newJournalTestDB(t)
	jpath := filepath.Join(dir, "queues.db.journal")
	ackFloor(t, d, 1)
	r1 := len(readFile(t, jpath))
	ackFloor(t, d, 2)
	ackFloor(t, d, 9)
	old := readFile(t, jpath)
	r3 := r1 + (len(old)-r1)/2 // the records have one length: the third starts here
	old[r3-1] ^= 0xff          // the second torn; the third on disk, never answered

	dir2, d2 := crashCopy(t, dir, old)
	if f := boltFloor(t, d2); f != 1 {
		t.Fatalf("floor %d after the torn record, want 1", f)
	}
	setFloor(t, d2, 0) // a seek back
	// An ack whose record ends where the old third one starts (padded with a
	// delivery record above the floor).
	for pad := 0; ; pad++ {
		c := &ackCommit{name: jq, inc: jinc, floor: 0, mark: -1, countOffs: []int64{100}, countVals: [][]byte{make([]byte, pad)}}
		if n := journalHeader + len(c.encode()); n < r3 {
			continue
		} else if n > r3 {
			t.Fatalf("no padding makes a record of %d bytes", r3)
		}
		if err := d2.enqueueRec(c.apply, c.encode()).wait(); err != nil {
			t.Fatal(err)
		}
		break
	}
	j2 := readFile(t, filepath.Join(dir2, "queues.db.journal"))
	if len(j2) != r3 {
		t.Fatalf("journal of %d bytes, want %d", len(j2), r3)
	}
	_, d3 := crashCopy(t, dir2, append(j2, old[r3:]...)) // the cut at start lost
	if f := boltFloor(t, d3); f != 0 {
		t.Fatalf("floor %d after the second crash, want 0 (the seek, then the ack to 0; 9 is the unanswered ack of the first run)", f)
	}
}

// TestStateJournalOtherWriter: records appended after the last commit of queues.db
// are not applied to a queues.db that was committed again since (written by a
// binary without the journal, or restored): they would land over changes made
// after them. The restart succeeds with queues.db as it is.
func TestStateJournalOtherWriter(t *testing.T) {
	dir, d, _ := newJournalTestDB(t)
	ackFloor(t, d, 5)
	to := t.TempDir()
	for _, f := range []string{"queues.db", "queues.db.journal"} {
		if err := os.WriteFile(filepath.Join(to, f), readFile(t, filepath.Join(dir, f)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := bolt.Open(filepath.Join(to, "queues.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error { return incStateBucket(tx, jq, jinc).Put(keyFloor, offKey(2)) })
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := openJournalTestDB(t, to)
	if f := boltFloor(t, d2); f != 2 {
		t.Fatalf("floor %d, want 2 (the other writer's change; the journal's ack to 5 came before it)", f)
	}
}

// TestStateJournalResetFails: a checkpoint whose emptying of the journal fails
// (here a descriptor that refuses it) leaves records of the epoch before it; acks
// then go to queues.db transactions, not behind them, where the reading would stop,
// until an emptying succeeds.
func TestStateJournalResetFails(t *testing.T) {
	dir, d, m := newJournalTestDB(t)
	jpath := filepath.Join(dir, "queues.db.journal")
	ackFloor(t, d, 1)
	ro, err := os.Open(jpath)
	if err != nil {
		t.Fatal(err)
	}
	rw := d.j.f
	d.j.f = ro // the committer is idle: no append runs meanwhile
	setFloor(t, d, 2)
	d.j.f = rw
	_ = ro.Close()
	if n := len(readFile(t, jpath)); n == 0 {
		t.Fatal("journal emptied through a descriptor that refuses it")
	}
	journaled := testutil.ToFloat64(m.StateJournalCommits)
	ackFloor(t, d, 3)
	if n := testutil.ToFloat64(m.StateJournalCommits) - journaled; n != 0 {
		t.Fatalf("%v journal commits behind the records left, want 0", n)
	}
	_, c := crashCopy(t, dir, nil)
	if f := boltFloor(t, c); f != 3 {
		t.Fatalf("floor %d after a crash, want 3", f)
	}
	ackFloor(t, d, 4) // the last commit emptied the journal: through it again
	if n := testutil.ToFloat64(m.StateJournalCommits) - journaled; n != 1 {
		t.Fatalf("%v journal commits once the journal was emptied, want 1", n)
	}
	_, c = crashCopy(t, dir, nil)
	if f := boltFloor(t, c); f != 4 {
		t.Fatalf("floor %d after a crash, want 4", f)
	}
}

// TestStateJournalBytesBound: the bytes maxJournalBytes bounds are those of the
// journal file, each record's header with its payload (the pending count equals the
// file's size), so the file never grows past it.
func TestStateJournalBytesBound(t *testing.T) {
	dir, d, _ := newJournalTestDB(t)
	for f := range int64(5) {
		ackFloor(t, d, f)
		fi, err := os.Stat(filepath.Join(dir, "queues.db.journal"))
		if err != nil {
			t.Fatal(err)
		}
		if int64(d.pendingBytes) != fi.Size() { // the committer is idle
			t.Fatalf("%d pending bytes counted against the bound for a journal of %d", d.pendingBytes, fi.Size())
		}
	}
}
