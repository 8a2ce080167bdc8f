package queue

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// Unbind removes the queue's binding of source: no record of source enters the queue
// afterwards; messages already copied stay and are delivered as before. The queue's
// meta without the binding and the removal of its cursor commit in one state
// transaction before Unbind returns, so a restart does not bring the binding back.
// The pumps stop first (a copy in flight finishes: its records were read before the
// unbind) and the other bindings' pumps start again. It reports false when the queue
// has no such binding (also a detached queue). Errors: ErrNotFound (no queue).
func (m *Manager) Unbind(name, source string) (bool, error) {
	q, err := m.Get(name)
	if err != nil {
		return false, err
	}
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	q.mu.Lock()
	deleted, has := q.deleted, false
	for _, b := range q.bindings {
		has = has || b.source == source
	}
	q.mu.Unlock()
	if deleted {
		return false, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if !has {
		return false, nil
	}
	q.stopPumps() // enqueues the pumps' final checkpoints, before the write below
	q.mu.Lock()
	meta := q.meta
	meta.Bindings = nil
	for _, bm := range q.meta.Bindings {
		if bm.Source != source {
			meta.Bindings = append(meta.Bindings, bm)
		}
	}
	var keep []*binding
	for _, b := range q.bindings {
		if b.source != source {
			keep = append(keep, b)
		}
	}
	op := q.m.db.enqueue(func(tx *bolt.Tx) error {
		s := stateBucket(tx, name)
		if s == nil {
			return nil
		}
		if err := s.Bucket(bktCursors).Delete([]byte(source)); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bktQueues), name, meta)
	})
	q.meta = meta
	q.bindings = keep
	q.pumpStop = make(chan struct{})
	q.mu.Unlock()
	q.startPumps()
	if err := op.wait(); err != nil {
		return false, err
	}
	m.log.Info("queue unbound", zap.String("queue", name), zap.String("source", source))
	return true, nil
}
