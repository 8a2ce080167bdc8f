package queue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// Share partitions (Kafka KIP-932 share groups) are queues of this engine that read
// their Kafka partition's log in place: the state of share group G for Kafka
// partition T-p is the queue channel.KafkaSharePartition(G, T, p) whose log is the
// partition log kafka.T~p itself (queueMeta.Share), with no log and no binding of its
// own, so its offsets are the partition's. As in Kafka's SharePartition, the durable
// state is offsets only: the share-partition start offset (SPSO, the queue's ack
// floor), the offsets acked above it, and the delivery counts; the records are the
// log's, read into the window as it has room and handed out from there. The queue's
// rules are the share partition's:
//   - an acquisition is a lease held by one member (msg.owner), for the acquisition
//     lock duration; the delivery count is the delivery attempt. As in Kafka's
//     SharePartition.acquire it changes memory only: the counts are written with
//     the partition's next state write (an acknowledgement, a release, a lock's
//     expiry, an archive; Queue.shareCounts), so after a crash the records acquired
//     since are delivered again with the counts last written. Acknowledgements are
//     answered only once durable;
//   - ACCEPT and REJECT ack (done, never delivered again), RELEASE nacks (available
//     at once, the count kept), RENEW moves the lock's end to now + lock duration, GAP
//     archives;
//   - a message released or whose lock expired after ArchiveAfter deliveries is
//     archived (acked, copied nowhere): group.share.delivery.count.limit;
//   - the SPSO is the offset of the window's first unacked message, or the next
//     offset to load when everything loaded is done; the share-partition end offset
//     (SPEO) is the next offset to load (loadPos);
//   - control records (transaction markers) are never loaded, so never acquired; at
//     share.isolation.level=read_committed the window loads only below the log's
//     last stable offset and skips aborted transactions' records (Kafka archives
//     them: the SPSO moves past them). The level is set again by every share fetch
//     (SetShareIsolation); records loaded before a change keep the level they were
//     loaded at;
//   - the log's own retention and DeleteRecords move its start: loading resumes at
//     the new start (the records below it are gone), and the queue engine's retention
//     never trims the partition log (maintain).
//
// Share partitions of an earlier layout copied the partition's records into a queue
// log of their own through a binding; Open converts each (migrateShare) to this one
// at its start offset.

// Errors of the share verbs.
var (
	// ErrInvalidRecordState: an acknowledged offset is not acquired by the member
	// (Kafka INVALID_RECORD_STATE, 121).
	ErrInvalidRecordState = errors.New("record is not acquired by the member")
)

// Kafka acknowledge types (KIP-932 AcknowledgeType, storagev1.ShareAcknowledgeType).
const (
	ShareGap     uint8 = 0
	ShareAccept  uint8 = 1
	ShareRelease uint8 = 2
	ShareReject  uint8 = 3
	ShareRenew   uint8 = 4
)

// Share lock bounds, ms (ShareFetchRequest.lock_duration_ms).
const (
	MinShareLockMs = 1000
	MaxShareLockMs = 3_600_000
	// DefaultShareDeliveryLimit is group.share.delivery.count.limit's default.
	DefaultShareDeliveryLimit = 5
	// shareRetentionMs keeps a share partition's messages as long as its log keeps
	// the records (the log's retention decides, as in Kafka), 100 years.
	shareRetentionMs = 100 * 365 * 24 * 3600 * 1000
)

// ShareReset is share.auto.offset.reset: where a new share partition starts; and
// share.isolation.level it starts with.
type ShareReset struct {
	// ReadCommitted: share.isolation.level=read_committed (Binding.ReadCommitted).
	ReadCommitted bool
	// Earliest: the log start; else the high watermark (latest), unless ByDurationMs.
	Earliest bool
	// ByDurationMs > 0: the first record with a timestamp at or after now - it.
	ByDurationMs int64
}

