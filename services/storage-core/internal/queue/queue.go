package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// Internal headers of queue records: the source log and sequence a binding copied the
// record from. They are stripped from delivered records (ReceivedMessage carries them
// as fields) and from dead-lettered copies; a native Read of the queue's log shows them.
const (
	HeaderSource    = "_tributary_source"
	HeaderSourceSeq = "_tributary_source_seq"

	internalHeaderPrefix = "_tributary_source"
)

// Message states (msg.state).
const (
	stAvailable     uint8 = iota // may be leased once notBefore has passed
	stLeased                     // leased until deadline under lease
	stDeadLettering              // being appended to the dead-letter log
	stAcked                      // acked; dropped from the window by compactLocked
)

// msg is one unacked message of the in-memory window.
type msg struct {
	off       int64
	rec       store.Record // internal headers stripped
	source    string
	srcSeq    int64
	key       string // ordering key ("" = none)
	size      int64
	state     uint8
	attempts  int32 // deliveries so far (durable at each Receive; a share partition's: shareCounts)
	notBefore int64 // ms; retry backoff
	// keyed: the state file holds an attempts record of this message, to be deleted
	// with its ack (a first delivery in order is covered by the delivered mark).
	keyed    bool
	deadline int64 // ms; lease end while stLeased
	lease    uint64
	// owner is the share-group member holding the lease (share partitions only,
	// share.go); meaningful while stLeased.
	owner string
	// countDirty: q.shareCounts holds m (share partitions only).
	countDirty bool
}

// Delivery is one leased message handed out by Receive.
type Delivery struct {
	AckID     string
	Record    store.Record
	Source    string
	SourceSeq int64
	Attempt   int32
}

// AckResult is the outcome of one ack id (numerically storagev1.AckResult).
type AckResult int32

// Ack results.
const (
	AckOK      AckResult = 0
	AckInvalid AckResult = 1
	AckExpired AckResult = 2
)

// queueMeta is a queue's durable description (bucket "queues").
type queueMeta struct {
	Name        string    `json:"name"`
	Config      Config    `json:"config"`
	Bindings    []Binding `json:"bindings,omitempty"`
	Detached    bool      `json:"detached,omitempty"`
	CreatedMs   int64     `json:"created_ms"`
	Incarnation uint64    `json:"incarnation"`
	// Share: a Kafka share partition reading its partition log in place (share.go);
	// it has no log and no bindings of its own.
	Share *shareMeta `json:"share,omitempty"`
}

// Queue is one queue channel: its log (records appended by its bindings) plus
// delivery state. The window holds the unacked messages from the ack floor on, up to
// Options.MaxLoaded of them, decoded; later ones are loaded as earlier ones are acked.
//
// Lock order (LOCKS.md): Queue.fillMu -> Queue.mu; Queue.mu is never held across log
// I/O or a state commit wait (commits are enqueued under it, so they apply in order,
// and waited for after it is released).
type Queue struct {
	m    *Manager
	name string
	inc  uint64 // meta.Incarnation (immutable; read without mu)
	// log is the queue's own log; for a share partition (share, immutable) the Kafka
	// partition log it reads in place, whose offsets are the window's.
	log   *store.Log
	share *shareMeta
	// shareCommitted: a share partition loads at isolation read_committed
	// (share.isolation.level; SetShareIsolation).
	shareCommitted atomic.Bool

	fillMu sync.Mutex
	stage  fillStage // under fillMu

	mu       sync.Mutex
	meta     queueMeta
	bindings []*binding
	pending  []*msg // unacked messages by offset, from the ack floor
	// pendingBytes is the sum of the pending messages' sizes.
	pendingBytes int64
	loadPos      int64 // next queue offset to load into pending
	// ackedAhead holds acked offsets at or after loadPos (from the state file at open
	// or a snapshot), as spans; loading skips them.
	ackedAhead spans
	// attempts holds the delivery counts and backoffs of messages not loaded yet (from
	// the state file).
	attempts map[int64]delivered
	// deliveredMark: every unacked message below it was delivered at least once
	// (durable as state/<name>/delivered), so a first delivery in offset order needs
	// no attempts record of its own.
	deliveredMark int64
	// tombs counts the acked messages still in pending (compactLocked).
	tombs int
	// lanes, laneMsgs: the window's unacked messages with an ordering key. Invariant:
	// lanes[k] is the number of messages of pending with key k not in state stAcked
	// (every other state holds k's lane: leaseLocked), no entry is zero, and laneMsgs
	// is the sum of the counts; an unordered queue's messages have no key, so both
	// are empty. Only a key's first unacked message can be delivered: the others
	// (blockedLocked: laneMsgs - len(lanes)) wait for its ack and do not count
	// against MaxUnleased, else one key's backlog would fill the window and hold
	// every other key's messages out of it. Kept where a message enters pending
	// (fillLocked), stops being unacked (ackLocked: ack, dead-letter, retention), the
	// window is rebuilt (resetLocked: purge, seek, detach) or the keys change
	// (UpdateConfig); nothing else adds a message to pending, un-acks one or drops an
	// unacked one (compactLocked drops acked ones only).
	lanes    map[string]int32
	laneMsgs int
	// dirty lists messages whose backoff changed (nack, expiry) and is not enqueued
	// for the state file yet (flushDirtyLocked).
	dirty []*msg
	// shareCounts lists a share partition's messages acquired since its last state
	// write, whose delivery counts are not enqueued for the state file yet, and
	// shareMarkDirty says the delivered mark moved since: as in Kafka's
	// SharePartition.acquire, an acquisition changes memory only, and its counts go
	// with the partition's next state write (shareCountsLocked: an acknowledgement,
	// a release, a lock's expiry, an archive, Close). After a crash the records
	// acquired since are delivered again with the counts last written.
	shareCounts    []*msg
	shareMarkDirty bool
	gen            uint64 // bumped when the window is rebuilt (purge, seek, detach)
	leased         int
	leaseSeq       uint64
	// busyTo, busyMin: every pending message below offset busyTo is leased until
	// busyMin or later, acked or being dead-lettered, so while busyMin is in the
	// future a Receive has nothing to do there and starts its scan at busyTo (the
	// leases a client holds, often thousands, sit at the window's front). A lease
	// ending there (expiry, nack, a failed dead-letter) lowers busyTo, a deadline
	// moved earlier lowers busyMin; leaseLocked recomputes both.
	busyTo  int64
	busyMin int64
	deleted bool
	notify  chan struct{}

	pumpStop chan struct{}
	pumps    sync.WaitGroup
}

// Name is the queue's channel name.
func (q *Queue) Name() string { return q.name }

func (q *Queue) wakeLocked() {
	close(q.notify)
	q.notify = make(chan struct{})
}

