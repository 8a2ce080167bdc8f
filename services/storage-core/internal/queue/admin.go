package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

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
func (q *Queue) resetLocked(floor int64, acked map[int64]struct{}) *dbOp {
	if acked == nil {
		acked = map[int64]struct{}{}
	}
	q.gen++
	clear(q.pending)
	q.pending = nil
	q.leased = 0
	q.loadPos = floor
	q.ackedAhead = acked
	q.attempts = map[int64]int32{}
	q.wakeLocked()
	offs := make([]int64, 0, len(acked))
	for off := range acked {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	name := q.name
	return q.m.db.enqueue(func(tx *bolt.Tx) error {
		b := stateBucket(tx, name)
		if b == nil {
			return nil
		}
		if err := b.Put(keyFloor, offKey(floor)); err != nil {
			return err
		}
		ab := b.Bucket(bktAcked)
		if err := clearBucket(ab); err != nil {
			return err
		}
		for _, off := range offs {
			if err := ab.Put(offKey(off), []byte{}); err != nil {
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
func (q *Queue) SeekTime(tsMs int64) error {
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
	op := q.resetLocked(max(off, q.log.LogStart()), nil)
	q.mu.Unlock()
	return op.wait()
}

// SeekSnapshot restores the acknowledgement state of a snapshot of this queue.
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
	if s.Queue != q.name || s.Incarnation != q.meta.Incarnation {
		q.mu.Unlock()
		return fmt.Errorf("%w: snapshot %s was taken of %s, not of this queue (%s)", ErrNotQueue, name, s.Queue, q.name)
	}
	floor := max(s.Floor, q.log.LogStart())
	acked := map[int64]struct{}{}
	unacked := map[int64]struct{}{}
	for _, off := range s.Unacked {
		unacked[off] = struct{}{}
	}
	for off := floor; off < s.End; off++ {
		if _, ok := unacked[off]; !ok {
			acked[off] = struct{}{}
		}
	}
	for _, off := range s.AckedAhead {
		if off >= floor {
			acked[off] = struct{}{}
		}
	}
	// The floor moves up past a leading acked run.
	for {
		if _, ok := acked[floor]; !ok {
			break
		}
		delete(acked, floor)
		floor++
	}
	op := q.resetLocked(floor, acked)
	q.mu.Unlock()
	return op.wait()
}

// snapshotLocked captures the queue's acknowledgement state.
func (q *Queue) snapshotLocked(now int64) snapshot {
	s := snapshot{Queue: q.name, Incarnation: q.meta.Incarnation, CreatedMs: now, Floor: q.floorLocked(), End: q.loadPos}
	for _, m := range q.pending {
		if m.state != stAcked {
			s.Unacked = append(s.Unacked, m.off)
		}
	}
	for off := range q.ackedAhead {
		s.AckedAhead = append(s.AckedAhead, off)
	}
	slices.Sort(s.AckedAhead)
	return s
}

// CreateSnapshot records the queue's acknowledgement state under name (unique per
// storage-core). Errors: ErrInvalidArgument (name), ErrSnapshotExists, ErrDetached.
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
	s := q.snapshotLocked(q.m.nowMs())
	q.mu.Unlock()
	err := q.m.db.update(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bktSnapshots)
		if sb.Get([]byte(name)) != nil {
			return errSnapshotTaken
		}
		if stateBucket(tx, q.name) == nil {
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

// snapshotFloors returns the lowest snapshot floor of each queue (retention keeps
// those records).
func (m *Manager) snapshotFloors() map[string]int64 {
	out := map[string]int64{}
	_ = m.db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bktSnapshots).ForEach(func(_, v []byte) error {
			var s snapshot
			if json.Unmarshal(v, &s) == nil {
				if f, ok := out[s.Queue]; !ok || s.Floor < f {
					out[s.Queue] = s.Floor
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
	name := q.name
	return q.m.db.enqueue(func(tx *bolt.Tx) error {
		if stateBucket(tx, name) == nil {
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
	}
	q.wakeLocked()
	q.mu.Unlock()
	return q.Info(), nil
}
