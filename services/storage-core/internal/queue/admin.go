package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tributary/tributary/services/storage-core/internal/store"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// Errors of state transactions that check before they write.
var (
	errSnapshotTaken   = errors.New("snapshot name taken")
	errSnapshotMissing = errors.New("snapshot missing")
	errQueueGone       = errors.New("queue deleted")
)

func isErr(err, target error) bool { return errors.Is(err, target) }

// resetLocked rebuilds the window from a new acknowledgement state: every offset
// below floor acked, plus those in acked; everything else unacked with no delivery
// history. Leases end (their ack ids report EXPIRED). It enqueues the durable state
// and returns the op to wait for after unlocking.
func (q *Queue) resetLocked(floor int64, acked spans) *dbOp {
	acked.dropBelow(floor)
	q.gen++
	clear(q.pending)
	q.pending = nil
	q.pendingBytes = 0
	q.leased = 0
	q.busyTo, q.busyMin = 0, 0
	q.loadPos = floor
	q.ackedAhead = acked
	q.attempts = map[int64]delivered{}
	q.deliveredMark = floor
	q.tombs = 0
	q.lanes, q.laneMsgs = nil, 0
	clear(q.dirty)
	q.dirty = q.dirty[:0]
	clear(q.shareCounts)
	q.shareCounts, q.shareMarkDirty = q.shareCounts[:0], false
	q.wakeLocked()
	put := append(spans(nil), acked...)
	name, inc := q.name, q.inc
	return q.m.db.enqueue(func(tx *bolt.Tx) error {
		b := incStateBucket(tx, name, inc)
		if b == nil {
			return nil
		}
		if err := b.Put(keyFloor, offKey(floor)); err != nil {
			return err
		}
		if err := b.Put(keyDelivered, offKey(floor)); err != nil {
			return err
		}
		ab := b.Bucket(bktAcked)
		if err := clearBucket(ab); err != nil {
			return err
		}
		for _, sp := range put {
			if err := ab.Put(offKey(sp.From), offKey(sp.To)); err != nil {
				return err
			}
		}
		return clearBucket(b.Bucket(bktAttempts))
	})
}

// Purge acks every message in the queue now (nothing is redelivered).
func (q *Queue) Purge() error {
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	op := q.resetLocked(q.log.HighWatermark(), nil)
	q.mu.Unlock()
	return op.wait()
}

// SeekTime acks the messages published (source timestamp) before tsMs and unacks the
// rest, as far as the queue log still holds them: the new floor is the first queue
// record with a timestamp at or after tsMs (Kafka ListOffsets semantics; records are
// in queue order, so a later record published earlier than tsMs stays unacked).
//
// Acked messages from the floor on become unacked again only when the queue retains
// them (Config.RetainAcked) or replayAcked is set (Pub/Sub: the topic has message
// retention); otherwise they stay acked, as Google's Seek restores only retained
// messages, and only the unacked ones lose their leases and delivery history.
func (q *Queue) SeekTime(tsMs int64, replayAcked bool) error {
	off, _, found, err := q.log.LookupTime(tsMs)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	if !found {
		off = q.log.HighWatermark()
	}
	floor := max(off, q.log.LogStart())
	var acked spans
	if !q.meta.Config.RetainAcked && !replayAcked {
		s := q.snapshotLocked(0)
		acked = s.ackedSpans(max(floor, s.Floor))
		floor = acked.raiseFloor(max(floor, s.Floor))
	}
	op := q.resetLocked(floor, acked)
	q.mu.Unlock()
	return op.wait()
}

