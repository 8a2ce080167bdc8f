package queue

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
)

// Delivery state lives in one bbolt file, <data-dir>/queues.db:
//
//	queues/<name>                 JSON queueMeta (config, bindings, detached, incarnation)
//	state/<name>/incarnation      8 bytes: the incarnation of the queue this state is of
//	state/<name>/floor            8 bytes: every queue offset below it is acked
//	state/<name>/delivered        8 bytes: every unacked queue offset below it was
//	                              delivered at least once (attempts, when it has no
//	                              record of its own, is 1)
//	state/<name>/acked/<off>      8 bytes: end of a span [off, end) of acked offsets
//	                              above the floor (spans.go)
//	state/<name>/attempts/<off>   12 bytes: deliveries so far of an unacked message and
//	                              the time (ms) before which it is not redelivered,
//	                              for messages the delivered mark does not cover: a
//	                              redelivery, a backoff, a first delivery out of
//	                              offset order (ordering keys)
//	state/<name>/cursors/<source> 16 bytes: binding checkpoint (next source sequence,
//	                              queue offset from which to rescan the queue log)
//	snapshots/<name>              JSON snapshot (queue, created, ack state)
//
// Offsets are 8-byte big-endian, so keys sort by offset.
var (
	bktQueues    = []byte("queues")
	bktState     = []byte("state")
	bktSnapshots = []byte("snapshots")
	bktAcked     = []byte("acked")
	bktAttempts  = []byte("attempts")
	bktCursors   = []byte("cursors")
	keyFloor     = []byte("floor")
	keyDelivered = []byte("delivered")
	keyInc       = []byte("incarnation")
)

// stateDB wraps the bbolt file with a group committer: writers enqueue a function
// and wait; one goroutine runs every function queued so far in one read-write
// transaction (one fsync for all of them) and wakes their waiters, or, when each of
// them has a journal record, appends the records to the state journal (journal.go:
// one fdatasync) and applies them to the bbolt file with a later transaction.
// Functions run in enqueue order, so callers that enqueue under their own lock get
// their changes applied in that lock's order.
type stateDB struct {
	b              *bolt.DB
	j              *journal
	commits        prometheus.Counter
	journalCommits prometheus.Counter

	// Owned by the committer goroutine: the journaled changes not yet in the bbolt
	// file (their records' bytes, when the first was appended), and the error that
	// stopped every commit (a journaled change the bbolt file refused).
	pending      []func(*bolt.Tx) error
	pendingBytes int
	pendingSince time.Time
	failed       error
	// txID: the id of the last transaction applyPending ran in.
	txID uint64
	// hasPending: pending is not empty (read by view).
	hasPending atomic.Bool

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*dbOp
	closed  bool
	stopped chan struct{}
	// holds counts callers about to queue more ops for the commit they already
	// queued some for (hold); queuedAt is when the queue last became non-empty.
	holds    int
	queuedAt time.Time
	waking   bool // a timer will wake the committer at queuedAt + maxHold
}

// maxHold bounds how long holds delay a commit: past it ops are committed with
// holders still queueing.
const maxHold = 3 * time.Millisecond

type dbOp struct {
	fn func(tx *bolt.Tx) error
	// rec is fn's change as a journal record (nil: none, fn goes to bbolt).
	rec  []byte
	done chan struct{}
	err  error
}

// wait blocks until the op's transaction committed (or failed).
func (o *dbOp) wait() error {
	if o == nil {
		return nil
	}
	<-o.done
	return o.err
}