// usableLocked is the error delivery verbs answer for a deleted or detached queue.
func (q *Queue) usableLocked() error {
	if q.deleted {
		return fmt.Errorf("%w: %s", ErrNotFound, q.name)
	}
	if q.meta.Detached {
		return fmt.Errorf("%w: %s", ErrDetached, q.name)
	}
	return nil
}

// find returns the pending message at off, or nil.
func (q *Queue) find(off int64) *msg {
	p := q.pending
	if len(p) == 0 || off < p[0].off {
		return nil
	}
	// Offsets grow by at least one along pending, so off is at index off-p[0].off or
	// before it: exactly there while no acked message between was compacted away
	// (compactLocked drops them only once they are half the window), which spares
	// an ack the binary search's cache misses.
	hi := len(p)
	if d := off - p[0].off; d < int64(hi) {
		if p[d].off == off {
			return p[d]
		}
		hi = int(d)
	}
	i := sort.Search(hi, func(i int) bool { return p[i].off >= off })
	if i < hi && p[i].off == off {
		return p[i]
	}
	return nil
}

// floorLocked is the ack floor: every offset below it is acked.
func (q *Queue) floorLocked() int64 {
	if len(q.pending) > 0 {
		return q.pending[0].off
	}
	return q.loadPos
}

// newMsg builds a window entry from a queue record, splitting off the internal
// headers. Caller holds Queue.mu, or is opening the queue.
func (q *Queue) newMsg(r store.Record) *msg {
	m := &msg{off: r.Offset}
	if q.share != nil {
		// The partition log's own record: no internal headers to split off, and a
		// producer's headers are kept whatever their names.
		m.source, m.srcSeq = q.share.Source, channel.OffsetToSequence(r.Offset)
		m.rec = copyRecord(r)
		m.size = recordSize(m.rec)
		return m
	}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSource:
			m.source = q.sourceName(h.Value)
		case HeaderSourceSeq:
			m.srcSeq, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	m.rec = ownRecord(r)
	m.key = orderingKey(q.meta.Config.OrderingKeyHeader, m.rec.Headers)
	m.size = recordSize(m.rec)
	return m
}

// recordSize is the bytes of r's key, value and headers.
func recordSize(r store.Record) int64 {
	n := int64(len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return n
}

// sourceName returns the source log name v as a string: the binding's own when a
// binding of the queue has that source (each of its records names it), so loading a
// message does not allocate one.
func (q *Queue) sourceName(v []byte) string {
	for _, b := range q.bindings {
		if b.source == string(v) {
			return b.source
		}
	}
	return string(v)
}

func isInternalHeader(key string) bool { return key == HeaderSource || key == HeaderSourceSeq }

// ownRecord returns r without its internal headers, its key, value and header values
// copied into one allocation of their own: decoded records point into the read
// buffer, which holds many more records and is reused (fillStage), and the window
// keeps messages for long. Header keys are immutable strings, shared. One allocation
// per message, not one per read shared by its messages: such a slab would stay whole
// while any one of them is unacked, so a few slow messages could hold far more
// memory than MaxLoadedBytes counts.
func ownRecord(r store.Record) store.Record { return ownRecordKeep(r, isInternalHeader) }

// copyRecord is ownRecord keeping every header.
func copyRecord(r store.Record) store.Record {
	return ownRecordKeep(r, func(string) bool { return false })
}

// ownRecordKeep is ownRecord dropping the headers whose key drop reports.
func ownRecordKeep(r store.Record, drop func(key string) bool) store.Record {
	n, nh := len(r.Key)+len(r.Value), 0
	for _, h := range r.Headers {
		if !drop(h.Key) {
			n += len(h.Value)
			nh++
		}
	}
	buf := make([]byte, 0, n)
	own := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		buf = append(buf, b...)
		return buf[len(buf)-len(b) : len(buf) : len(buf)]
	}
	r.Key, r.Value = own(r.Key), own(r.Value)
	if nh > 0 {
		hs := make([]store.Header, 0, nh)
		for _, h := range r.Headers {
			if !drop(h.Key) {
				hs = append(hs, store.Header{Key: h.Key, Value: own(h.Value)})
			}
		}
		r.Headers = hs
	} else {
		r.Headers = nil
	}
	return r
}

func orderingKey(header string, hs []store.Header) string {
	if header == "" {
		return ""
	}
	for _, h := range hs {
		if h.Key == header {
			return string(h.Value)
		}
	}
	return ""
}

// laneAddLocked counts an unacked message of key entering the window (lanes).
func (q *Queue) laneAddLocked(key string) {
	if key == "" {
		return
	}
	if q.lanes == nil {
		q.lanes = map[string]int32{}
	}
	q.lanes[key]++
	q.laneMsgs++
}

// laneDropLocked uncounts a message of key that is acked (lanes).
func (q *Queue) laneDropLocked(key string) {
	if key == "" {
		return
	}
	if n := q.lanes[key]; n > 1 {
		q.lanes[key] = n - 1
	} else {
		delete(q.lanes, key)
	}
	q.laneMsgs--
}

// recountLanesLocked rebuilds lanes from pending (after the keys changed).
func (q *Queue) recountLanesLocked() {
	q.lanes, q.laneMsgs = nil, 0
	for _, m := range q.pending {
		if m.state != stAcked {
			q.laneAddLocked(m.key)
		}
	}
}

// blockedLocked is the number of messages of the window waiting behind an earlier
// unacked message of their ordering key (lanes).
func (q *Queue) blockedLocked() int { return q.laneMsgs - len(q.lanes) }

// fill loads records of the queue log past loadPos into the window while it has room.
// The reads run without Queue.mu; a rebuild of the window meanwhile (gen) discards
// them. Bindings call it after each copy and wait their turn (so what they copied is
// loaded); a Receive does not wait when another fill runs (tryFill): that one loads
// and wakes it.
func (q *Queue) fill() {
	q.fillMu.Lock()
	defer q.fillMu.Unlock()
	q.fillLocked()
}

func (q *Queue) tryFill() {
	if q.fillMu.TryLock() {
		defer q.fillMu.Unlock()
		q.fillLocked()
	}
}