// SharePartition returns the share partition of group for topic-partition, creating
// it when create is set and it is missing (its start from reset; deliveryLimit 0 =
// DefaultShareDeliveryLimit). Errors: store.ErrNotFound (no log for the partition),
// ErrNotFound (missing and not create), channel name errors.
func (m *Manager) SharePartition(group, topic string, partition int32, create bool, reset ShareReset, deliveryLimit int32) (*Queue, error) {
	name, err := channel.KafkaSharePartition(group, topic, partition)
	if err != nil {
		return nil, err
	}
	q, err := m.get(name)
	if err == nil || !create || !errors.Is(err, ErrNotFound) {
		return q, err
	}
	src := channel.KafkaPartition(topic, partition)
	l, err := m.st.Get(src)
	if err != nil {
		return nil, err
	}
	if l.Kind() != store.KindLog {
		return nil, fmt.Errorf("%w: %s is not a log", store.ErrNotFound, src)
	}
	start := l.HighWatermark()
	switch {
	case reset.ByDurationMs > 0:
		off, _, found, err := l.LookupTime(m.nowMs() - reset.ByDurationMs)
		if err != nil {
			return nil, err
		}
		if found {
			start = off
		}
	case reset.Earliest:
		start = l.LogStart()
	}
	return m.createShare(name, shareConfig(deliveryLimit), l, start, reset.ReadCommitted)
}

// shareMeta describes a share partition's partition log (queueMeta.Share).
type shareMeta struct {
	// Source is the partition log (channel.KafkaPartition); SourceCreatedMs its
	// creation time: a log deleted and created again is another log, whose share
	// state starts anew.
	Source          string `json:"source"`
	SourceCreatedMs int64  `json:"source_created_ms"`
	// ReadCommitted is the isolation level the partition was created at
	// (share.isolation.level); after a restart it applies until a share fetch sets
	// the group's (SetShareIsolation).
	ReadCommitted bool `json:"read_committed,omitempty"`
}

// createShare creates share partition name reading src from start (clamped to the
// log's start and high watermark), or returns the one that exists. Errors:
// store.ErrNotFound (src deleted meanwhile), ErrClosed, ErrState.
func (m *Manager) createShare(name string, cfg Config, src *store.Log, start int64, committed bool) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	if q, ok, err := m.lookupOpen(name); err != nil || ok {
		return q, err
	}
	// Under adminMu a partition log's deletion (DeleteChannel) is either done, and
	// src is no longer the store's, or not begun, and takes this state along.
	if cur, err := m.st.Get(src.Name()); err != nil || cur != src {
		return nil, fmt.Errorf("%w: %s was deleted", store.ErrNotFound, src.Name())
	}
	start = min(max(start, src.LogStart()), src.HighWatermark())
	qm := queueMeta{Name: name, Config: cfg, CreatedMs: m.nowMs(), Incarnation: randomIncarnation(),
		Share: &shareMeta{Source: src.Name(), SourceCreatedMs: src.CreatedMs(), ReadCommitted: committed}}
	err := m.db.update(func(tx *bolt.Tx) error {
		if err := putJSON(tx.Bucket(bktQueues), name, qm); err != nil {
			return err
		}
		b, err := createStateBucket(tx, name)
		if err != nil {
			return err
		}
		if err := b.Put(keyFloor, offKey(start)); err != nil {
			return err
		}
		if err := b.Put(keyDelivered, offKey(start)); err != nil {
			return err
		}
		return b.Put(keyInc, offKey(int64(qm.Incarnation)))
	})
	if err != nil {
		return nil, err
	}
	q := m.newQueue(qm, src)
	q.loadPos, q.deliveredMark = start, start
	m.mu.Lock()
	m.queues[name] = q
	m.mu.Unlock()
	m.log.Info("share partition created", zap.String("queue", name), zap.Int64("start_offset", start))
	return q, nil
}

// openShare opens a share partition's state at start. Its partition log deleted (or
// deleted and created again) while storage-core was down: the state is removed, as a
// topic's deletion removes it. A log that failed to load fences the partition.
func (m *Manager) openShare(qm queueMeta) error {
	l, err := m.st.Get(qm.Share.Source)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Error("share partition's log unavailable; share partition fenced", zap.String("queue", qm.Name), zap.Error(err))
		m.fenced[qm.Name] = err
		return nil
	}
	if err != nil || l.Kind() != store.KindLog || l.CreatedMs() != qm.Share.SourceCreatedMs {
		m.log.Warn("share partition's log was deleted; removing its state", zap.String("queue", qm.Name), zap.String("log", qm.Share.Source))
		return m.dropState(qm.Name)
	}
	q, err := m.openQueue(qm, l)
	if err != nil {
		return err
	}
	m.queues[qm.Name] = q
	return nil
}

