package queue

import (
	"errors"

	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap"
)

// trimAllBytes: when every record of the queue log is acked, the log start moves to
// its end (which rolls a new segment) only once the log holds at least this much.
const trimAllBytes = 16 << 20

// maintain applies retention: unacked messages published (source timestamp) more
// than message_retention_ms ago are dropped, as acked; then the queue log's start
// moves up to the oldest record still needed: the ack floor, or with retain_acked the
// first record within the retention period, and never past a snapshot's floor
// (snapFloor, when pinned). Whole segments below the start are deleted.
func (q *Queue) maintain(snapFloor int64, pinned bool) {
	now := q.m.nowMs()
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return
	}
	cfg := q.meta.Config
	cutoff := now - cfg.retention()
	var expired []*msg
	for _, m := range q.pending {
		if (m.state == stAvailable || m.state == stLeased) && m.rec.Timestamp < cutoff {
			q.ackLocked(m)
			expired = append(expired, m)
		}
	}
	var op *dbOp
	if len(expired) > 0 {
		op = q.commitAcksLocked(expired)
		q.wakeLocked()
	}
	floor := q.floorLocked()
	q.mu.Unlock()
	if err := op.wait(); err != nil {
		q.m.log.Warn("dropping expired messages not persisted", zap.String("queue", q.name), zap.Error(err))
		return
	}
	if len(expired) > 0 {
		q.m.opts.Metrics.Dropped.Add(float64(len(expired)))
		q.m.log.Info("dropped unacked messages past the retention period", zap.String("queue", q.name), zap.Int("messages", len(expired)))
	}
	if q.share != nil {
		return // the partition log is Kafka's: its own retention moves its start
	}
	trim := floor
	if pinned {
		trim = min(trim, snapFloor)
	}
	// Never past a binding's committed checkpoint: its recovery after a crash scans
	// the queue log from there for the records copied since (binding.go).
	q.mu.Lock()
	for _, b := range q.bindings {
		trim = min(trim, b.durableOff())
	}
	q.mu.Unlock()
	hw := q.log.HighWatermark()
	if cfg.RetainAcked {
		off, _, found, err := q.log.LookupTime(cutoff)
		if err != nil {
			return
		}
		if !found {
			off = hw
		}
		trim = min(trim, off)
	}
	if trim <= q.log.LogStart() {
		return
	}
	if trim >= hw {
		if size, _ := q.log.Stats(); size < trimAllBytes {
			return
		}
		trim = hw
	}
	if _, err := q.log.DeleteRecords(trim); err != nil && !errors.Is(err, store.ErrOutOfRange) {
		q.m.log.Warn("trim queue log", zap.String("queue", q.name), zap.Error(err))
	}
}