// openStateDB opens the state file. A damaged one is refused with ErrState naming it:
// bbolt panics on a broken page (at open, where it walks every page to rebuild the
// free list, some panics come from a goroutine of its own and cannot be recovered), so
// the file is walked read-only first (checkStateFile). bbolt keeps no page
// checksums: a flipped value inside an intact page is not detected.
func openStateDB(path string, m *Metrics) (d *stateDB, err error) {
	if err := checkStateFile(path); err != nil {
		return nil, err
	}
	var b *bolt.DB
	defer func() {
		if p := recover(); p != nil {
			if b != nil {
				_ = b.Close()
			}
			d, err = nil, damaged(path, fmt.Errorf("%v", p))
		}
	}()
	b, err = bolt.Open(path, 0o644, &bolt.Options{Timeout: 10 * time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrState, path, err)
	}
	// The journal's records verify against the last commit (epoch), so nothing may
	// commit before its replay but the creation of a new file's buckets.
	var epoch uint64
	exist := true
	err = b.View(func(tx *bolt.Tx) error {
		epoch = uint64(tx.ID())
		for _, n := range [][]byte{bktQueues, bktState, bktSnapshots} {
			exist = exist && tx.Bucket(n) != nil
		}
		return nil
	})
	if err == nil && !exist {
		err = b.Update(func(tx *bolt.Tx) error {
			for _, n := range [][]byte{bktQueues, bktState, bktSnapshots} {
				if _, err := tx.CreateBucketIfNotExists(n); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("%w: init %s: %v", ErrState, path, err)
	}
	j, err := openJournal(b, path+".journal", epoch)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	d = &stateDB{b: b, j: j, commits: m.StateCommits, journalCommits: m.StateJournalCommits, stopped: make(chan struct{})}
	d.cond = sync.NewCond(&d.mu)
	go d.run()
	return d, nil
}

func damaged(path string, cause error) error {
	return fmt.Errorf("%w: %s is damaged (%v); restore it from a backup, or move it away to start with no queue state (queue logs without state are then kept and logged)", ErrState, path, cause)
}

// checkStateFile walks every bucket and key of an existing state file, opened
// read-only (no free-list rebuild), recovering bbolt's panics on broken pages.
func checkStateFile(path string) (err error) {
	if _, serr := os.Stat(path); serr != nil {
		return nil // created by the open
	}
	b, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: 10 * time.Second, ReadOnly: true})
	if err != nil {
		return damaged(path, err)
	}
	// A page id past the file's end reads outside the mapping: a fault, turned into
	// a panic recovered below instead of a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = damaged(path, fmt.Errorf("%v", p))
		}
		_ = b.Close()
	}()
	var walk func(bk *bolt.Bucket) error
	walk = func(bk *bolt.Bucket) error {
		var prev []byte
		return bk.ForEach(func(k, v []byte) error {
			// Keys out of order would make bbolt's open panic in a goroutine of its own.
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				return fmt.Errorf("keys out of order: %x after %x", k, prev)
			}
			prev = append(prev[:0], k...)
			if v == nil {
				if sub := bk.Bucket(k); sub != nil {
					return walk(sub)
				}
			}
			return nil
		})
	}
	err = b.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, bk *bolt.Bucket) error { return walk(bk) })
	})
	if err != nil {
		return damaged(path, err)
	}
	return nil
}

// enqueue queues fn for the next commit and returns at once.
func (d *stateDB) enqueue(fn func(tx *bolt.Tx) error) *dbOp {
	return d.enqueueRec(fn, nil)
}

// enqueueRec is enqueue of a change that rec (decodeJournal) also describes, so it
// may be made durable through the journal.
func (d *stateDB) enqueueRec(fn func(tx *bolt.Tx) error, rec []byte) *dbOp {
	o := &dbOp{fn: fn, rec: rec, done: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		o.err = ErrClosed
		close(o.done)
		return o
	}
	if len(d.queue) == 0 {
		d.queuedAt = time.Now()
	}
	d.queue = append(d.queue, o)
	d.cond.Signal()
	d.mu.Unlock()
	return o
}

// hold keeps the committer from starting a commit until release is called (at most
// maxHold after the first op was queued), so that the ops a caller queues in a row,
// with work between them (a share fetch's acknowledgements of several partitions
// and then its acquisitions), share one commit, one fdatasync, instead of the first
// starting one alone and the rest waiting for it and then another. release may be
// called more than once; it must be called before waiting for an op queued.
func (d *stateDB) hold() (release func()) {
	d.mu.Lock()
	d.holds++
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			d.holds--
			d.cond.Signal()
			d.mu.Unlock()
		})
	}
}