// migrateShare converts a share partition of the earlier layout (a queue log of its
// own filled by a binding) to one reading its partition log in place, at its start
// offset, keeping its delivery limit and isolation level; the old queue log is
// deleted. Acknowledgements above the start offset and delivery counts are not
// carried over: those records are delivered again, as Kafka's share consumers
// tolerate (delivery is at least once). A partition log that exists but failed to
// load fences the share partition, its state kept for the next open; one that is
// gone (or replaced) takes the state along. Called at Open only.
func (m *Manager) migrateShare(q *Queue) error {
	var src *store.Log
	committed := false
	if len(q.bindings) == 1 {
		b := q.bindings[0]
		committed = b.committed.Load()
		l, err := m.st.Get(b.source)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			m.log.Error("share partition's log unavailable; share partition fenced", zap.String("queue", q.name), zap.Error(err))
			delete(m.queues, q.name)
			m.fenced[q.name] = err
			return nil
		}
		if err == nil && l.Kind() == store.KindLog && (b.srcCreated == 0 || l.CreatedMs() == b.srcCreated) {
			src = l
		}
	}
	var start int64
	if src != nil {
		start = q.legacyShareStart()
	}
	if err := m.delete(q.name, true); err != nil {
		return err
	}
	if src == nil {
		m.log.Warn("share partition of the earlier layout without its partition log removed", zap.String("queue", q.name))
		return nil
	}
	if _, err := m.createShare(q.name, shareConfig(q.meta.Config.ArchiveAfter), src, start, committed); err != nil {
		return err
	}
	m.log.Warn("share partition converted to offsets-only state; records in flight above the start offset are delivered again",
		zap.String("queue", q.name), zap.Int64("start_offset", start))
	return nil
}

// legacyShareStart is the start offset of a share partition of the earlier layout
// (one binding): the source offset of its window's first unacked message, or its
// binding's cursor when everything copied is done.
func (q *Queue) legacyShareStart() int64 {
	q.fill()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.pending {
		if m.state != stAcked {
			return channel.SequenceToOffset(m.srcSeq)
		}
	}
	return channel.SequenceToOffset(q.bindings[0].cursor.Load())
}

func shareConfig(deliveryLimit int32) Config {
	if deliveryLimit <= 0 {
		deliveryLimit = DefaultShareDeliveryLimit
	}
	return Config{MessageRetentionMs: shareRetentionMs, ArchiveAfter: deliveryLimit}
}

// ShareAlter sets the start offset of group's share partition for topic-partition
// (Kafka AlterShareGroupOffsets), clamped to [log start, high watermark]: the state
// is created again, every in-flight record forgotten. It returns the offset set.
func (m *Manager) ShareAlter(group, topic string, partition int32, startOffset int64) (int64, error) {
	name, err := channel.KafkaSharePartition(group, topic, partition)
	if err != nil {
		return 0, err
	}
	if startOffset < 0 {
		return 0, fmt.Errorf("%w: start offset %d < 0", ErrInvalidArgument, startOffset)
	}
	src := channel.KafkaPartition(topic, partition)
	l, err := m.st.Get(src)
	if err != nil {
		return 0, err
	}
	if l.Kind() != store.KindLog {
		return 0, fmt.Errorf("%w: %s is not a log", store.ErrNotFound, src)
	}
	limit, committed := int32(0), false
	if q, err := m.get(name); err == nil {
		q.mu.Lock()
		limit = q.meta.Config.ArchiveAfter
		q.mu.Unlock()
		committed = q.shareCommitted.Load()
	}
	if err := m.delete(name, true); err != nil {
		return 0, err
	}
	off := min(max(startOffset, l.LogStart()), l.HighWatermark())
	if _, err := m.createShare(name, shareConfig(limit), l, off, committed); err != nil {
		return 0, err
	}
	return off, nil
}

// ShareDelete removes group's share partition for topic-partition, if any.
func (m *Manager) ShareDelete(group, topic string, partition int32) error {
	name, err := channel.KafkaSharePartition(group, topic, partition)
	if err != nil {
		return err
	}
	return m.delete(name, true)
}

// SharePartitionID names a share partition: topic and partition.
type SharePartitionID struct {
	Topic     string
	Partition int32
}