func (q *Queue) fillLocked() {
	st := &q.stage
	for {
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			st.drop()
			return
		}
		pos, gen := q.loadPos, q.gen
		room, roomBytes := q.roomLocked()
		q.mu.Unlock()
		if room <= 0 || roomBytes <= 0 {
			return
		}
		if start := q.log.LogStart(); pos < start {
			pos = start // below the log start: gone with retention
		}
		committed := q.share != nil && q.shareCommitted.Load()
		if !st.holds(pos, gen, committed) {
			st.drop()
			if pos >= q.loadEnd(committed) {
				q.mu.Lock()
				if q.gen == gen && q.loadPos < pos {
					q.loadPos = pos
				}
				q.mu.Unlock()
				return
			}
			if err := st.read(q.log, pos, gen, q.share != nil, committed); err != nil {
				if !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrOutOfRange) {
					q.m.log.Warn("queue log read failed", zap.String("queue", q.name), zap.Int64("offset", pos), zap.Error(err))
				}
				return
			}
			if len(st.recs) == 0 && st.next <= pos {
				return
			}
		}
		recs, next := st.take(room, roomBytes)
		q.mu.Lock()
		if q.gen != gen || q.deleted {
			q.mu.Unlock()
			st.drop()
			return
		}
		q.loadLocked(recs, next)
		q.mu.Unlock()
		if len(st.recs) == 0 {
			st.drop() // every record read is owned by the window now: the buffer is free
		}
	}
}

// loadEnd is the queue log offset fill loads up to: the high watermark, or for a
// share partition at read_committed its partition's last stable offset.
func (q *Queue) loadEnd(committed bool) int64 {
	if committed {
		return q.log.LastStable()
	}
	return q.log.HighWatermark()
}

// roomLocked is how many more messages, and bytes, the window may load.
func (q *Queue) roomLocked() (room int, roomBytes int64) {
	loaded := len(q.pending) - q.tombs
	// Blocked messages count against MaxLoaded and MaxLoadedBytes only (lanes). A
	// blocked message is never leased, but for leases taken before the ordering
	// key header changed (UpdateConfig), hence the max.
	unleased := max(loaded-q.leased-q.blockedLocked(), 0)
	room = min(q.m.opts.MaxLoaded-loaded, q.m.opts.MaxUnleased-unleased)
	roomBytes = q.m.opts.MaxLoadedBytes - q.pendingBytes
	if len(q.pending) == q.tombs {
		roomBytes = max(roomBytes, 1)
	}
	return room, roomBytes
}

// loadLocked adds recs, the queue log's records from loadPos on, to the window (the
// acked ones among them skipped) and moves loadPos to next, waking receivers.
func (q *Queue) loadLocked(recs []store.Record, next int64) {
	for _, r := range recs {
		if q.ackedAhead.dropBelow(r.Offset); len(q.ackedAhead) > 0 && q.ackedAhead[0].From <= r.Offset {
			continue
		}
		m := q.newMsg(r)
		if d, ok := q.attempts[r.Offset]; ok {
			m.attempts, m.notBefore, m.keyed = d.attempts, d.notBefore, true
			delete(q.attempts, r.Offset)
		} else if r.Offset < q.deliveredMark {
			m.attempts = 1
		}
		q.pending = append(q.pending, m)
		q.pendingBytes += m.size
		q.laneAddLocked(m.key)
	}
	q.loadPos = next
	q.wakeLocked()
}