// SeekSnapshot restores the acknowledgement state of a snapshot: of this queue
// exactly (by queue offsets); of another queue bound to a source this one is bound to
// too (Pub/Sub: another subscription of the same topic), by source sequences: a
// message is acked when its source record was below the snapshot's cursor for that
// source and not unacked then. Messages from a source the snapshot does not know stay
// unacked.
func (q *Queue) SeekSnapshot(name string) error {
	s, err := q.m.snapshot(name)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	own := s.Queue == q.name && s.Incarnation == q.meta.Incarnation
	shared := map[string]*snapSource{}
	for _, b := range q.bindings {
		if ss := s.Sources[b.source]; ss != nil && ss.sameSource(b.srcCreated) {
			shared[b.source] = ss
		}
	}
	q.mu.Unlock()
	if !own {
		if len(shared) == 0 {
			return fmt.Errorf("%w: snapshot %s was taken of %s, which shares no source with %s", ErrSnapshotMismatch, name, s.Queue, q.name)
		}
		return q.seekForeign(shared)
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	floor := max(s.Floor, q.log.LogStart())
	acked := s.ackedSpans(floor)
	floor = acked.raiseFloor(floor)
	op := q.resetLocked(floor, acked)
	q.mu.Unlock()
	return op.wait()
}

// seekForeign applies another queue's snapshot by source sequences (SeekSnapshot),
// given the parts of it describing the sources this queue reads. Only the records the
// queue log still holds can become unacked again.
func (q *Queue) seekForeign(sources map[string]*snapSource) error {
	start, hw := q.log.LogStart(), q.log.HighWatermark()
	var acked spans
	for off := start; off < hw; {
		recs, next, err := q.log.ReadRecords(off, 1000, 1<<20)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Offset >= hw {
				break
			}
			src, seq := sourceOf(r.Headers)
			if ss := sources[src]; ss != nil && !ss.unacked(seq) {
				acked.add(r.Offset)
			}
		}
		if next <= off {
			break
		}
		off = next
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	op := q.resetLocked(acked.raiseFloor(start), acked)
	q.mu.Unlock()
	return op.wait()
}

// sourceOf returns a queue record's source channel and sequence (internal headers).
func sourceOf(hs []store.Header) (string, int64) {
	var src string
	var seq int64
	for _, h := range hs {
		switch h.Key {
		case HeaderSource:
			src = string(h.Value)
		case HeaderSourceSeq:
			seq, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	return src, seq
}

// ackedSpans returns the offsets a snapshot holds acked from floor on: [floor, End)
// but the unacked offsets (sorted), then AckedAhead.
func (s *snapshot) ackedSpans(floor int64) spans {
	var acked spans
	cur := floor
	for _, u := range s.Unacked {
		if u < cur {
			continue
		}
		if u > cur {
			acked = append(acked, span{cur, u})
		}
		cur = u + 1
	}
	if cur < s.End {
		acked = append(acked, span{cur, s.End})
	}
	for _, sp := range s.AckedAhead {
		if n := len(acked); n > 0 && acked[n-1].To >= sp.From {
			acked[n-1].To = max(acked[n-1].To, sp.To)
			continue
		}
		acked = append(acked, sp)
	}
	return acked
}

// snapshotLocked captures the queue's acknowledgement state.
func (q *Queue) snapshotLocked(now int64) snapshot {
	s := snapshot{Queue: q.name, Incarnation: q.meta.Incarnation, CreatedMs: now, Floor: q.floorLocked(), End: q.loadPos}
	for _, m := range q.pending {
		if m.state != stAcked {
			s.Unacked = append(s.Unacked, m.off)
		}
	}
	s.AckedAhead = append([]span(nil), q.ackedAhead...)
	return s
}

// CreateSnapshot records the queue's acknowledgement state under name (unique per
// storage-core), by queue offsets and by source sequences (reading the part of the
// queue log not in memory). Errors: ErrInvalidArgument (name), ErrSnapshotExists,
// ErrDetached.
func (q *Queue) CreateSnapshot(name string) (int64, error) {
	if name == "" || len(name) > MaxSnapshotNameLen {
		return 0, fmt.Errorf("%w: snapshot name must be 1..%d bytes", ErrInvalidArgument, MaxSnapshotNameLen)
	}
	q.m.adminMu.Lock()
	defer q.m.adminMu.Unlock()
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	// Cursors before the high watermark: every record below a cursor is in the log
	// below the high watermark read after it.
	srcs := map[string]*snapSource{}
	for _, b := range q.bindings {
		srcs[b.source] = &snapSource{Cursor: b.cursor.Load(), CreatedMs: b.srcCreated}
	}
	hw := q.log.HighWatermark()
	s := q.snapshotLocked(q.m.nowMs())
	for _, m := range q.pending {
		if ss := srcs[m.source]; ss != nil && m.state != stAcked {
			ss.Unacked.add(m.srcSeq)
		}
	}
	ahead := append(spans(nil), q.ackedAhead...)
	q.mu.Unlock()
	for off := s.End; off < hw; {
		recs, next, err := q.log.ReadRecords(off, 1000, 1<<20)
		if err != nil {
			return 0, err
		}
		for _, r := range recs {
			if ahead.contains(r.Offset) || r.Offset >= hw {
				continue
			}
			src, seq := sourceOf(r.Headers)
			if ss := srcs[src]; ss != nil {
				ss.Unacked.add(seq)
			}
		}
		if next <= off {
			break
		}
		off = next
	}
	if len(srcs) > 0 {
		s.Sources = srcs
	}
	err := q.m.db.update(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bktSnapshots)
		if sb.Get([]byte(name)) != nil {
			return errSnapshotTaken
		}
		if incStateBucket(tx, q.name, q.inc) == nil {
			return errQueueGone
		}
		return putJSON(sb, name, s)
	})
	switch {
	case err == nil:
	case isErr(err, errSnapshotTaken):
		return 0, fmt.Errorf("%w: %s", ErrSnapshotExists, name)
	case isErr(err, errQueueGone):
		return 0, fmt.Errorf("%w: %s", ErrNotFound, q.name)
	default:
		return 0, err
	}
	q.m.log.Info("snapshot created", zap.String("queue", q.name), zap.String("snapshot", name))
	return s.CreatedMs, nil
}

// DeleteSnapshot removes a snapshot: ErrSnapshotNotFound when missing.
func (m *Manager) DeleteSnapshot(name string) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	err := m.db.update(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bktSnapshots)
		if sb.Get([]byte(name)) == nil {
			return errSnapshotMissing
		}
		return sb.Delete([]byte(name))
	})
	if isErr(err, errSnapshotMissing) {
		return fmt.Errorf("%w: %s", ErrSnapshotNotFound, name)
	}
	return err
}