// ShareList returns group's share partitions, by topic then partition.
func (m *Manager) ShareList(group string) []SharePartitionID {
	prefix, key := channel.KafkaShareGroupPrefix(group), channel.KafkaShareGroupKey(group)
	var out []SharePartitionID
	for _, q := range m.list() {
		if !strings.HasPrefix(q.name, prefix) {
			continue
		}
		if k, t, p, ok := channel.ParseKafkaSharePartition(q.name); ok && k == key {
			out = append(out, SharePartitionID{t, p})
		}
	}
	slices.SortFunc(out, func(a, b SharePartitionID) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// SetShareIsolation sets the share partition's isolation level for the records its
// window loads from now on (share.isolation.level; the group config may change
// while the partition exists). Kept in memory: after a restart the level the
// partition was created with applies until the next share fetch sets it again.
func (q *Queue) SetShareIsolation(readCommitted bool) { q.shareCommitted.Store(readCommitted) }

// ShareState returns the share partition's start offset and lag: the records from the
// start offset up to the source's high watermark not yet done.
func (q *Queue) ShareState() (startOffset, lag int64, err error) {
	q.fill()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return 0, 0, err
	}
	if q.share == nil {
		return 0, 0, fmt.Errorf("%w: %s is not a share partition", ErrInvalidArgument, q.name)
	}
	startOffset = q.loadPos
	for _, m := range q.pending {
		if m.state != stAcked {
			startOffset = m.off
			break
		}
	}
	hw := max(q.log.HighWatermark(), q.loadPos)
	return startOffset, max(int64(len(q.pending)-q.tombs)+hw-q.loadPos-q.ackedAhead.count(q.loadPos, hw), 0), nil
}

// ShareRecord is one acquired record: the source record (Offset the source offset)
// and its delivery count.
type ShareRecord struct {
	Record        store.Record
	DeliveryCount int32
}

// ShareFetchArgs are ShareFetch's.
type ShareFetchArgs struct {
	Member string
	// MaxRecords over all partitions, >= 1; MaxBytes 0 = no limit.
	MaxRecords int
	MaxBytes   int64
	// LockMs is the acquisition lock, MinShareLockMs..MaxShareLockMs.
	LockMs int64
	// Wait is the long poll while nothing is available.
	Wait time.Duration
	// Start is the partition acquisition starts at (rotated for fairness).
	Start int
}

// HoldCommits keeps the state file's committer from starting a commit until release
// is called (and at most a few milliseconds): the commits queued meanwhile (a share
// request's acknowledgements of several partitions) share one fdatasync. release
// must be called before waiting for any of them; calling it again does nothing.
func (m *Manager) HoldCommits() (release func()) { return m.db.hold() }

// ShareFetch acquires records of the share partitions qs for a.Member, waiting up to
// a.Wait while none is available in any. It returns, per queue, its records in offset
// order and its error (deleted, storage failure); err is ctx's or ErrClosed. As in
// Kafka's SharePartition.acquire, the acquisitions change memory only and nothing is
// waited for: their delivery counts go with the partition's next state write
// (Queue.shareCounts).
func (m *Manager) ShareFetch(ctx context.Context, qs []*Queue, a ShareFetchArgs) (recs [][]ShareRecord, errs []error, err error) {
	if a.Member == "" || a.MaxRecords < 1 || a.MaxBytes < 0 || a.LockMs < MinShareLockMs || a.LockMs > MaxShareLockMs || a.Wait < 0 {
		return nil, nil, fmt.Errorf("%w: member %q, max records %d, max bytes %d, lock %d ms (%d..%d), wait %v",
			ErrInvalidArgument, a.Member, a.MaxRecords, a.MaxBytes, a.LockMs, MinShareLockMs, MaxShareLockMs, a.Wait)
	}
	recs, errs = make([][]ShareRecord, len(qs)), make([]error, len(qs))
	end := time.Now().Add(a.Wait)
	cases := make([]reflect.SelectCase, 0, len(qs)+3)
	for {
		total, size := 0, int64(0)
		cases = cases[:0]
		var next int64
		now := m.nowMs()
		for k := range qs {
			i := (a.Start + k) % len(qs)
			if errs[i] != nil {
				continue
			}
			q := qs[i]
			if total >= a.MaxRecords || a.MaxBytes > 0 && size >= a.MaxBytes {
				break
			}
			if q.share != nil {
				// New records of the partition log are loaded by the next fill
				// (a waiting fetch's): its change wakes the wait, taken before
				// the fill so none is missed.
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.log.Changed())})
			}
			q.tryFill()
			out, ch, ev, err := q.shareAcquire(now, a.Member, a.MaxRecords-total, max(a.MaxBytes-size, 0), a.LockMs)
			if err != nil {
				errs[i] = err
				continue
			}
			for _, r := range out {
				size += int64(len(r.Record.Key) + len(r.Record.Value))
			}
			total += len(out)
			recs[i] = out
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
			if ev > 0 && (next == 0 || ev < next) {
				next = ev
			}
		}
		remaining := time.Until(end)
		if total > 0 || remaining <= 0 || len(cases) == 0 {
			return recs, errs, nil
		}
		if next > 0 {
			remaining = min(remaining, time.Duration(next-now)*time.Millisecond)
		}
		t := time.NewTimer(remaining)
		cases = append(cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.stop)})
		chosen, _, _ := reflect.Select(cases)
		t.Stop()
		switch chosen {
		case len(cases) - 2:
			return nil, nil, ctx.Err()
		case len(cases) - 1:
			return nil, nil, ErrClosed
		}
	}
}

