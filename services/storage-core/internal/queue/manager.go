// Package queue is storage-core's queue engine: queue channels (a log of their own
// plus delivery state) fed from source logs through bindings, delivered under leases
// with acks, nacks, retry backoff, dead-lettering, ordering lanes, snapshots and seek.
//
// A queue's messages are the records of its log (a store channel of KindQueue), so
// they share the log engine's durability and recovery. Delivery state (ack floor and
// acked offsets, delivery counts, binding checkpoints, snapshots) lives in one bbolt
// file committed with group commit; an Ack returns only after its commit. Leases are
// in memory: after a restart every unacked message is available again (at-least-once).
package queue

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// Options configure a Manager.
type Options struct {
	// Now is the clock for leases, backoff and retention (tests); nil = time.Now.
	Now func() time.Time
	// MaxLoaded bounds the unacked messages a queue keeps decoded in memory; 0 =
	// 100000. Leased messages count until acked, and clients ack in batches (the Go
	// Pub/Sub client every 100 ms), so the bound must hold what a queue delivers in an
	// ack interval: at 10000 it held one queue to about 100k messages/s.
	MaxLoaded int
	// MaxUnleased bounds the loaded messages not under a lease; 0 = 10000. A queue
	// with a backlog and no consumer keeps this many decoded, not MaxLoaded: only
	// leases (waiting for their acks) fill the window past it, and, in an ordered
	// queue, messages waiting behind an earlier unacked one of their ordering key, so
	// one key's backlog does not hold the other keys' messages out of the window.
	MaxUnleased int
	// MaxLoadedBytes bounds their bytes (key, value, headers); 0 = 64 MiB. At least one
	// message is loaded whatever its size.
	MaxLoadedBytes int64
	// Metrics; nil creates unregistered ones.
	Metrics *Metrics
	// MaintenanceInterval is how often retention runs (unacked messages past
	// message_retention_ms dropped, the queue log trimmed); 0 = 30 s; < 0 disables the
	// loop (tests call Maintain).
	MaintenanceInterval time.Duration
	// CatchUpMax bounds how long ReceiveCatchUp waits for the bindings; 0 = 100 ms
	// (DefaultCatchUpMax).
	CatchUpMax time.Duration
}

// Queue log settings: the queue engine decides what to keep, so the log itself keeps
// records until the engine moves its start (retention of acked and expired messages).
//
// The queue log takes batches of any size: its bindings are its only writers, and a
// source record larger than a bound here (a source with a larger max_message_bytes,
// or a compressed batch that decodes larger) would fail its copy forever and wedge
// the binding, so no later record would reach the queue.
const (
	queueLogSegmentBytes = 64 << 20
	queueLogMaxBatch     = math.MaxInt32
)

// Manager holds every queue of one data directory.
type Manager struct {
	st   *store.Store
	db   *stateDB
	log  *zap.Logger
	opts Options

	// adminMu serializes create, delete, detach, config and snapshot changes.
	adminMu sync.Mutex
	mu      sync.RWMutex
	queues  map[string]*Queue
	// fenced: queues whose log failed to load at start; they answer its error.
	fenced map[string]error
	closed bool

	leaseBase uint64
	stop      chan struct{}
	wg        sync.WaitGroup
}