func (m *Manager) snapshot(name string) (snapshot, error) {
	var s snapshot
	found := false
	err := m.db.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bktSnapshots).Get([]byte(name))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &s)
	})
	if err != nil {
		return s, err
	}
	if !found {
		return s, fmt.Errorf("%w: %s", ErrSnapshotNotFound, name)
	}
	return s, nil
}

// queueKey names one incarnation of a queue.
type queueKey struct {
	name string
	inc  uint64
}

// snapshotFloors returns the lowest snapshot floor of each queue incarnation
// (retention keeps those records). A snapshot of a deleted queue pins nothing: its
// offsets are not those of a queue created again under the name.
func (m *Manager) snapshotFloors() map[queueKey]int64 {
	out := map[queueKey]int64{}
	_ = m.db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bktSnapshots).ForEach(func(_, v []byte) error {
			var s snapshot
			if json.Unmarshal(v, &s) == nil {
				k := queueKey{s.Queue, s.Incarnation}
				if f, ok := out[k]; !ok || s.Floor < f {
					out[k] = s.Floor
				}
			}
			return nil
		})
	})
	return out
}

// Detach removes the queue's bindings and drops every message not yet acked; the
// queue stays, and its delivery verbs answer ErrDetached. Detaching twice is a no-op.
func (m *Manager) Detach(name string) error {
	q, err := m.Get(name)
	if err != nil {
		return err
	}
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	q.stopPumps()
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if q.meta.Detached {
		q.mu.Unlock()
		return nil
	}
	meta := q.meta
	meta.Detached = true
	meta.Bindings = nil
	metaOp := q.putMetaLocked(meta)
	op := q.resetLocked(q.log.HighWatermark(), nil)
	q.meta = meta
	q.bindings = nil
	q.mu.Unlock()
	if err := metaOp.wait(); err != nil {
		return err
	}
	if err := op.wait(); err != nil {
		return err
	}
	m.log.Info("queue detached", zap.String("queue", name))
	return nil
}

// putMetaLocked enqueues the durable write of meta.
func (q *Queue) putMetaLocked(meta queueMeta) *dbOp {
	name, inc := q.name, q.inc
	return q.m.db.enqueue(func(tx *bolt.Tx) error {
		if incStateBucket(tx, name, inc) == nil {
			return nil
		}
		return putJSON(tx.Bucket(bktQueues), name, meta)
	})
}

// Config fields UpdateConfig accepts in its mask (QueueConfig field names).
var configFields = []string{"ack_deadline_ms", "message_retention_ms", "retain_acked", "ordering_key_header", "dead_letter", "retry", "exactly_once"}

// UpdateConfig replaces the config fields named in mask (all when empty).
func (q *Queue) UpdateConfig(in Config, mask []string) (Info, error) {
	q.m.adminMu.Lock()
	defer q.m.adminMu.Unlock()
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, q.name)
	}
	c := in
	if len(mask) > 0 {
		c = q.meta.Config
		for _, f := range mask {
			switch f {
			case "ack_deadline_ms":
				c.AckDeadlineMs = in.AckDeadlineMs
			case "message_retention_ms":
				c.MessageRetentionMs = in.MessageRetentionMs
			case "retain_acked":
				c.RetainAcked = in.RetainAcked
			case "ordering_key_header":
				c.OrderingKeyHeader = in.OrderingKeyHeader
			case "dead_letter":
				c.DeadLetter = in.DeadLetter
			case "retry":
				c.Retry = in.Retry
			case "exactly_once":
				c.ExactlyOnce = in.ExactlyOnce
			default:
				q.mu.Unlock()
				return Info{}, fmt.Errorf("%w: update_mask field %q; want one of %v", ErrInvalidArgument, f, configFields)
			}
		}
	}
	if err := c.Validate(); err != nil {
		q.mu.Unlock()
		return Info{}, err
	}
	if err := q.m.checkDeadLetter(q.name, c); err != nil {
		q.mu.Unlock()
		return Info{}, err
	}
	meta := q.meta
	meta.Config = c
	op := q.putMetaLocked(meta)
	q.mu.Unlock()
	if err := op.wait(); err != nil {
		return Info{}, err
	}
	q.mu.Lock()
	reorder := q.meta.Config.OrderingKeyHeader != c.OrderingKeyHeader
	q.meta.Config = c
	if reorder {
		for _, m := range q.pending {
			m.key = orderingKey(c.OrderingKeyHeader, m.rec.Headers)
		}
		q.recountLanesLocked()
	}
	q.wakeLocked()
	q.mu.Unlock()
	return q.Info(), nil
}