// heldLocked reports whether holds keep the committer from committing the ops
// queued now; when they do, a timer wakes it once maxHold has passed.
func (d *stateDB) heldLocked() bool {
	if d.holds == 0 || d.closed {
		return false
	}
	left := time.Until(d.queuedAt.Add(maxHold))
	if left <= 0 {
		return false
	}
	if !d.waking {
		d.waking = true
		time.AfterFunc(left, func() {
			d.mu.Lock()
			d.waking = false
			d.cond.Signal()
			d.mu.Unlock()
		})
	}
	return true
}

// update runs fn in a committed transaction (group commit) and returns its outcome.
func (d *stateDB) update(fn func(tx *bolt.Tx) error) error { return d.enqueue(fn).wait() }

// view runs fn in a read transaction that sees every change committed so far (the
// journaled ones are applied first).
func (d *stateDB) view(fn func(tx *bolt.Tx) error) error {
	if d.hasPending.Load() {
		if err := d.update(func(*bolt.Tx) error { return nil }); err != nil {
			return err
		}
	}
	if err := d.b.View(fn); err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	return nil
}

func (d *stateDB) run() {
	defer close(d.stopped)
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && !d.closed || len(d.queue) > 0 && d.heldLocked() {
			d.cond.Wait()
		}
		ops := d.queue
		d.queue = nil
		closed := d.closed
		d.mu.Unlock()
		if len(ops) > 0 || closed && d.hasPending.Load() {
			d.commit(ops) // at close, the journaled changes go to the bbolt file
		}
		if closed && len(ops) == 0 {
			return
		}
	}
}

// commit makes ops durable: through the journal when each has a record and the
// pending records are within maxJournalBytes and maxJournalAge, else in one bbolt
// transaction (commitTx).
func (d *stateDB) commit(ops []*dbOp) {
	if d.failed == nil && len(ops) > 0 && d.journalable(ops) {
		recs := make([][]byte, len(ops))
		for i, o := range ops {
			recs[i] = o.rec
		}
		if err := d.j.append(recs); err == nil {
			if len(d.pending) == 0 {
				d.pendingSince = time.Now()
			}
			for _, o := range ops {
				d.pending = append(d.pending, o.fn)
				d.pendingBytes += journalHeader + len(o.rec)
			}
			d.hasPending.Store(true)
			d.commits.Inc()
			d.journalCommits.Inc()
			finish(ops, nil)
			return
		}
		// A failed append answers nothing: the bbolt transaction makes them durable.
	}
	d.commitTx(ops)
}

func (d *stateDB) journalable(ops []*dbOp) bool {
	if len(d.pending) > 0 && time.Since(d.pendingSince) >= maxJournalAge {
		return false
	}
	// Records of an earlier epoch that a failed emptying left would end the reading
	// before the new ones.
	if len(d.pending) == 0 && d.j.size > 0 {
		return false
	}
	n := d.pendingBytes
	for _, o := range ops {
		if o.rec == nil {
			return false
		}
		n += journalHeader + len(o.rec)
	}
	return n <= maxJournalBytes
}