// Open opens the state file at path and every queue of st, and starts the retention
// loop. A queue log without state (a create interrupted by a crash) is removed. Lease
// expiry is swept from outside (Sweep, called through QueueService.SweepLeases by the
// one coordinator holding the sweep lock); the engine is correct without it.
func Open(st *store.Store, path string, opts Options, log *zap.Logger) (*Manager, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxLoaded <= 0 {
		opts.MaxLoaded = 100000
	}
	if opts.MaxUnleased <= 0 {
		opts.MaxUnleased = 10000
	}
	if opts.MaxLoadedBytes <= 0 {
		opts.MaxLoadedBytes = 64 << 20
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.MaintenanceInterval == 0 {
		opts.MaintenanceInterval = 30 * time.Second
	}
	if opts.CatchUpMax <= 0 {
		opts.CatchUpMax = DefaultCatchUpMax
	}
	db, err := openStateDB(path, opts.Metrics)
	if err != nil {
		return nil, err
	}
	m := &Manager{st: st, db: db, log: log, opts: opts, queues: map[string]*Queue{}, fenced: map[string]error{},
		leaseBase: uint64(time.Now().UnixNano()), stop: make(chan struct{})}
	var metas []queueMeta
	err = db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bktQueues).ForEach(func(k, v []byte) error {
			var qm queueMeta
			if err := json.Unmarshal(v, &qm); err != nil {
				return fmt.Errorf("queue %s: %w", k, err)
			}
			metas = append(metas, qm)
			return nil
		})
	})
	if err != nil {
		_ = db.close()
		return nil, err
	}
	var legacyShares []*Queue
	for _, qm := range metas {
		if qm.Share != nil {
			if err := m.openShare(qm); err != nil {
				m.closeQueues()
				_ = db.close()
				return nil, fmt.Errorf("open share partition %s: %w", qm.Name, err)
			}
			continue
		}
		l, err := st.Get(qm.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			// The log exists but failed to load (fenced): keep its state for a restart
			// after the repair; the queue answers that error meanwhile.
			log.Error("queue log unavailable; queue fenced", zap.String("queue", qm.Name), zap.Error(err))
			m.fenced[qm.Name] = err
			continue
		}
		if err != nil || l.Kind() != store.KindQueue {
			log.Error("queue state without its queue log; removing the state", zap.String("queue", qm.Name), zap.Error(err))
			_ = m.dropState(qm.Name)
			continue
		}
		if c := l.Config(); c.MaxMessageBytes < queueLogMaxBatch { // queue logs created with a 64 MiB bound
			c.MaxMessageBytes = queueLogMaxBatch
			if err := l.UpdateConfig(c); err != nil {
				log.Warn("raise the queue log's batch limit", zap.String("queue", qm.Name), zap.Error(err))
			}
		}
		q, err := m.openQueue(qm, l)
		if err != nil {
			m.closeQueues()
			_ = db.close()
			return nil, fmt.Errorf("open queue %s: %w", qm.Name, err)
		}
		m.queues[qm.Name] = q
		if _, _, _, ok := channel.ParseKafkaSharePartition(qm.Name); ok {
			legacyShares = append(legacyShares, q)
		}
	}
	for _, q := range legacyShares {
		if err := m.migrateShare(q); err != nil {
			m.closeQueues()
			_ = db.close()
			return nil, fmt.Errorf("migrate share partition %s: %w", q.name, err)
		}
	}
	for _, l := range st.List("") {
		if l.Kind() != store.KindQueue || m.queues[l.Name()] != nil {
			continue
		}
		if l.HighWatermark() > 0 {
			// Not an interrupted create (whose log is empty): never drop records here.
			log.Error("queue log without queue state kept; DeleteQueue or DeleteChannel removes it", zap.String("queue", l.Name()),
				zap.Int64("high_watermark", l.HighWatermark()))
			continue
		}
		log.Warn("removing empty queue log without queue state (interrupted create)", zap.String("queue", l.Name()))
		if err := st.Delete(l.Name(), true); err != nil {
			log.Error("remove orphaned queue log", zap.String("queue", l.Name()), zap.Error(err))
		}
	}
	for _, q := range m.queues {
		q.startPumps()
	}
	if opts.MaintenanceInterval > 0 {
		m.wg.Add(1)
		go m.loop(opts.MaintenanceInterval, m.Maintain)
	}
	log.Info("queues opened", zap.Int("queues", len(m.queues)))
	return m, nil
}

func (m *Manager) nowMs() int64 { return m.opts.Now().UnixMilli() }