// shareAcquire leases up to maxMsgs available messages to member for lockMs, without
// waiting, in memory only: the delivery counts go with the partition's next state
// write (leaseLocked). It also returns the queue's change channel and the next time
// (ms) a lock ends or a backoff passes (0: none), for a waiting ShareFetch.
func (q *Queue) shareAcquire(now int64, member string, maxMsgs int, maxBytes, lockMs int64) ([]ShareRecord, <-chan struct{}, int64, error) {
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, nil, 0, err
	}
	out, dl, next, _, _ := q.leaseLocked(now, maxMsgs, maxBytes, lockMs, false)
	recs := make([]ShareRecord, len(out))
	for i, d := range out {
		if a, ok := parseAckID(d.AckID); ok {
			if m := q.find(a.off); m != nil {
				m.owner = member
			}
		}
		r := d.Record
		r.Offset = channel.SequenceToOffset(d.SourceSeq)
		recs[i] = ShareRecord{Record: r, DeliveryCount: d.Attempt}
	}
	ch := q.notify
	q.mu.Unlock()
	if len(dl) > 0 {
		q.deadLetter(dl)
	}
	return recs, ch, next, nil
}

// ShareAckBatch acknowledges the source offsets First..Last (inclusive): all with
// Types[0] when it holds one type, else one type per offset.
type ShareAckBatch struct {
	First, Last int64
	Types       []uint8
}

func (b *ShareAckBatch) typeAt(off int64) uint8 {
	if len(b.Types) == 1 {
		return b.Types[0]
	}
	return b.Types[off-b.First]
}

// CheckShareAcks validates acknowledgement batches: in offset order, not overlapping,
// one type or one per offset, types known (RENEW only when renew is allowed).
// Errors wrap ErrInvalidArgument.
func CheckShareAcks(bs []ShareAckBatch, renew bool) error {
	prev := int64(-1)
	for i, b := range bs {
		switch {
		case b.First < 0 || b.Last < b.First:
			return fmt.Errorf("%w: batch %d: offsets %d..%d", ErrInvalidArgument, i, b.First, b.Last)
		case b.First <= prev:
			return fmt.Errorf("%w: batch %d: offset %d not after the previous batch's %d", ErrInvalidArgument, i, b.First, prev)
		case len(b.Types) != 1 && int64(len(b.Types)) != b.Last-b.First+1:
			return fmt.Errorf("%w: batch %d: %d acknowledge types for %d offsets", ErrInvalidArgument, i, len(b.Types), b.Last-b.First+1)
		}
		for _, t := range b.Types {
			if t > ShareRenew || t == ShareRenew && !renew {
				return fmt.Errorf("%w: batch %d: acknowledge type %d", ErrInvalidArgument, i, t)
			}
		}
		prev = b.Last
	}
	return nil
}

// srcIndexLocked is the index of the first window message whose source sequence is
// at least seq.
func (q *Queue) srcIndexLocked(seq int64) int {
	return sort.Search(len(q.pending), func(i int) bool { return q.pending[i].srcSeq >= seq })
}