// commitTx applies the pending journaled changes, then ops, in one transaction
// (the checkpoint of the journal). When the transaction fails, the pending changes
// are applied alone (their failure stops every later commit with ErrState: they were
// answered) and each op is retried alone, so one bad op does not fail the others.
func (d *stateDB) commitTx(ops []*dbOp) {
	if d.failed != nil {
		finish(ops, d.failed)
		return
	}
	err := d.b.Update(func(tx *bolt.Tx) error {
		if err := d.applyPending(tx); err != nil {
			return err
		}
		for _, o := range ops {
			if err := o.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		d.commits.Inc()
		d.checkpointed()
		finish(ops, nil)
		return
	}
	if len(d.pending) > 0 {
		if err := d.b.Update(d.applyPending); err != nil {
			d.failed = fmt.Errorf("%w: applying the state journal to queues.db: %v", ErrState, err)
			finish(ops, d.failed)
			return
		}
		d.commits.Inc()
		d.checkpointed()
		d.commitTx(ops)
		return
	}
	if len(ops) > 1 {
		for _, o := range ops {
			d.commitTx([]*dbOp{o})
		}
		return
	}
	finish(ops, fmt.Errorf("%w: %w", ErrState, err))
}

// applyPending applies the journaled changes not yet in the bbolt file and records the
// last sequence given as applied (those of a failed append too, whose changes come
// after it in the same transaction). Every bbolt transaction of the committer runs it
// (its id, once committed, is the journal's next epoch: checkpointed).
func (d *stateDB) applyPending(tx *bolt.Tx) error {
	d.txID = uint64(tx.ID())
	for _, fn := range d.pending {
		if err := fn(tx); err != nil {
			return err
		}
	}
	if d.j.seq == d.j.applied {
		return nil
	}
	return putApplied(tx, d.j.seq)
}

// checkpointed forgets the pending changes once a transaction applied them, moves the
// journal to that transaction's epoch, and empties it.
func (d *stateDB) checkpointed() {
	d.j.epoch = d.txID
	if len(d.pending) > 0 {
		clear(d.pending)
		d.pending, d.pendingBytes = d.pending[:0], 0
		d.hasPending.Store(false)
	}
	if d.j.seq != d.j.applied || d.j.size > 0 {
		d.j.applied = d.j.seq
		_ = d.j.reset() // on failure its records stay, at or below journal/applied: skipped
	}
}

func finish(ops []*dbOp, err error) {
	for _, o := range ops {
		o.err = err
		close(o.done)
	}
}

// close commits what is queued, stops the committer and closes the file.
func (d *stateDB) close() error {
	d.mu.Lock()
	d.closed = true
	d.cond.Signal()
	d.mu.Unlock()
	<-d.stopped
	jerr := d.j.f.Close()
	if err := d.b.Close(); err != nil {
		return err
	}
	return jerr
}

func offKey(off int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(off))
	return b[:]
}

func keyOff(k []byte) int64 { return int64(binary.BigEndian.Uint64(k)) }

// stateBucket returns state/<name>, or nil when the queue was deleted.
func stateBucket(tx *bolt.Tx, name string) *bolt.Bucket {
	return tx.Bucket(bktState).Bucket([]byte(name))
}

// incStateBucket returns state/<name> when it is the state of the queue incarnation
// inc, else nil: the queue was deleted, or deleted and created again under its name
// (a write still queued by the old queue, such as a dead-letter ack whose append was
// in flight during the delete, must not land in its successor's state). State
// written before incarnations were recorded has no key and is taken as matching.
func incStateBucket(tx *bolt.Tx, name string, inc uint64) *bolt.Bucket {
	b := stateBucket(tx, name)
	if b == nil {
		return nil
	}
	if v := b.Get(keyInc); v != nil && (len(v) != 8 || binary.BigEndian.Uint64(v) != inc) {
		return nil
	}
	return b
}

// createStateBucket creates state/<name> afresh with its sub-buckets.
func createStateBucket(tx *bolt.Tx, name string) (*bolt.Bucket, error) {
	root := tx.Bucket(bktState)
	if root.Bucket([]byte(name)) != nil {
		if err := root.DeleteBucket([]byte(name)); err != nil {
			return nil, err
		}
	}
	b, err := root.CreateBucket([]byte(name))
	if err != nil {
		return nil, err
	}
	for _, n := range [][]byte{bktAcked, bktAttempts, bktCursors} {
		if _, err := b.CreateBucket(n); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

// deleteBelow deletes the keys of b below off. (Keys are collected first: deleting
// under a bbolt cursor can make it skip the next key.)
func deleteBelow(b *bolt.Bucket, off int64) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && keyOff(k) < off; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// clearBucket deletes every key of b.
func clearBucket(b *bolt.Bucket) error {
	return deleteBelow(b, 1<<62)
}