// loadAppended loads records a binding just appended to the queue log (recs, as
// decoding them from the log would give them, from offset recs[0].Offset on) into the
// window without reading them back, when the window goes on exactly there and has room;
// what does not fit stays for fill to read, as any record. Reading back what was just
// written took about a fifth of storage-core's CPU while a binding was copying (the
// read, its checksum and the decode), and a turn of each copy loop.
func (q *Queue) loadAppended(recs []store.Record) {
	if len(recs) == 0 {
		return
	}
	base := recs[0].Offset
	q.fillMu.Lock()
	defer q.fillMu.Unlock()
	if base < q.log.LogStart() {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted || q.loadPos != base || q.stage.holds(base, q.gen, false) {
		return
	}
	room, roomBytes := q.roomLocked()
	k, size := 0, int64(0)
	for k < len(recs) && k < room && size < roomBytes {
		r := &recs[k]
		size += int64(len(r.Key) + len(r.Value))
		for _, h := range r.Headers {
			size += int64(len(h.Key) + len(h.Value))
		}
		k++
	}
	if k == 0 {
		return
	}
	q.loadLocked(recs[:k], base+int64(k))
	q.m.opts.Metrics.CopyLoaded.Add(float64(k))
}

// fillReadBytes bounds one read of the queue log by fill; a larger frame is read
// whole. fillBufBytes is the size of a fresh read buffer: a binding copies about 1 MiB
// of records per frame, so its frames are a little over fillReadBytes.
const (
	fillReadBytes = 1 << 20
	fillBufBytes  = fillReadBytes + fillReadBytes/4
)

// fillBufs holds fill read buffers (*[]byte) between reads, for all queues: a queue
// keeps one only while it stages records, so idle queues hold none.
var fillBufs sync.Pool

// fillStage holds records of the queue log that fill read but did not load yet. A read
// decodes whole frames (a binding's copy is one frame of about 1 MiB), while the
// window often has room for a few of their records only (each Receive frees a few
// dozen places); without the stage each fill would read, check and decode a whole
// frame again for them. The staged records alias the read buffer, and the window's
// messages are copies (ownRecord), so the buffer is reused once every staged record
// is loaded. A queue holds at most one read this way (fillReadBytes, or one larger
// frame) beside its window's MaxLoadedBytes, and only while the window is full with
// records left in the read. Only fill uses it (under Queue.fillMu).
type fillStage struct {
	recs []store.Record // read, not loaded yet, by offset
	next int64          // queue offset after the read
	gen  uint64         // Queue.gen of the read: a rebuilt window discards it
	// committed: read at read_committed (a share partition's level at the read).
	committed bool
	buf       *[]byte // read buffer the records alias, from fillBufs
}

// holds reports whether the stage continues the window at offset pos of generation
// gen, read at isolation committed.
func (s *fillStage) holds(pos int64, gen uint64, committed bool) bool {
	return len(s.recs) > 0 && s.gen == gen && s.recs[0].Offset == pos && s.committed == committed
}

// read replaces the stage with the records of a read at pos: of a queue's own log,
// or with data (a share partition's partition log) its data records only, at
// isolation committed (store.Log.ReadDataRecords).
func (s *fillStage) read(l *store.Log, pos int64, gen uint64, data, committed bool) error {
	s.drop()
	bp, _ := fillBufs.Get().(*[]byte)
	alloc := func(n int) []byte {
		if bp == nil || cap(*bp) < n {
			b := make([]byte, max(n, fillBufBytes))
			bp = &b
		}
		return (*bp)[:n]
	}
	var recs []store.Record
	var next int64
	var err error
	if data {
		recs, next, err = l.ReadDataRecords(pos, fillReadBytes, committed, alloc)
	} else {
		recs, next, err = l.ReadBatchRecords(pos, fillReadBytes, alloc)
	}
	s.buf = bp
	if err != nil {
		s.drop()
		return err
	}
	s.recs, s.next, s.gen, s.committed = recs, next, gen, committed
	return nil
}

// take removes and returns the first records of the stage that fit in room messages
// and roomBytes bytes (key, value and headers as stored, the record crossing
// roomBytes included, at least one), and the queue offset to load from after them.
// They alias the read buffer until drop.
func (s *fillStage) take(room int, roomBytes int64) ([]store.Record, int64) {
	k, size := 0, int64(0)
	for k < len(s.recs) && k < room && size < roomBytes {
		r := &s.recs[k]
		size += int64(len(r.Key) + len(r.Value))
		for _, h := range r.Headers {
			size += int64(len(h.Key) + len(h.Value))
		}
		k++
	}
	out := s.recs[:k:k]
	s.recs = s.recs[k:]
	if len(s.recs) > 0 {
		return out, s.recs[0].Offset
	}
	return out, s.next
}

// drop empties the stage and returns its read buffer to fillBufs: nothing may use
// records taken from it afterwards.
func (s *fillStage) drop() {
	s.recs = nil
	if s.buf != nil {
		fillBufs.Put(s.buf)
		s.buf = nil
	}
}

// expireLocked ends m's lease (expiry or nack). It reports whether m is to be
// dead-lettered (it then is stDeadLettering).
func (q *Queue) expireLocked(m *msg, now int64) bool {
	if m.state == stLeased {
		q.leased--
	}
	q.busyTo = min(q.busyTo, m.off)
	cfg := &q.meta.Config
	if dl := cfg.DeadLetter; dl != nil && m.attempts >= dl.MaxDeliveryAttempts || cfg.ArchiveAfter > 0 && m.attempts >= cfg.ArchiveAfter {
		m.state = stDeadLettering
		return true
	}
	m.state = stAvailable
	d := cfg.backoffMs(m.attempts)
	if d > 0 {
		m.notBefore = now + d
	}
	// A share partition writes every release and lock expiry (with the counts of
	// its acquisitions since the last write); a queue's counts are durable already.
	if d > 0 || q.share != nil {
		q.dirty = append(q.dirty, m)
	}
	return false
}

// flushDirtyLocked enqueues the backoffs of q.dirty for the state file, and a share
// partition's delivery counts not written yet with them (nil: none).
func (q *Queue) flushDirtyLocked() *dbOp {
	if len(q.dirty) == 0 {
		return nil
	}
	offs := make([]int64, 0, len(q.dirty))
	vals := make([][]byte, 0, len(q.dirty))
	for _, m := range q.dirty {
		if m.state == stAvailable && !m.countDirty && q.find(m.off) == m {
			m.keyed = true
			offs = append(offs, m.off)
			vals = append(vals, delivered{m.attempts, m.notBefore}.encode())
		}
	}
	clear(q.dirty)
	q.dirty = q.dirty[:0]
	offs, vals, mark := q.shareCountsLocked(offs, vals)
	return q.putDeliveredLocked(offs, vals, mark)
}

// shareCountsLocked appends to offs and vals the delivery records of q.shareCounts
// still in the window and unacked, and empties it; mark is the delivered mark to
// write with them, or -1 when it is written already. A queue that is not a share
// partition has none (-1).
func (q *Queue) shareCountsLocked(offs []int64, vals [][]byte) ([]int64, [][]byte, int64) {
	for _, m := range q.shareCounts {
		m.countDirty = false
		if m.state == stAcked || q.find(m.off) != m {
			continue
		}
		// Below the delivered mark (written with these) a first delivery needs no
		// record of its own, as in leaseLocked.
		if m.keyed || m.attempts > 1 || m.off >= q.deliveredMark {
			m.keyed = true
			offs = append(offs, m.off)
			vals = append(vals, delivered{m.attempts, m.notBefore}.encode())
		}
	}
	clear(q.shareCounts)
	q.shareCounts = q.shareCounts[:0]
	mark := int64(-1)
	if q.shareMarkDirty {
		mark, q.shareMarkDirty = q.deliveredMark, false
	}
	return offs, vals, mark
}

// flushShareCountsLocked enqueues a share partition's delivery counts not written
// yet (nil: none).
func (q *Queue) flushShareCountsLocked() *dbOp {
	offs, vals, mark := q.shareCountsLocked(nil, nil)
	return q.putDeliveredLocked(offs, vals, mark)
}

// putDeliveredLocked enqueues delivery records (attempts bucket) for offs and, when
// mark >= 0, the delivered mark (nil: nothing to write).
func (q *Queue) putDeliveredLocked(offs []int64, vals [][]byte, mark int64) *dbOp {
	if len(offs) == 0 && mark < 0 {
		return nil
	}
	name, inc := q.name, q.inc
	return q.m.db.enqueue(func(tx *bolt.Tx) error {
		b := incStateBucket(tx, name, inc)
		if b == nil {
			return nil // deleted meanwhile
		}
		if mark >= 0 {
			if err := b.Put(keyDelivered, offKey(mark)); err != nil {
				return err
			}
		}
		at := b.Bucket(bktAttempts)
		for i, off := range offs {
			if err := at.Put(offKey(off), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// delivered is a message's durable delivery record: deliveries so far and the time
// (ms) before which it is not redelivered.
type delivered struct {
	attempts  int32
	notBefore int64
}

func (d delivered) encode() []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, uint32(d.attempts))
	binary.BigEndian.PutUint64(b[4:], uint64(d.notBefore))
	return b
}

func decodeDelivered(b []byte) delivered {
	var d delivered
	if len(b) >= 4 {
		d.attempts = int32(binary.BigEndian.Uint32(b))
	}
	if len(b) >= 12 {
		d.notBefore = int64(binary.BigEndian.Uint64(b[4:]))
	}
	return d
}

// leaseLocked leases up to max available messages for leaseMs. It also ends the
// leases that expired (returning those to dead-letter) and reports the earliest future
// time (ms) a lease ends or a backoff passes (0: none), for a waiting Receive. With
// exact, maxBytes binds the first message too: when the first available one is larger,
// nothing is leased and tooBig is its size. The delivery counts are durable once op
// is (nil: nothing to write); a share partition's are kept for its next state write
// (shareCounts) and op is nil, unless leases expired here, whose write is enqueued
// and not waited for.
func (q *Queue) leaseLocked(now int64, maxMsgs int, maxBytes, leaseMs int64, exact bool) (out []Delivery, dl []*msg, nextEvent, tooBig int64, op *dbOp) {
	ordered := q.meta.Config.OrderingKeyHeader != ""
	var seen map[string]struct{}
	if ordered {
		seen = map[string]struct{}{}
	}
	var size int64
	// Sized for the messages not leased nor blocked behind their ordering key (more
	// when expired leases are taken again).
	n := min(maxMsgs, max(len(q.pending)-q.tombs-q.leased-q.blockedLocked(), 0))
	out = make([]Delivery, 0, n)
	leased := make([]*msg, 0, n)
	// The ack ids are written into one buffer and made strings by one copy at the end
	// (two allocations per delivery were a tenth of leaseLocked's cost); ids[i] ends
	// at idEnds[i].
	var ids []byte
	var idEnds []int
	event := func(t int64) {
		if t > now && (nextEvent == 0 || t < nextEvent) {
			nextEvent = t
		}
	}
	// The busy run: the messages from the window's front that are leased (until
	// runMin or later), acked or being dead-lettered, up to runEnd (busyTo).
	start, runMin, runEnd, busyRun := 0, int64(math.MaxInt64), int64(0), true
	if !ordered && q.busyTo > 0 && q.busyMin > now {
		start = sort.Search(len(q.pending), func(i int) bool { return q.pending[i].off >= q.busyTo })
		if start > 0 {
			event(q.busyMin)
			runMin = q.busyMin
		}
	}
	markRun := func(m *msg) {
		if !busyRun {
			return
		}
		switch m.state {
		case stLeased:
			runMin = min(runMin, m.deadline)
		case stAcked, stDeadLettering:
		default:
			busyRun, runEnd = false, m.off
		}
	}
	// An ordered queue's scan ends once it has seen each key's first unacked message
	// (heads: one per lanes entry) and every unkeyed one (free): all the rest wait
	// behind those. A backlog of one key can fill the window up to MaxLoaded (lanes),
	// which each Receive would walk otherwise.
	heads, free, unkeyed := len(q.lanes), len(q.pending)-q.tombs-q.laneMsgs, 0
	i := start
scan:
	for ; i < len(q.pending); i++ {
		m := q.pending[i]
		if i > start {
			markRun(q.pending[i-1])
		}
		if len(out) >= maxMsgs || maxBytes > 0 && size >= maxBytes || ordered && len(seen) == heads && unkeyed == free {
			break
		}
		if m.state == stAcked {
			continue // a tombstone not compacted yet
		}
		if m.state == stLeased && m.deadline <= now {
			q.m.opts.Metrics.Expired.Inc()
			if q.expireLocked(m, now) {
				dl = append(dl, m)
			}
		}
		if ordered && m.key != "" {
			if _, ok := seen[m.key]; ok {
				continue // an earlier message of this key is not acked yet
			}
			seen[m.key] = struct{}{}
		} else if ordered {
			unkeyed++
		}
		switch {
		case m.state == stLeased:
			event(m.deadline)
			continue
		case m.state != stAvailable:
			continue
		case m.notBefore > now:
			event(m.notBefore)
			continue
		case maxBytes > 0 && (len(out) > 0 || exact) && size+m.size > maxBytes:
			// Never past max_bytes but with a lone first message (not even that
			// when exact): callers size it from their clients' receive limits and
			// flow control. Queue order is kept, so stop here rather than skip.
			if len(out) == 0 {
				tooBig = m.size
			}
			break scan
		}
		m.state = stLeased
		m.attempts++
		q.leaseSeq++
		m.lease = q.leaseSeq
		m.deadline = now + leaseMs
		q.leased++
		size += m.size
		if ids == nil {
			ids = make([]byte, 0, n*maxAckIDLen)
			idEnds = make([]int, 0, n)
		}
		ids = ackID{inc: q.meta.Incarnation, off: m.off, lease: m.lease}.appendTo(ids)
		idEnds = append(idEnds, len(ids))
		out = append(out, Delivery{Record: m.rec, Source: m.source, SourceSeq: m.srcSeq, Attempt: m.attempts})
		m.notBefore = 0
		leased = append(leased, m)
	}
	if i == len(q.pending) && i > start {
		markRun(q.pending[i-1])
	}
	all, from := string(ids), 0
	for k, end := range idEnds {
		out[k].AckID = all[from:end]
		from = end
	}
	if busyRun {
		switch {
		case i < len(q.pending):
			runEnd = q.pending[i].off // not looked at
		case i > 0:
			runEnd = q.pending[i-1].off + 1
		}
	}
	q.busyTo, q.busyMin = runEnd, runMin
	q.m.opts.Metrics.Deliveries.Add(float64(len(out)))
	if q.share != nil {
		for _, m := range leased {
			if !m.countDirty {
				m.countDirty = true
				q.shareCounts = append(q.shareCounts, m)
			}
		}
		if q.advanceDeliveredLocked() >= 0 {
			q.shareMarkDirty = true
		}
		q.flushDirtyLocked() // locks that expired here, with the counts: not waited for
		return out, dl, nextEvent, tooBig, nil
	}
	q.flushDirtyLocked() // backoffs of leases that expired here: not waited for
	mark := q.advanceDeliveredLocked()
	var leasedOffs []int64
	var leasedVals [][]byte
	for _, m := range leased {
		if m.attempts > 1 || m.off >= q.deliveredMark {
			m.keyed = true
			leasedOffs = append(leasedOffs, m.off)
			leasedVals = append(leasedVals, delivered{attempts: m.attempts}.encode())
		}
	}
	op = q.putDeliveredLocked(leasedOffs, leasedVals, mark)
	return out, dl, nextEvent, tooBig, op
}

// advanceDeliveredLocked moves the delivered mark past the delivered (or acked)
// messages that follow it in the window, and returns the new mark to store, or -1
// when it did not move.
func (q *Queue) advanceDeliveredLocked() int64 {
	i := sort.Search(len(q.pending), func(i int) bool { return q.pending[i].off >= q.deliveredMark })
	for ; i < len(q.pending); i++ {
		if m := q.pending[i]; m.attempts == 0 && m.state != stAcked {
			break
		}
	}
	mark := q.loadPos
	if i < len(q.pending) {
		mark = q.pending[i].off
	}
	if mark <= q.deliveredMark {
		return -1
	}
	q.deliveredMark = mark
	return mark
}

// Receive leases up to maxMsgs messages for leaseMs (0 = the queue's ack deadline),
// waiting up to wait when none is available. The delivery counts are durable before
// it returns. Errors: ErrInvalidArgument, ErrNotFound, ErrDetached, ErrState,
// ErrClosed, ctx's error.
func (q *Queue) Receive(ctx context.Context, maxMsgs int, maxBytes, leaseMs int64, wait time.Duration) ([]Delivery, error) {
	out, _, err := q.ReceiveWith(ctx, ReceiveArgs{MaxMsgs: maxMsgs, MaxBytes: maxBytes, LeaseMs: leaseMs, Wait: wait})
	return out, err
}

// ReceiveCatchUp is Receive with read-your-writes: before leasing it waits,
// up to Options.CatchUpMax (also when wait is shorter; the time counts toward wait),
// until each binding has looked at every record its source held when the call began
// and what it copied is loaded (catchUp), so records appended to a source before the
// call are delivered by it when the window has room.
func (q *Queue) ReceiveCatchUp(ctx context.Context, maxMsgs int, maxBytes, leaseMs int64, wait time.Duration) ([]Delivery, error) {
	out, _, err := q.ReceiveWith(ctx, ReceiveArgs{MaxMsgs: maxMsgs, MaxBytes: maxBytes, LeaseMs: leaseMs, Wait: wait, CatchUp: true})
	return out, err
}

// ReceiveArgs are ReceiveWith's: Receive's, and whether it catches up
// (ReceiveCatchUp) and whether MaxBytes is exact.
type ReceiveArgs struct {
	MaxMsgs           int
	MaxBytes, LeaseMs int64
	Wait              time.Duration
	CatchUp           bool
	// ExactBytes: MaxBytes binds the first message too (a caller that may hold no
	// more). When the first available message is larger, nothing is leased and
	// ReceiveWith answers at once, without waiting, with its size.
	ExactBytes bool
}

// ReceiveWith is Receive, or ReceiveCatchUp with a.CatchUp; with a.ExactBytes it
// returns nothing and the size of the first available message (key, value, header
// names and values, bytes) when that one alone is larger than a.MaxBytes.
func (q *Queue) ReceiveWith(ctx context.Context, a ReceiveArgs) (out []Delivery, tooBig int64, err error) {
	return q.receive(ctx, a)
}

// DefaultCatchUpMax is the default Options.CatchUpMax, the bound of ReceiveCatchUp's
// wait for the bindings: a binding that cannot progress (its source unreadable, the
// queue log failing) delays a Receive no longer. A copy takes a read and an fsync,
// usually a millisecond or two; the bound is far above that, so a slow fsync on a
// loaded disk does not cut a Pull short, and only a stuck binding costs it.
const DefaultCatchUpMax = time.Second

// catchUpPoll is how often catchUp looks at the cursors when nothing woke it: a copy
// that loaded nothing (every record filtered out, or the window full) moves a cursor
// without a wake-up.
const catchUpPoll = time.Millisecond

// catchUp waits until every binding's cursor is past its source's high watermark as
// read at the start, or Options.CatchUpMax passed, or ctx ended (ctx's error), then
// loads what the bindings copied into the window: a pump moves its cursor before its
// own fill loads the copy, and fill waits for that one. A binding whose source is gone
// (deleted, or deleted and created again) or that was removed (unbind, detach) is not
// waited for; a deleted or detached queue ends the wait (the caller reports it), and so
// does a window that already holds maxMsgs messages not leased nor blocked behind their
// ordering key (the answer is full without the copies: a binding far behind its source
// does not hold up every Pull).
func (q *Queue) catchUp(ctx context.Context, maxMsgs int) error {
	type target struct {
		b  *binding
		hw int64 // the cursor must pass it: the source's last sequence at the start
	}
	q.mu.Lock()
	bs := slices.Clone(q.bindings)
	q.mu.Unlock()
	if len(bs) == 0 {
		return nil
	}
	// source returns b's source log, nil when it is gone.
	source := func(b *binding) *store.Log {
		src, err := q.m.st.Get(b.source)
		if err != nil || b.srcCreated != 0 && src.CreatedMs() != b.srcCreated {
			return nil
		}
		return src
	}
	var targets []target
	for _, b := range bs {
		if src := source(b); src != nil {
			if hw := src.HighWatermark(); b.cursor.Load() <= hw {
				targets = append(targets, target{b, hw})
			}
		}
	}
	if len(targets) > 0 {
		bound := time.NewTimer(q.m.opts.CatchUpMax)
		defer bound.Stop()
		poll := time.NewTicker(catchUpPoll)
		defer poll.Stop()
	wait:
		for {
			q.mu.Lock()
			if q.usableLocked() != nil {
				q.mu.Unlock()
				return nil
			}
			if len(q.pending)-q.tombs-q.leased-q.blockedLocked() >= maxMsgs {
				q.mu.Unlock()
				break
			}
			ch := q.notify
			targets = slices.DeleteFunc(targets, func(t target) bool {
				return t.b.cursor.Load() > t.hw || !slices.Contains(q.bindings, t.b)
			})
			q.mu.Unlock()
			targets = slices.DeleteFunc(targets, func(t target) bool { return source(t.b) == nil })
			if len(targets) == 0 {
				break
			}
			select {
			case <-ch:
			case <-poll.C:
			case <-bound.C:
				break wait
			case <-ctx.Done():
				return ctx.Err()
			case <-q.m.stop:
				return ErrClosed
			}
		}
	}
	q.fill()
	return nil
}

func (q *Queue) receive(ctx context.Context, a ReceiveArgs) ([]Delivery, int64, error) {
	maxMsgs, maxBytes, leaseMs, wait := a.MaxMsgs, a.MaxBytes, a.LeaseMs, a.Wait
	if maxMsgs < 1 || maxMsgs > MaxReceiveMessages {
		return nil, 0, fmt.Errorf("%w: max_messages %d outside [1, %d]", ErrInvalidArgument, maxMsgs, MaxReceiveMessages)
	}
	if leaseMs != 0 && (leaseMs < MinAckDeadlineMs || leaseMs > MaxAckDeadlineMs) {
		return nil, 0, fmt.Errorf("%w: ack_deadline_ms %d outside [%d, %d] (0 = the queue's)", ErrInvalidArgument, leaseMs, MinAckDeadlineMs, MaxAckDeadlineMs)
	}
	if maxBytes < 0 || wait < 0 {
		return nil, 0, fmt.Errorf("%w: max_bytes and wait_ms must not be negative", ErrInvalidArgument)
	}
	end := time.Now().Add(wait)
	if a.CatchUp {
		if err := q.catchUp(ctx, maxMsgs); err != nil {
			return nil, 0, err
		}
	}
	for {
		q.tryFill()
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return nil, 0, err
		}
		lease := leaseMs
		if lease == 0 {
			lease = q.meta.Config.ackDeadline()
		}
		now := q.m.nowMs()
		out, dl, next, tooBig, op := q.leaseLocked(now, maxMsgs, maxBytes, lease, a.ExactBytes)
		ch := q.notify
		q.mu.Unlock()
		if len(dl) > 0 {
			q.deadLetter(dl)
		}
		if len(out) > 0 {
			if err := op.wait(); err != nil {
				return nil, 0, err
			}
			return out, 0, nil
		}
		if tooBig > 0 {
			return nil, tooBig, nil
		}
		remaining := time.Until(end)
		if remaining <= 0 {
			return nil, 0, nil
		}
		if next > 0 {
			remaining = min(remaining, time.Duration(next-now)*time.Millisecond)
		}
		t := time.NewTimer(remaining)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, 0, ctx.Err()
		case <-q.m.stop:
			t.Stop()
			return nil, 0, ErrClosed
		}
		t.Stop()
	}
}

// resolveLocked looks an ack id up: the message when the id is its current lease,
// else the result to report (before the exactly-once rule).
func (q *Queue) resolveLocked(id string) (*msg, AckResult) {
	a, ok := parseAckID(id)
	if !ok || a.inc != q.meta.Incarnation {
		return nil, AckInvalid
	}
	m := q.find(a.off)
	if m == nil || m.state == stAcked {
		if a.off < q.loadPos || a.off < q.log.HighWatermark() {
			return nil, AckExpired // acked, or its lease is from before a rebuild
		}
		return nil, AckInvalid
	}
	if m.state == stLeased && m.lease == a.lease {
		return m, AckOK
	}
	return m, AckExpired
}

// finalResult applies the exactly-once rule: without it a stale ack id is success.
func (q *Queue) finalResult(r AckResult) AckResult {
	if r == AckExpired && !q.meta.Config.ExactlyOnce {
		return AckOK
	}
	return r
}

// Ack acknowledges leased messages, durably before it returns; one result per id.
// Without exactly-once, a stale ack id of a message nobody holds a lease on acks it
// too (it would only be redelivered); one whose message is leased by a later delivery
// changes nothing.
func (q *Queue) Ack(ids []string) ([]AckResult, error) {
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	res := make([]AckResult, len(ids))
	var acked []*msg
	now := q.m.nowMs()
	eod := q.meta.Config.ExactlyOnce
	for i, id := range ids {
		m, r := q.resolveLocked(id)
		if r == AckOK && eod && m.deadline <= now {
			r = AckExpired // the lease ended, though not swept yet
		}
		if m != nil && (r == AckOK || r == AckExpired && !eod && m.state == stAvailable) {
			q.ackLocked(m)
			acked = append(acked, m)
		}
		res[i] = q.finalResult(r)
	}
	var op *dbOp
	if len(acked) > 0 {
		q.m.opts.Metrics.Acks.Add(float64(len(acked)))
		op = q.commitAcksLocked(acked)
		// An ack makes a message available only by freeing an ordering lane or room
		// in the window for records not loaded yet; otherwise waiters sleep on.
		if q.meta.Config.OrderingKeyHeader != "" || q.loadPos < q.log.HighWatermark() {
			q.wakeLocked()
		}
	}
	q.mu.Unlock()
	if err := op.wait(); err != nil {
		return nil, err
	}
	return res, nil
}

// ackLocked marks m, not acked yet, acked (removed from the window by compactLocked).
func (q *Queue) ackLocked(m *msg) {
	if m.state == stLeased {
		q.leased--
	}
	m.state = stAcked
	q.tombs++
	q.pendingBytes -= m.size
	q.laneDropLocked(m.key)
}

// commitAcksLocked drops the messages just acked (ackLocked) from the window and
// enqueues their durable ack: the new floor, the acked offsets above it (as runs of
// consecutive offsets), their delivery records (keyed) removed; a share partition's
// delivery counts not written yet go with it (shareCountsLocked).
func (q *Queue) commitAcksLocked(acked []*msg) *dbOp {
	countOffs, countVals, mark := q.shareCountsLocked(nil, nil)
	q.compactLocked()
	floor := q.floorLocked()
	var above, delKeys []int64
	for _, m := range acked {
		if m.off < floor {
			continue
		}
		above = append(above, m.off)
		if m.keyed {
			delKeys = append(delKeys, m.off)
		}
	}
	slices.Sort(above)
	c := &ackCommit{name: q.name, inc: q.inc, floor: floor, mark: mark, countOffs: countOffs, countVals: countVals, above: above, delKeys: delKeys}
	return q.m.db.enqueueRec(c.apply, c.encode())
}

// compactLocked removes acked (tombstoned) messages from the window: those at its
// front at once (the floor is the first unacked message), the others once they are
// half the window, so an ack costs amortized O(1) however large the window.
func (q *Queue) compactLocked() {
	i := 0
	for i < len(q.pending) && q.pending[i].state == stAcked {
		i++
	}
	if i > 0 {
		clear(q.pending[:i])
		q.pending = q.pending[i:]
		q.tombs -= i
	}
	if q.tombs == 0 || q.tombs*2 < len(q.pending) {
		return
	}
	out := q.pending[:0]
	for _, m := range q.pending {
		if m.state != stAcked {
			out = append(out, m)
		}
	}
	clear(q.pending[len(out):])
	q.pending = out
	q.tombs = 0
}

// ModifyAckDeadline sets the lease of leased messages to deadlineMs from now; 0 is a
// nack (available again after the retry backoff, or dead-lettered once the delivery
// attempts are used up).
func (q *Queue) ModifyAckDeadline(ids []string, deadlineMs int64) ([]AckResult, error) {
	if deadlineMs < 0 || deadlineMs > MaxAckDeadlineMs {
		return nil, fmt.Errorf("%w: ack_deadline_ms %d outside [0, %d]", ErrInvalidArgument, deadlineMs, MaxAckDeadlineMs)
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	now := q.m.nowMs()
	res := make([]AckResult, len(ids))
	var dl []*msg
	changed := false
	for i, id := range ids {
		m, r := q.resolveLocked(id)
		if r == AckOK && m.deadline <= now {
			r = AckExpired // expired, not yet swept
		}
		if r == AckOK {
			if deadlineMs == 0 {
				q.m.opts.Metrics.Nacks.Inc()
				if q.expireLocked(m, now) {
					dl = append(dl, m)
				}
				changed = true
			} else {
				m.deadline = now + deadlineMs
				q.busyMin = min(q.busyMin, m.deadline)
			}
		}
		res[i] = q.finalResult(r)
	}
	var op *dbOp
	if changed {
		op = q.flushDirtyLocked()
		q.wakeLocked()
	}
	q.mu.Unlock()
	if len(dl) > 0 {
		q.deadLetter(dl)
	}
	if err := op.wait(); err != nil {
		return nil, err
	}
	return res, nil
}

// sweep ends expired leases and finished backoffs (waking receivers) and
// dead-letters what is due. It reports whether it changed anything.
func (q *Queue) sweep() bool {
	q.mu.Lock()
	if q.deleted || q.meta.Detached {
		q.mu.Unlock()
		return false
	}
	now := q.m.nowMs()
	var dl []*msg
	changed := false
	for _, m := range q.pending {
		if m.state == stLeased && m.deadline <= now {
			q.m.opts.Metrics.Expired.Inc()
			if q.expireLocked(m, now) {
				dl = append(dl, m)
			}
			changed = true
		} else if m.state == stAvailable && m.notBefore > 0 && m.notBefore <= now {
			m.notBefore = 0
			changed = true
		}
	}
	if changed {
		q.flushDirtyLocked()
		q.wakeLocked()
	}
	q.mu.Unlock()
	if len(dl) > 0 {
		q.deadLetter(dl)
	}
	return changed
}

// Leases returns, per ack id, the deadline (ms) of its lease when it is the current
// lease of its message and not past its deadline, else 0 (acked, nacked, expired,
// superseded, reset, malformed or of another queue). Errors: ErrInvalidArgument (more
// than MaxLeaseQuery ids), ErrNotFound, ErrDetached.
func (q *Queue) Leases(ids []string) ([]int64, error) {
	if len(ids) > MaxLeaseQuery {
		return nil, fmt.Errorf("%w: %d ack ids, at most %d", ErrInvalidArgument, len(ids), MaxLeaseQuery)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return nil, err
	}
	now := q.m.nowMs()
	out := make([]int64, len(ids))
	for i, id := range ids {
		if m, r := q.resolveLocked(id); r == AckOK && m.deadline > now {
			out[i] = m.deadline
		}
	}
	return out, nil
}

// deadLetter appends the messages to the dead-letter log, then acks them (a queue
// that archives, Config.ArchiveAfter, without a dead-letter policy acks them only). When an
// append fails its messages become available again (retried after a second). The
// records go in batches of about deadLetterBatchBytes (one fsync each, not one per
// message: thousands of leases expiring at once on a dead-lettering queue would
// otherwise hold the sweep, which serves every queue, for seconds).
func (q *Queue) deadLetter(ms []*msg) {
	q.mu.Lock()
	pol := q.meta.Config.DeadLetter
	archive := q.meta.Config.ArchiveAfter > 0
	q.mu.Unlock()
	for len(ms) > 0 {
		n, size := 0, 0
		for n < len(ms) && n < 1000 && (n == 0 || size+int(ms[n].size) < deadLetterBatchBytes) {
			size += int(ms[n].size) + 64
			n++
		}
		batch := ms[:n]
		ms = ms[n:]
		errs := make([]error, len(batch))
		switch {
		case pol == nil && archive:
			// Archived: acked below, copied nowhere.
		case pol == nil:
			for i := range errs {
				errs[i] = errors.New("dead-letter policy removed")
			}
		default:
			if err := q.appendDeadLetter(batch, pol); err != nil && len(batch) > 1 {
				// One bad message (e.g. over the dead-letter log's max_message_bytes)
				// must not hold the others back: append them one by one.
				for i, m := range batch {
					errs[i] = q.appendDeadLetter([]*msg{m}, pol)
				}
			} else {
				errs[0] = err
			}
		}
		q.mu.Lock()
		var acked []*msg
		for i, m := range batch {
			if q.deleted || m.state != stDeadLettering || q.find(m.off) != m {
				continue // the queue was deleted or the window rebuilt meanwhile
			}
			if errs[i] != nil {
				q.m.log.Warn("dead-letter append failed; message stays in the queue", zap.String("queue", q.name),
					zap.Int64("sequence", channel.OffsetToSequence(m.off)), zap.Error(errs[i]))
				m.state = stAvailable
				m.notBefore = q.m.nowMs() + 1000
				q.busyTo = min(q.busyTo, m.off)
				continue
			}
			q.ackLocked(m)
			acked = append(acked, m)
		}
		var op *dbOp
		if len(acked) > 0 {
			q.m.opts.Metrics.DeadLettered.Add(float64(len(acked)))
			op = q.commitAcksLocked(acked)
		}
		q.wakeLocked()
		q.mu.Unlock()
		if err := op.wait(); err != nil {
			q.m.log.Warn("dead-lettered message ack not persisted", zap.String("queue", q.name), zap.Error(err))
		}
	}
}

// deadLetterBatchBytes bounds one dead-letter append (key, value and headers of its
// messages; a larger message goes alone), below the default max_message_bytes; at
// most 1000 records.
const deadLetterBatchBytes = 512 << 10

// appendDeadLetter appends ms to the policy's log in one batch: each record's key and
// value, its headers minus drop_headers, then the policy's headers, then the delivery
// count and source timestamp headers when named. The timestamp is the append time.
func (q *Queue) appendDeadLetter(ms []*msg, pol *DeadLetterPolicy) error {
	l, err := q.m.st.Get(pol.Channel)
	if err != nil {
		return err
	}
	if l.Kind() != store.KindLog {
		return fmt.Errorf("%w: dead-letter channel %s is a queue", ErrInvalidArgument, pol.Channel)
	}
	recs := make([]store.NewRecord, len(ms))
	for i, m := range ms {
		hs := make([]store.Header, 0, len(m.rec.Headers)+len(pol.Headers)+2)
		for _, h := range m.rec.Headers {
			drop := false
			for _, d := range pol.DropHeaders {
				if h.Key == d {
					drop = true
					break
				}
			}
			if !drop {
				hs = append(hs, h)
			}
		}
		hs = append(hs, pol.Headers...)
		if pol.DeliveryCountHeader != "" {
			hs = append(hs, store.Header{Key: pol.DeliveryCountHeader, Value: strconv.AppendInt(nil, int64(m.attempts), 10)})
		}
		if pol.SourceTimestampHeader != "" {
			hs = append(hs, store.Header{Key: pol.SourceTimestampHeader, Value: strconv.AppendInt(nil, m.rec.Timestamp, 10)})
		}
		recs[i] = store.NewRecord{Key: m.rec.Key, Value: m.rec.Value, Headers: hs}
	}
	_, _, err = l.Append(recs)
	return err
}

// Info describes a queue (GetQueue).
type Info struct {
	Name      string
	Config    Config
	Bindings  []Binding
	Detached  bool
	Backlog   int64
	Leased    int64
	CreatedMs int64
}

// Info returns the queue's description and counts.
func (q *Queue) Info() Info {
	q.mu.Lock()
	defer q.mu.Unlock()
	in := Info{Name: q.name, Config: q.meta.Config, Detached: q.meta.Detached, CreatedMs: q.meta.CreatedMs}
	// Counted, not q.leased: leases past their deadline are over even before a sweep.
	now := q.m.nowMs()
	for _, m := range q.pending {
		if m.state == stLeased && m.deadline > now {
			in.Leased++
		}
	}
	for _, b := range q.bindings {
		in.Bindings = append(in.Bindings, Binding{Source: b.source, Filter: b.filterExpr, StartSequence: b.start, Cursor: b.cursor.Load()})
	}
	if !q.meta.Detached {
		hw := max(q.log.HighWatermark(), q.loadPos)
		ahead := q.ackedAhead.count(q.loadPos, hw)
		in.Backlog = max(int64(len(q.pending)-q.tombs)+hw-q.loadPos-ahead, 0)
	}
	return in
}