func (m *Manager) loop(every time.Duration, fn func()) {
	defer m.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// Maintain applies retention to every queue once (the loop runs it every
// MaintenanceInterval).
func (m *Manager) Maintain() {
	floors := m.snapshotFloors()
	for _, q := range m.list() {
		f, pinned := floors[queueKey{q.name, q.inc}]
		q.maintain(f, pinned)
	}
}

// Sweep ends the expired leases and the finished retry backoffs of every queue once,
// waking the Receives waiting there and dead-lettering what is due, and returns the
// names of the queues it changed, sorted. Nothing else depends on it: leases past
// their deadline count as ended wherever they are read.
func (m *Manager) Sweep() []string {
	var changed []string
	for _, q := range m.list() {
		if q.sweep() {
			changed = append(changed, q.name)
		}
	}
	return changed
}

func (m *Manager) list() []*Queue {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Queue, 0, len(m.queues))
	for _, q := range m.queues {
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// openQueue loads a queue's state and recovers its binding cursors.
func (m *Manager) openQueue(qm queueMeta, l *store.Log) (*Queue, error) {
	q := m.newQueue(qm, l)
	ckpts := map[string][2]int64{}
	hasInc := false
	err := m.db.view(func(tx *bolt.Tx) error {
		b := stateBucket(tx, qm.Name)
		if b == nil {
			return fmt.Errorf("%w: state of %s missing", ErrState, qm.Name)
		}
		if v := b.Get(keyInc); v != nil {
			if len(v) != 8 || keyOff(v) != int64(qm.Incarnation) {
				return fmt.Errorf("%w: state of %s belongs to another incarnation of the queue", ErrState, qm.Name)
			}
			hasInc = true
		}
		if v := b.Get(keyFloor); len(v) == 8 {
			q.loadPos = keyOff(v)
		}
		if v := b.Get(keyDelivered); len(v) == 8 {
			q.deliveredMark = keyOff(v)
		}
		var err error
		if q.ackedAhead, err = readAckedSpans(b.Bucket(bktAcked)); err != nil {
			return err
		}
		if err := b.Bucket(bktAttempts).ForEach(func(k, v []byte) error {
			q.attempts[keyOff(k)] = decodeDelivered(v)
			return nil
		}); err != nil {
			return err
		}
		return b.Bucket(bktCursors).ForEach(func(k, v []byte) error {
			if c, off, ok := decodeCkpt(v); ok {
				ckpts[string(k)] = [2]int64{c, off}
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if !hasInc { // state written before incarnations were recorded
		err := m.db.update(func(tx *bolt.Tx) error {
			return stateBucket(tx, qm.Name).Put(keyInc, offKey(int64(qm.Incarnation)))
		})
		if err != nil {
			return nil, err
		}
	}
	hw := l.HighWatermark()
	// The delivered mark alone may be past hw too: deliveries write it at once, while
	// the binding's checkpoint may be older than the cut records.
	cut := q.loadPos > hw || q.deliveredMark > hw || len(q.ackedAhead) > 0 && q.ackedAhead[len(q.ackedAhead)-1].To > hw
	for off := range q.attempts {
		cut = cut || off >= hw
	}
	for _, c := range ckpts {
		cut = cut || c[1] > hw
	}
	scanFrom := hw
	for _, b := range q.bindings {
		c, ok := ckpts[b.source]
		if !ok {
			c = [2]int64{b.start, 0}
		}
		b.cursor.Store(c[0])
		if cut && c[1] > hw {
			// The checkpoint's cursor may count records the log no longer holds:
			// recover it from the log alone when the log holds a record of this source.
			b.cursor.Store(0)
			c[1] = 0
		}
		scanFrom = min(scanFrom, c[1])
	}
	if err := q.recoverCursors(scanFrom); err != nil {
		return nil, err
	}
	// A source whose tail was cut at start (torn or corrupt last batch) below the
	// cursor: the records appended next take the cut sequences, so the binding must
	// resume at the source's end instead of skipping them. Nothing appends before
	// Open returns, so this is the moment to notice.
	rewound := map[string]int64{}
	for _, b := range q.bindings {
		src, err := m.st.Get(b.source)
		if err != nil || b.srcCreated != 0 && src.CreatedMs() != b.srcCreated {
			continue
		}
		if next := channel.OffsetToSequence(src.HighWatermark()); b.cursor.Load() > next {
			m.log.Error("binding cursor past the source's end (its tail was cut at start); resuming at its end",
				zap.String("queue", qm.Name), zap.String("source", b.source), zap.Int64("cursor", b.cursor.Load()),
				zap.Int64("source_next_sequence", next))
			b.cursor.Store(next)
			rewound[b.source] = next
		}
	}
	if len(rewound) > 0 {
		err := m.db.update(func(tx *bolt.Tx) error {
			for src, cur := range rewound {
				if err := stateBucket(tx, qm.Name).Bucket(bktCursors).Put([]byte(src), encodeCkpt(cur, hw)); err != nil {
					return err
				}
				ckpts[src] = [2]int64{cur, hw}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, b := range q.bindings {
		if b.cursor.Load() == 0 {
			c := ckpts[b.source]
			m.log.Error("queue log cut below the binding checkpoint and no record of the source left in it; resuming at the checkpoint",
				zap.String("queue", qm.Name), zap.String("source", b.source), zap.Int64("cursor", c[0]))
			b.cursor.Store(c[0])
		}
		b.ckptCursor = b.cursor.Load()
		b.setDurable(min(ckpts[b.source][1], hw))
	}
	if cut {
		if err := q.clampStateTo(hw); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// clampStateTo repairs delivery state that reaches past the end of the queue log (hw):
// the log's tail was cut at start (a torn or corrupt tail, e.g. after a power loss
// with --fsync=interval) after acks or checkpoints naming its records were committed.
// Left alone, the records the bindings append next would take those offsets and be
// taken as acked: silently lost. The ack floor, acked spans and delivery counts are
// cut to hw and the binding cursors recovered from the log (recoverCursors), so
// records of the cut tail are copied again (delivered again if they were acked:
// at-least-once, never lost).
func (q *Queue) clampStateTo(hw int64) error {
	q.m.log.Error("queue delivery state is ahead of its log (the log's tail was cut); acks past the log's end dropped, bindings rewound",
		zap.String("queue", q.name), zap.Int64("floor", q.loadPos), zap.Int64("log_end", hw))
	q.loadPos = min(q.loadPos, hw)
	// Records copied again past hw are new messages: the mark must not cover them.
	q.deliveredMark = min(q.deliveredMark, hw)
	for i := len(q.ackedAhead) - 1; i >= 0; i-- {
		if q.ackedAhead[i].From >= hw {
			q.ackedAhead = q.ackedAhead[:i]
		} else if q.ackedAhead[i].To > hw {
			q.ackedAhead[i].To = hw
		}
	}
	for off := range q.attempts {
		if off >= hw {
			delete(q.attempts, off)
		}
	}
	floor, acked, mark := q.loadPos, append(spans(nil), q.ackedAhead...), q.deliveredMark
	cursors := map[string]int64{}
	for _, b := range q.bindings {
		cursors[b.source] = b.cursor.Load()
	}
	return q.m.db.update(func(tx *bolt.Tx) error {
		b := incStateBucket(tx, q.name, q.inc)
		if b == nil {
			return nil
		}
		if err := b.Put(keyFloor, offKey(floor)); err != nil {
			return err
		}
		if err := b.Put(keyDelivered, offKey(mark)); err != nil {
			return err
		}
		ab := b.Bucket(bktAcked)
		if err := clearBucket(ab); err != nil {
			return err
		}
		for _, sp := range acked {
			if err := ab.Put(offKey(sp.From), offKey(sp.To)); err != nil {
				return err
			}
		}
		at := b.Bucket(bktAttempts)
		var drop [][]byte
		c := at.Cursor()
		for k, _ := c.Seek(offKey(hw)); k != nil; k, _ = c.Next() {
			drop = append(drop, append([]byte(nil), k...))
		}
		for _, k := range drop {
			if err := at.Delete(k); err != nil {
				return err
			}
		}
		for src, cur := range cursors {
			if err := b.Bucket(bktCursors).Put([]byte(src), encodeCkpt(cur, hw)); err != nil {
				return err
			}
		}
		return nil
	})
}

// recoverCursors moves each binding's cursor past the last record it copied into the
// queue log at or after offset from.
func (q *Queue) recoverCursors(from int64) error {
	if len(q.bindings) == 0 {
		return nil
	}
	by := map[string]*binding{}
	for _, b := range q.bindings {
		by[b.source] = b
	}
	from = max(from, q.log.LogStart())
	for from < q.log.HighWatermark() {
		recs, next, err := q.log.ReadRecords(from, 1000, 8<<20)
		if err != nil {
			return err
		}
		for _, r := range recs {
			mm := q.newMsg(r)
			if b := by[mm.source]; b != nil && mm.srcSeq+1 > b.cursor.Load() {
				b.cursor.Store(mm.srcSeq + 1)
			}
		}
		if next <= from {
			break
		}
		from = next
	}
	return nil
}

func (m *Manager) newQueue(qm queueMeta, l *store.Log) *Queue {
	q := &Queue{m: m, name: qm.Name, inc: qm.Incarnation, log: l, meta: qm, share: qm.Share,
		attempts: map[int64]delivered{}, leaseSeq: m.leaseBase, notify: make(chan struct{}), pumpStop: make(chan struct{})}
	if qm.Share != nil {
		q.shareCommitted.Store(qm.Share.ReadCommitted)
	}
	for _, bm := range qm.Bindings {
		f, err := ParseFilter(bm.Filter)
		if err != nil {
			m.log.Error("stored binding filter no longer parses; the binding matches nothing", zap.String("queue", qm.Name),
				zap.String("source", bm.Source), zap.Error(err))
			f = matchNone{}
		}
		b := &binding{q: q, source: bm.Source, filterExpr: bm.Filter, filter: f, start: bm.StartSequence, srcCreated: bm.SourceCreatedMs}
		b.committed.Store(bm.ReadCommitted)
		q.bindings = append(q.bindings, b)
	}
	return q
}

type matchNone struct{}

func (matchNone) MatchFunc(func(string) (string, bool)) bool { return false }

func (q *Queue) startPumps() {
	for _, b := range q.bindings {
		q.pumps.Add(1)
		go b.run(q.pumpStop)
	}
}

// stopPumps stops the bindings' goroutines and waits for them.
func (q *Queue) stopPumps() {
	q.mu.Lock()
	select {
	case <-q.pumpStop:
	default:
		close(q.pumpStop)
	}
	q.mu.Unlock()
	q.pumps.Wait()
}

// Get returns a queue: ErrNotFound when missing, ErrNotQueue for a log of that name.
func (m *Manager) Get(name string) (*Queue, error) {
	if err := channel.Validate(name); err != nil {
		return nil, err
	}
	return m.get(name)
}

// get is Get for a name already validated (share partitions: ValidateStored).
func (m *Manager) get(name string) (*Queue, error) {
	m.mu.RLock()
	q, ok := m.queues[name]
	closed := m.closed
	ferr := m.fenced[name]
	m.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if ferr != nil {
		return nil, ferr
	}
	if !ok {
		if l, err := m.st.Get(name); err == nil && l.Kind() == store.KindLog {
			return nil, fmt.Errorf("%w: %s is a log", ErrNotQueue, name)
		}
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return q, nil
}

// Ready reports whether the engine serves (not closed).
func (m *Manager) Ready() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// IsQueue reports whether name is a queue of this manager (fenced ones included).
func (m *Manager) IsQueue(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.queues[name]
	_, fenced := m.fenced[name]
	return ok || fenced
}

func randomIncarnation() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) >> 1
}

// queueLogConfig is the channel config of a queue's log.
func queueLogConfig() store.ChannelConfig {
	return store.ChannelConfig{RetentionMs: -1, SegmentBytes: queueLogSegmentBytes, MaxMessageBytes: queueLogMaxBatch}
}

// checkBindings validates bindings against the store: each source an existing log,
// once; filters parse; start sequences in [1, high watermark + 1] or 0. It returns
// them with start 0 replaced by the source's high watermark + 1, and their filters.
func (m *Manager) checkBindings(queue string, bs []Binding) ([]Binding, []Filter, error) {
	out := make([]Binding, len(bs))
	filters := make([]Filter, len(bs))
	seen := map[string]bool{}
	for i, b := range bs {
		if err := channel.Validate(b.Source); err != nil {
			return nil, nil, fmt.Errorf("binding %d: %w", i, err)
		}
		if b.Source == queue {
			return nil, nil, fmt.Errorf("%w: binding %d: a queue cannot be bound to itself", ErrInvalidArgument, i)
		}
		if seen[b.Source] {
			return nil, nil, fmt.Errorf("%w: binding %d: source %s is bound twice", ErrInvalidArgument, i, b.Source)
		}
		seen[b.Source] = true
		f, err := ParseFilter(b.Filter)
		if err != nil {
			return nil, nil, fmt.Errorf("binding %d filter: %w", i, err)
		}
		l, err := m.st.Get(b.Source)
		if err != nil {
			return nil, nil, fmt.Errorf("binding %d source: %w", i, err)
		}
		if l.Kind() != store.KindLog {
			return nil, nil, fmt.Errorf("%w: binding %d: source %s is a queue, not a log", ErrInvalidArgument, i, b.Source)
		}
		next := channel.OffsetToSequence(l.HighWatermark())
		switch {
		case b.StartSequence < 0 || b.StartSequence > next:
			return nil, nil, fmt.Errorf("%w: binding %d: start_sequence %d outside [1, %d] (0 = new records only)", ErrInvalidArgument, i, b.StartSequence, next)
		case b.StartSequence == 0:
			b.StartSequence = next
		}
		b.Cursor = 0
		b.SourceCreatedMs = l.CreatedMs()
		out[i], filters[i] = b, f
	}
	return out, filters, nil
}

// checkDeadLetter refuses a dead-letter channel that is the queue itself or another
// queue: a queue's log is written by its bindings only, so every dead-lettering would
// fail and the message would cycle through the queue forever. A missing channel is
// accepted (it may be created later; until then the message stays in the queue).
func (m *Manager) checkDeadLetter(queue string, cfg Config) error {
	d := cfg.DeadLetter
	if d == nil {
		return nil
	}
	if d.Channel == queue {
		return fmt.Errorf("%w: dead_letter.channel %s is the queue itself", ErrInvalidArgument, d.Channel)
	}
	if l, err := m.st.Get(d.Channel); err == nil && l.Kind() == store.KindQueue {
		return fmt.Errorf("%w: dead_letter.channel %s is a queue, not a log", ErrInvalidArgument, d.Channel)
	}
	return nil
}

// Create creates a queue with its bindings. With ifNotExists an existing queue is
// returned with created=false. Errors: ErrInvalidArgument, ErrExists (also for a log
// of that name), store.ErrNotFound (a missing source), channel name errors, ErrState.
func (m *Manager) Create(name string, cfg Config, bindings []Binding, ifNotExists bool) (*Queue, bool, error) {
	if err := channel.Validate(name); err != nil {
		return nil, false, err
	}
	return m.create(name, cfg, bindings, ifNotExists)
}

// lookupOpen returns queue name and whether it exists. Errors: ErrClosed once the
// manager is closed.
func (m *Manager) lookupOpen(name string) (*Queue, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	q, ok := m.queues[name]
	return q, ok, nil
}

// create is Create for a name already validated.
func (m *Manager) create(name string, cfg Config, bindings []Binding, ifNotExists bool) (*Queue, bool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, false, err
	}
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	q, ok, err := m.lookupOpen(name)
	if err != nil {
		return nil, false, err
	}
	if ok {
		if ifNotExists {
			return q, false, nil
		}
		return nil, false, fmt.Errorf("%w: %s", ErrExists, name)
	}
	if l, err := m.st.Get(name); err == nil {
		if l.Kind() == store.KindQueue {
			return nil, false, fmt.Errorf("%w: a queue log named %s without queue state exists (left by an interrupted delete; DeleteQueue removes it)", ErrExists, name)
		}
		return nil, false, fmt.Errorf("%w: a log named %s exists", ErrExists, name)
	}
	if err := m.checkDeadLetter(name, cfg); err != nil {
		return nil, false, err
	}
	bs, _, err := m.checkBindings(name, bindings)
	if err != nil {
		return nil, false, err
	}
	l, _, err := m.st.CreateKind(name, store.KindQueue, queueLogConfig(), false)
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			return nil, false, fmt.Errorf("%w: %s", ErrExists, name)
		}
		return nil, false, err
	}
	qm := queueMeta{Name: name, Config: cfg, Bindings: bs, CreatedMs: m.nowMs(), Incarnation: randomIncarnation()}
	err = m.db.update(func(tx *bolt.Tx) error {
		if err := putJSON(tx.Bucket(bktQueues), name, qm); err != nil {
			return err
		}
		b, err := createStateBucket(tx, name)
		if err != nil {
			return err
		}
		if err := b.Put(keyFloor, offKey(0)); err != nil {
			return err
		}
		if err := b.Put(keyInc, offKey(int64(qm.Incarnation))); err != nil {
			return err
		}
		for _, bd := range bs {
			if err := b.Bucket(bktCursors).Put([]byte(bd.Source), encodeCkpt(bd.StartSequence, 0)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = m.st.Delete(name, true)
		return nil, false, err
	}
	q = m.newQueue(qm, l)
	for _, b := range q.bindings {
		b.cursor.Store(b.start)
		b.ckptCursor = b.start
		b.setDurable(0)
	}
	m.mu.Lock()
	m.queues[name] = q
	m.mu.Unlock()
	q.startPumps()
	m.log.Info("queue created", zap.String("queue", name), zap.Int("bindings", len(bs)))
	return q, true, nil
}

// Delete removes a queue, its bindings, delivery state and snapshots, then its log.
// Missing: ErrNotFound unless ifExists (ErrNotQueue for a log of that name).
func (m *Manager) Delete(name string, ifExists bool) error {
	if err := channel.Validate(name); err != nil {
		return err
	}
	return m.delete(name, ifExists)
}

// delete is Delete for a name already validated.
func (m *Manager) delete(name string, ifExists bool) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	m.mu.Lock()
	q, ok := m.queues[name]
	if ok {
		delete(m.queues, name)
	}
	_, fenced := m.fenced[name]
	delete(m.fenced, name)
	m.mu.Unlock()
	if fenced {
		if err := m.dropState(name); err != nil {
			return err
		}
		return m.st.Delete(name, true)
	}
	if !ok {
		l, err := m.st.Get(name)
		if err == nil && l.Kind() == store.KindLog {
			return fmt.Errorf("%w: %s is a log", ErrNotQueue, name)
		}
		if err == nil && l.Kind() == store.KindQueue {
			// A queue log without state: a delete cut short by a crash (state
			// removed, log not yet). Without this the name could never be created
			// again through QueueService.
			m.log.Warn("removing queue log without queue state", zap.String("queue", name))
			return m.st.Delete(name, true)
		}
		if ifExists {
			return nil
		}
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	q.stopPumps()
	q.mu.Lock()
	q.deleted = true
	q.wakeLocked()
	q.mu.Unlock()
	if err := m.dropState(name); err != nil {
		return err
	}
	if q.share == nil { // a share partition's log is its Kafka partition's, not its own
		if err := m.st.Delete(name, true); err != nil {
			return err
		}
	}
	m.log.Info("queue deleted", zap.String("queue", name))
	return nil
}

// DeleteChannel deletes a channel of any kind (StorageService.DeleteChannel): a queue
// (or a queue log left without state) as Delete does, a log through the store, under
// adminMu, so a queue being created under that name meanwhile is never cut from its
// log. A Kafka partition's log takes every share group's share-partition state of it
// along (deleteSharePartitionsOf), as Kafka drops a deleted topic's share state: those
// queues are named by topic name, and a topic re-created with that name would
// otherwise inherit them (their cursors past the new log's offsets, old records in
// flight).
func (m *Manager) DeleteChannel(name string, ifExists bool) error {
	if err := channel.Validate(name); err != nil {
		return err
	}
	m.adminMu.Lock()
	l, err := m.st.Get(name)
	if m.IsQueue(name) || err == nil && l.Kind() == store.KindQueue {
		m.adminMu.Unlock()
		return m.Delete(name, ifExists)
	}
	err = m.st.Delete(name, ifExists)
	m.adminMu.Unlock()
	if err != nil {
		return err
	}
	return m.deleteSharePartitionsOf(name)
}

// deleteSharePartitionsOf deletes the share-partition queues (every group's) of the
// Kafka partition whose log log was. Called once the log is gone, so none can be
// created for it meanwhile (creating one needs its log) and none is left behind.
func (m *Manager) deleteSharePartitionsOf(log string) error {
	topic, partition, ok := channel.ParseKafka(log)
	if !ok {
		return nil
	}
	for _, q := range m.list() {
		if _, t, p, ok := channel.ParseKafkaSharePartition(q.name); ok && t == topic && p == partition {
			if err := m.delete(q.name, true); err != nil {
				return fmt.Errorf("delete share state %s of deleted %s: %w", q.name, log, err)
			}
		}
	}
	return nil
}

// dropState removes a queue's meta and state from the state file, and the snapshots
// of it that restore no other queue (deleteSnapshotsOf).
func (m *Manager) dropState(name string) error {
	return m.db.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bktQueues).Delete([]byte(name)); err != nil {
			return err
		}
		if tx.Bucket(bktState).Bucket([]byte(name)) != nil {
			if err := tx.Bucket(bktState).DeleteBucket([]byte(name)); err != nil {
				return err
			}
		}
		return deleteSnapshotsOf(tx, name)
	})
}

// deleteSnapshotsOf removes the snapshots taken of queue that describe no source: a
// snapshot recording its sources' state can still restore another queue bound to them
// (Pub/Sub: a snapshot outlives its subscription and serves the topic's others) and
// stays until DeleteSnapshot.
func deleteSnapshotsOf(tx *bolt.Tx, queue string) error {
	sb := tx.Bucket(bktSnapshots)
	var keys [][]byte
	err := sb.ForEach(func(k, v []byte) error {
		var s snapshot
		if json.Unmarshal(v, &s) == nil && s.Queue == queue && len(s.Sources) == 0 {
			keys = append(keys, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := sb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the sweep and the bindings and closes the state file. Receives waiting
// end with ErrClosed. The store is closed by its owner afterwards.
func (m *Manager) Close() error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait()
	m.closeQueues()
	return m.db.close()
}

// closeQueues stops the queues' pumps and enqueues the share partitions' delivery
// counts not written yet, committed by the state file's close.
func (m *Manager) closeQueues() {
	for _, q := range m.queues {
		q.stopPumps()
		if q.share != nil {
			q.mu.Lock()
			q.flushShareCountsLocked()
			q.mu.Unlock()
		}
	}
}