// ShareAck applies member's acknowledgements, all or none: ErrInvalidRecordState when
// an offset holding a message is not acquired by member (lock expired, acquired by
// another, never acquired, done), or a batch covers no message at all; GAP offsets
// holding no acquisition of member are skipped. RENEW sets the lock to renewMs from
// now. Durable before it returns. Errors also: ErrInvalidArgument (CheckShareAcks),
// ErrNotFound, ErrState.
func (q *Queue) ShareAck(member string, bs []ShareAckBatch, renewMs int64) error {
	wait, err := q.ShareAckStart(member, bs, renewMs)
	if err != nil {
		return err
	}
	return wait()
}

// ShareAckStart is ShareAck without waiting for durability: the acknowledgements are
// applied in memory and their commit queued; wait returns once it is durable (or its
// ErrState), and only then may the acknowledgement be answered. Acknowledgements of
// several partitions started before the first wait share one commit.
func (q *Queue) ShareAckStart(member string, bs []ShareAckBatch, renewMs int64) (wait func() error, err error) {
	if err := CheckShareAcks(bs, true); err != nil {
		return nil, err
	}
	if renewMs < MinShareLockMs || renewMs > MaxShareLockMs {
		renewMs = 30_000
	}
	type act struct {
		m *msg
		t uint8
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	now := q.m.nowMs()
	var acts []act
	for bi := range bs {
		b := &bs[bi]
		found := false
		lastSeq := channel.OffsetToSequence(b.Last)
		for i := q.srcIndexLocked(channel.OffsetToSequence(b.First)); i < len(q.pending) && q.pending[i].srcSeq <= lastSeq; i++ {
			m := q.pending[i]
			t := b.typeAt(channel.SequenceToOffset(m.srcSeq))
			held := m.state == stLeased && m.deadline > now && m.owner == member
			if !held {
				if t == ShareGap {
					continue
				}
				q.mu.Unlock()
				return nil, fmt.Errorf("%w: offset %d", ErrInvalidRecordState, channel.SequenceToOffset(m.srcSeq))
			}
			acts = append(acts, act{m, t})
			found = true
		}
		if !found && slices.ContainsFunc(b.Types, func(t uint8) bool { return t != ShareGap }) {
			q.mu.Unlock()
			return nil, fmt.Errorf("%w: offsets %d..%d", ErrInvalidRecordState, b.First, b.Last)
		}
	}
	var acked, dl []*msg
	released := false
	for _, a := range acts {
		switch a.t {
		case ShareAccept, ShareReject, ShareGap:
			q.ackLocked(a.m)
			acked = append(acked, a.m)
		case ShareRelease:
			q.m.opts.Metrics.Nacks.Inc()
			if q.expireLocked(a.m, now) {
				dl = append(dl, a.m)
			}
			released = true
		case ShareRenew:
			a.m.deadline = now + renewMs
			q.busyMin = min(q.busyMin, a.m.deadline)
		}
	}
	var ackOp, nackOp *dbOp
	if len(acked) > 0 {
		q.m.opts.Metrics.Acks.Add(float64(len(acked)))
		ackOp = q.commitAcksLocked(acked)
		if q.loadPos < q.log.HighWatermark() {
			q.wakeLocked() // room in the window for records not loaded yet
		}
	}
	if released {
		nackOp = q.flushDirtyLocked()
		q.wakeLocked()
	}
	q.mu.Unlock()
	if len(dl) > 0 {
		q.deadLetter(dl)
	}
	return func() error {
		if err := ackOp.wait(); err != nil {
			return err
		}
		return nackOp.wait()
	}, nil
}

// ShareRelease releases every message member holds (a closed share session, a member
// gone), delivery counts kept; those at the delivery limit are archived. It returns
// how many it released.
func (q *Queue) ShareRelease(member string) (int, error) {
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	now := q.m.nowMs()
	var dl []*msg
	n := 0
	for _, m := range q.pending {
		if m.state == stLeased && m.deadline > now && m.owner == member {
			if q.expireLocked(m, now) {
				dl = append(dl, m)
			}
			n++
		}
	}
	var op *dbOp
	if n > 0 {
		op = q.flushDirtyLocked()
		q.wakeLocked()
	}
	q.mu.Unlock()
	if len(dl) > 0 {
		q.deadLetter(dl)
	}
	return n, op.wait()
}
