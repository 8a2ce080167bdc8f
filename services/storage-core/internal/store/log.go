package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"go.uber.org/zap"
)

// hwMark is the visible end of a log: the offset after the last durable record and
// where it lies (segment base and file position in that segment).
type hwMark struct {
	next    int64
	segBase int64
	pos     int64
}

// Log is one channel: segments, producer state, durability and readers' wake-ups.
// Lock order (see LOCKS.md): Store.adminMu -> Store.mu -> Log.mu -> Log.segMu -> segment.idxMu;
// Log.syncMu is never held while taking Log.mu; notifyMu is a leaf.
type Log struct {
	name string
	dir  string
	st   *Store
	log  *zap.Logger

	// mu guards the writer state below and serializes appends, rolls, config changes,
	// DeleteRecords and retention.
	mu        sync.Mutex
	raw       ChannelConfig // as stored (zeros = default)
	cfg       atomic.Pointer[ChannelConfig]
	createdMs int64
	kind      Kind
	active    *segment
	next      int64 // next offset to assign
	prods     producers
	failed    error // disk failure: fenced until restart
	closed    bool
	dirty     bool // written but not fsynced (interval mode)
	pending   int  // appends since the last fsync (group commit size)

	// segMu guards segs; readers hold RLock while reading files, so files are closed
	// only under Lock.
	segMu sync.RWMutex
	segs  []*segment

	closedFlag atomic.Bool // mirrors closed, for lock-free checks by waiters

	hw       atomic.Pointer[hwMark]
	logStart atomic.Int64
	// txn is the channel's transaction state (txn.go); nil until a transactional batch
	// is seen, so channels without transactions pay nothing for them.
	txn atomic.Pointer[txnState]

	syncMu   sync.Mutex
	syncCond *sync.Cond
	syncing  bool
	durable  int64
	syncErr  error

	notifyMu sync.Mutex
	notify   chan struct{}

	// wal is the channel's state in the node write-ahead log (WAL mode; walmode.go).
	wal walLog
	// clean is the log cleaner's state (compacted channels; cleaner.go).
	clean cleanerLog
	// epochs is the leader-epoch index (raft mode; epochs.go), nil otherwise.
	epochs *epochIndex
}

// Name is the channel name.
func (l *Log) Name() string { return l.name }

// Config returns the stored config (zeros mean default).
func (l *Log) Config() ChannelConfig {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw
}

// Kind is the channel's kind (KindLog or KindQueue).
func (l *Log) Kind() Kind { return l.kind }

// CreatedMs is the creation time, ms since epoch.
func (l *Log) CreatedMs() int64 { return l.createdMs }

// HighWatermark is the offset after the last durable record (Kafka high watermark).
func (l *Log) HighWatermark() int64 { return l.hw.Load().next }

// LogStart is the first retained offset (Kafka log start offset).
func (l *Log) LogStart() int64 { return l.logStart.Load() }

// Stats returns the bytes in segment files and the segment count.
func (l *Log) Stats() (sizeBytes int64, segments int) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	for _, s := range l.segs {
		sizeBytes += s.size.Load()
	}
	return sizeBytes, len(l.segs)
}

// Changed returns a channel closed at the next high watermark advance (or close).
func (l *Log) Changed() <-chan struct{} {
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	return l.notify
}

func (l *Log) wake() {
	l.notifyMu.Lock()
	close(l.notify)
	l.notify = make(chan struct{})
	l.notifyMu.Unlock()
}

func (l *Log) publish(m hwMark) {
	l.hw.Store(&m)
	l.wake()
}

func openLog(st *Store, dir string) (*Log, error) {
	m, err := readMeta(dir)
	if err != nil {
		return nil, err
	}
	l := &Log{name: m.Name, dir: dir, st: st, log: st.log.With(zap.String("channel", m.Name)),
		raw: m.Config, createdMs: m.CreatedMs, kind: m.Kind, prods: producers{}, notify: make(chan struct{})}
	if l.kind == 0 {
		l.kind = KindLog
	}
	l.syncCond = sync.NewCond(&l.syncMu)
	l.wal.l, l.wal.group = l, m.Group
	eff := m.Config.Effective()
	l.cfg.Store(&eff)

	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if swapped, err := completeSwaps(dir, entries); err != nil {
		return nil, fmt.Errorf("finish an interrupted cleaner swap in %s: %w", dir, err)
	} else if swapped {
		if entries, err = os.ReadDir(dir); err != nil {
			return nil, err
		}
	}
	var bases []int64
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".tmp") || isCleanLeftover(n) {
			_ = os.Remove(filepath.Join(dir, n))
			continue
		}
		if b, ok := strings.CutSuffix(n, ".log"); ok {
			v, err := strconv.ParseInt(b, 10, 64)
			if err != nil || len(b) != 20 {
				l.log.Warn("ignoring unexpected file in channel directory", zap.String("file", n))
				continue
			}
			bases = append(bases, v)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	end := st.raftCutAt(m.Group)
	if end < math.MaxInt64 {
		if bases, err = cutSegments(dir, bases, end); err != nil {
			return nil, err
		}
	}
	// Recovered producers count as active now: their expiry restarts at open.
	openMs := st.nowMs()
	visit := func(h *batchHeader, frame []byte) { l.recoverBatch(h, frame, openMs) }
	// With a producer snapshot taken when the active segment was created, sealed
	// segments load from their index files and only the active one is scanned.
	snap, snapTxn, haveSnap := producers(nil), (*txnState)(nil), false
	if len(bases) > 0 {
		snap, snapTxn, haveSnap = readSnapshot(dir, bases[len(bases)-1])
	}
	if haveSnap {
		l.prods = snap
		if snapTxn != nil {
			l.txn.Store(snapTxn)
		}
	}
	if len(bases) == 0 {
		s, err := createSegment(dir, max(m.LogStartOffset, 0), st.nowMs())
		if err != nil {
			return nil, err
		}
		l.segs = []*segment{s}
	}
	for i, b := range bases {
		path := filepath.Join(dir, segmentName(b, ".log"))
		if i < len(bases)-1 {
			if haveSnap {
				if s, ok := loadIndexed(path, b, bases[i+1]); ok {
					l.segs = append(l.segs, s)
					continue
				}
			}
			sealedVisit := visit
			if haveSnap {
				sealedVisit = nil // the snapshot already holds their producer state
			}
			s, err := loadSealed(path, b, sealedVisit)
			if err != nil {
				l.closeFiles()
				return nil, err
			}
			l.segs = append(l.segs, s)
			continue
		}
		s, truncated, nbad, err := recoverActive(path, b, st.walCutFrom(m.Group), end, visit)
		if err != nil {
			l.closeFiles()
			return nil, err
		}
		if nbad > 0 {
			st.metrics.TailTruncations.Inc()
			l.log.Warn("truncated torn or corrupt tail of the last segment",
				zap.String("segment", path), zap.Int64("truncated_bytes", truncated), zap.Int64("valid_bytes", s.size.Load()))
		}
		l.segs = append(l.segs, s)
	}
	l.active = l.segs[len(l.segs)-1]
	if _, err := l.active.f.Seek(l.active.size.Load(), 0); err != nil {
		l.closeFiles()
		return nil, err
	}
	l.next = l.active.next
	l.durable = l.next
	l.logStart.Store(min(max(m.LogStartOffset, l.segs[0].base), l.next))
	l.trimTxns(l.logStart.Load())
	if st.opts.Raft != nil {
		if err := l.openEpochs(); err != nil {
			l.closeFiles()
			return nil, err
		}
	}
	l.publish(hwMark{next: l.next, segBase: l.active.base, pos: l.active.size.Load()})
	l.LastStable() // drops the recovered markers from the not-yet-durable list
	return l, nil
}

// recoverBatch applies a batch found at open to the producer and transaction state;
// frame is the whole frame of a control batch (nil for others). A control batch that
// is not a well-formed transaction marker is logged and changes no transaction.
func (l *Log) recoverBatch(h *batchHeader, frame []byte, nowMs int64) {
	l.prods.apply(h, nowMs)
	switch {
	case h.ProducerID < 0:
	case h.Attributes&attrControl != 0:
		ci, ok := parseControl(frame)
		if !ok {
			l.log.Warn("control batch is not a transaction marker; ignored", zap.Int64("offset", h.BaseOffset))
			return
		}
		l.applyControl(h, ci)
	case h.Attributes&attrTransactional != 0:
		l.beginTxn(h.ProducerID, h.BaseOffset)
	}
}

func (l *Log) closeFiles() {
	for _, s := range l.segs {
		_ = s.close()
	}
}

func (l *Log) writeMetaLocked() error {
	m := &meta{Name: l.name, Config: l.raw, CreatedMs: l.createdMs, LogStartOffset: l.logStart.Load(), Group: l.wal.group}
	if l.kind == KindQueue {
		m.Kind = KindQueue
	}
	return writeMeta(l.dir, m)
}

// AppendResult describes a successful append.
type AppendResult struct {
	// BaseOffset is the offset of the first record; for a duplicate, the original's.
	BaseOffset int64
	// LastOffset is the offset of the last record appended (of the original, for a
	// duplicate: its first batch's last offset is not tracked, so BaseOffset).
	LastOffset int64
	// LogAppendTime is the append time (ms) for LOG_APPEND_TIME channels, else -1.
	LogAppendTime int64
	// Duplicate is true when an idempotent retry was recognized; nothing was written.
	Duplicate bool
}

// AppendBatches validates one or more concatenated RecordBatch v2 frames, assigns
// their offsets (rewriting the base offset field) and appends them as they are. It
// returns after the data is durable (fsync always) or written (fsync interval). b is
// modified in place. Errors: ErrCorruptBatch, ErrInvalidRecord, ErrBatchTooLarge,
// ErrUnsupportedCompression, ErrOutOfOrderSequence, ErrInvalidProducerEpoch,
// ErrStorage, ErrNotFound (the channel was deleted meanwhile), ErrClosed (shutdown).
func (l *Log) AppendBatches(b []byte) (AppendResult, error) {
	return l.BeginAppend(b).Wait()
}

// PendingAppend is an append that was written (offsets and producer state assigned)
// and may still be waiting for its fsync. Wait returns its outcome.
type PendingAppend struct {
	l      *Log
	res    AppendResult
	target int64 // wait until offsets below this are durable; 0 = nothing to wait for
	err    error
	// validateOnly: nothing was written (AppendOptions.ValidateOnly).
	validateOnly bool
	// raft: the proposal of a replicated channel's append (raftmode.go).
	raft *raftnode.Proposal
}

// BeginAppend is the write phase of AppendBatches: it validates b, checks
// idempotent-producer state, assigns offsets and writes the bytes under Log.mu, and
// returns without waiting for durability. Appends begun one after another on a log
// reach it in that order; their Waits may run concurrently and share one fsync (group
// commit). A duplicate of an idempotent batch waits, in Wait, for the original's
// durability. b is modified in place; BeginAppend keeps no reference to it once it
// returns (the bytes are written by then), so the caller may reuse b at once.
func (l *Log) BeginAppend(b []byte) *PendingAppend {
	return l.BeginAppendWith(b, AppendOptions{})
}

// AppendOptions are the per-append choices of storage.proto's ChannelBatches.
type AppendOptions struct {
	// SingleBatch: b must be exactly one frame (Kafka Produce v3+); none or more is
	// ErrInvalidRecord.
	SingleBatch bool
	// ValidateOnly: validate b as the append would (frames, the channel's size and
	// timestamp limits) and write nothing; producer state is neither checked nor
	// changed. The result has BaseOffset -1.
	ValidateOnly bool
	// replica: raft mode's apply of an entry the leader checked against its config at
	// propose. The checks that depend on the channel's config (max_message_bytes, null
	// keys on a compacted channel) are left out, as a Kafka follower does not check
	// what it replicates: a replica applies the entry at whatever point of the metadata
	// group it is (live or replaying its WAL at start), so its config may be older or
	// newer than the leader's was, and applying must not depend on it.
	replica bool
}

// BeginAppendWith is BeginAppend with options.
func (l *Log) BeginAppendWith(b []byte, o AppendOptions) *PendingAppend {
	if l.st.raft != nil && !o.ValidateOnly {
		return l.raftBeginAppend(b, o)
	}
	res, target, err := l.beginAppend(b, o)
	return &PendingAppend{l: l, res: res, target: target, err: err, validateOnly: o.ValidateOnly}
}

// Wait blocks until the append is durable (fsync always; at once in interval mode) and
// returns its result. Errors: as AppendBatches. Safe to call once.
func (p *PendingAppend) Wait() (AppendResult, error) {
	if p.raft != nil {
		return p.raftWait()
	}
	if p.err != nil {
		return AppendResult{}, p.err
	}
	if p.target > 0 {
		if err := p.l.waitDurable(p.target); err != nil {
			return AppendResult{}, err
		}
	}
	if !p.res.Duplicate && !p.validateOnly {
		p.l.st.metrics.Appends.Inc()
	}
	return p.res, nil
}

// beginAppend writes b and returns its result and the offset bound its durability
// waits for (0: none).
func (l *Log) beginAppend(b []byte, o AppendOptions) (AppendResult, int64, error) {
	var hbuf [2]batchHeader
	hdrs, err := l.checkBatches(b, o, hbuf[:0])
	if err != nil {
		return AppendResult{}, 0, err
	}
	if err := checkTimestamps(l.cfg.Load(), hdrs, l.st.nowMs()); err != nil {
		return AppendResult{}, 0, err
	}
	if o.ValidateOnly {
		return AppendResult{BaseOffset: -1, LastOffset: -1, LogAppendTime: -1}, 0, nil
	}
	return l.writeChecked(b, hdrs, l.st.nowMs(), l.logAppendTime())
}

// logAppendTime reports whether the channel stamps appends with the append time
// (timestamp_type LogAppendTime).
func (l *Log) logAppendTime() bool { return l.cfg.Load().TimestampType == TimestampLogAppendTime }

// checkBatches checks b's framing and every frame (CRC, size, records) and returns
// their headers, appended to hdrs.
func (l *Log) checkBatches(b []byte, o AppendOptions, hdrs []batchHeader) ([]batchHeader, error) {
	if err := checkFraming(b, o.SingleBatch); err != nil {
		return nil, err
	}
	cfg := l.cfg.Load()
	limit := decompressLimit(cfg.MaxMessageBytes)
	if o.replica {
		limit = maxDecompressedBytes
	}
	for p := 0; p < len(b); {
		n, err := frameLen(b[p:])
		if err != nil {
			return nil, err
		}
		if n > int(cfg.MaxMessageBytes) && !o.replica {
			return nil, fmt.Errorf("%w: %d bytes > %d", ErrBatchTooLarge, n, cfg.MaxMessageBytes)
		}
		h, err := checkFrame(b[p:p+n], limit)
		if err != nil {
			return nil, err
		}
		if h.nullKey != 0 && cfg.Compacted() && !o.replica {
			return nil, &RecordError{Index: h.nullKey - 1, Msg: "compacted topic cannot accept a record without a key"}
		}
		hdrs = append(hdrs, h)
		p += n
	}
	return hdrs, nil
}

// writeChecked checks the frames b (headers hdrs, checked by checkBatches) against
// the producer and transaction state, assigns offsets and writes them (writeLocked),
// under Log.mu, with now as the append time (stamped into every batch with logAppend).
func (l *Log) writeChecked(b []byte, hdrs []batchHeader, now int64, logAppend bool) (AppendResult, int64, error) {
	var pbuf [2]prevBatch
	prev := pbuf[:0]
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return AppendResult{}, 0, l.closedErr() // NOT_FOUND when deleted meanwhile
	}
	if l.failed != nil {
		l.mu.Unlock()
		return AppendResult{}, 0, fmt.Errorf("%w: channel fenced after %v", ErrStorage, l.failed)
	}
	for i := range hdrs {
		h := &hdrs[i]
		dup, err := l.prods.check(h, prev)
		if err != nil {
			l.mu.Unlock()
			return AppendResult{}, 0, err
		}
		if dup != nil {
			l.mu.Unlock()
			// The original may still be waiting for its fsync: acknowledge the retry
			// only once the original is durable.
			var target int64
			if l.st.opts.FsyncInterval <= 0 {
				target = dup.baseOffset + 1
			}
			return AppendResult{BaseOffset: dup.baseOffset, LastOffset: dup.baseOffset + int64(dup.lastSeq-dup.firstSeq), LogAppendTime: -1, Duplicate: true}, target, nil
		}
		if h.ProducerID >= 0 {
			if h.Attributes&attrTransactional == 0 && l.txn.Load() != nil {
				if _, open := l.openTxn(h.ProducerID); open {
					l.mu.Unlock()
					return AppendResult{}, 0, fmt.Errorf("%w: producer %d sent a non-transactional batch while its transaction is open", ErrInvalidTxnState, h.ProducerID)
				}
			}
			prev = append(prev, prevBatch{pid: h.ProducerID, epoch: h.ProducerEpoch, lastSeq: h.LastSequence()})
		}
	}
	res, target, err := l.writeLocked(b, hdrs, now, nil, logAppend)
	l.mu.Unlock()
	return res, target, err
}

// writeLocked assigns offsets to the checked frames b (headers hdrs), writes them and
// applies them to the producer and transaction state (ctrl: what the control batch
// among them says; nil when there is none), all before the high watermark can cover
// them; with logAppend every batch gets now as its timestamp. Caller holds Log.mu. It
// returns the result and the offset bound its durability waits for (0: none).
func (l *Log) writeLocked(b []byte, hdrs []batchHeader, now int64, ctrl *controlInfo, logAppend bool) (AppendResult, int64, error) {
	res := AppendResult{BaseOffset: l.next, LogAppendTime: -1}
	if logAppend {
		res.LogAppendTime = now
	}
	off := l.next
	p := 0
	for i := range hdrs {
		h := &hdrs[i]
		frame := b[p : p+int(h.Length)]
		binary.BigEndian.PutUint64(frame, uint64(off))
		h.BaseOffset = off
		switch {
		case logAppend:
			setLogAppendTime(frame, now)
			h.MaxTimestamp = now
			h.Attributes |= attrTimestampType
		case ctrl == nil:
			setCreateTime(frame, h)
		}
		off = h.NextOffset()
		p += int(h.Length)
	}
	res.LastOffset = off - 1
	if err := l.maybeRollLocked(int64(len(b)), now); err != nil {
		l.failLocked(err)
		return AppendResult{}, 0, fmt.Errorf("%w: roll segment: %v", ErrStorage, err)
	}
	seg := l.active
	pos := seg.size.Load()
	seg.reserve(pos, int64(len(b)), l.cfg.Load().SegmentBytes)
	if _, err := seg.f.WriteAt(b, pos); err != nil {
		l.failLocked(err)
		return AppendResult{}, 0, fmt.Errorf("%w: write: %v", ErrStorage, err)
	}
	p = 0
	for i := range hdrs {
		h := &hdrs[i]
		seg.addIndex(h, pos+int64(p))
		l.prods.apply(h, now)
		switch {
		case h.Attributes&(attrTransactional|attrControl) == attrTransactional:
			l.beginTxn(h.ProducerID, h.BaseOffset)
		case ctrl != nil && h.Attributes&attrControl != 0:
			l.applyControl(h, *ctrl)
		}
		p += int(h.Length)
	}
	seg.size.Store(pos + int64(len(b)))
	l.next = off
	l.pending++
	// Raft mode publishes at apply: the entry is committed (in a majority's WAL).
	interval := l.st.opts.FsyncInterval > 0 || l.st.raft != nil
	if interval {
		l.dirty = true
		l.publish(hwMark{next: off, segBase: seg.base, pos: pos + int64(len(b))})
	}
	l.st.metrics.AppendBytes.Add(float64(len(b)))
	if interval {
		return res, 0, nil
	}
	if l.st.wal != nil {
		return l.walAppendLocked(b, res, hwMark{next: off, segBase: seg.base, pos: pos + int64(len(b))})
	}
	return res, off, nil
}

// checkTimestamps refuses, for a CreateTime channel with limits, a batch holding a
// record timestamp more than TimestampBeforeMaxMs before nowMs or TimestampAfterMaxMs
// after it (Kafka LogValidator.validateTimestamp; -1, no timestamp, is not checked).
// Errors: ErrInvalidTimestamp.
func checkTimestamps(cfg *ChannelConfig, hdrs []batchHeader, nowMs int64) error {
	before, after := cfg.TimestampBeforeMaxMs, cfg.TimestampAfterMaxMs
	if cfg.TimestampType == TimestampLogAppendTime || before == 0 && after == 0 {
		return nil
	}
	for i := range hdrs {
		h := &hdrs[i]
		if !h.hasTS {
			continue
		}
		// Compared without overflow (Kafka's now-ts wraps for a timestamp near
		// MinInt64 and lets it through): nowMs >= 0 and before >= 0.
		ts := int64(0)
		switch {
		case before > 0 && h.minTS < nowMs-before:
			ts = h.minTS
		case after > 0 && h.maxTS > nowMs && h.maxTS-nowMs > after:
			ts = h.maxTS
		default:
			continue
		}
		return fmt.Errorf("%w: timestamp %d is outside [%d, %d] (append time %d)", ErrInvalidTimestamp, ts, nowMs-before, nowMs+after, nowMs)
	}
	return nil
}

// Append encodes records as one uncompressed batch (producer id -1) and appends it.
func (l *Log) Append(recs []NewRecord) (AppendResult, int64, error) {
	return l.AppendProduced(recs, nil)
}

// Producer is an idempotent producer's identity for one batch: id, epoch and the
// sequence of the batch's first record (Kafka's RecordBatch producer fields).
type Producer struct {
	ID           int64
	Epoch        int16
	BaseSequence int32
}

// AppendProduced is Append with the batch stamped with p's identity (nil: none), so
// that it is checked and de-duplicated as an idempotent producer's batch (see
// producers.check). A duplicate stores nothing and returns the original's offsets
// with Duplicate set, and timestamp 0. Errors: as AppendBatches.
func (l *Log) AppendProduced(recs []NewRecord, p *Producer) (AppendResult, int64, error) {
	now := l.st.nowMs()
	b := EncodeBatch(recs, now)
	if b == nil {
		return AppendResult{}, 0, fmt.Errorf("%w: no records", ErrInvalidArgument)
	}
	if p != nil {
		stampProducer(b, p)
	}
	ts := int64(binary.BigEndian.Uint64(b[offMaxTS:]))
	res, err := l.AppendBatches(b)
	if res.LogAppendTime >= 0 {
		ts = res.LogAppendTime
	}
	if res.Duplicate {
		ts = 0
	}
	return res, ts, err
}

func (l *Log) activeBase() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active.base
}

func (l *Log) failLocked(err error) {
	if l.failed == nil {
		l.failed = err
		l.log.Error("disk failure; channel fenced until restart", zap.Error(err))
	}
}

// maybeRollLocked starts a new segment when the active one would pass segment_bytes or
// is older than segment_ms. The old segment is fsynced and its indexes written first,
// so every segment but the active one is fully durable.
func (l *Log) maybeRollLocked(incoming int64, nowMs int64) error {
	cfg := l.cfg.Load()
	a := l.active
	size := a.size.Load()
	if size == 0 {
		return nil
	}
	rollBase := a.createdMs
	if size+incoming <= cfg.SegmentBytes && nowMs-rollBase < cfg.SegmentMs {
		return nil
	}
	return l.rollLocked(nowMs)
}

func (l *Log) rollLocked(nowMs int64) error {
	a := l.active
	if err := a.seal(); err != nil {
		return err
	}
	if err := l.fsyncSeg(a); err != nil {
		return err
	}
	if err := a.writeIndexes(); err != nil {
		return err
	}
	if err := writeSnapshot(l.dir, l.next, l.prods, l.txn.Load(), l.logStart.Load()); err != nil {
		return err
	}
	s, err := createSegment(l.dir, l.next, nowMs)
	if err != nil {
		return err
	}
	if err := syncDir(l.dir); err != nil {
		_ = s.close()
		return err
	}
	l.segMu.Lock()
	l.segs = append(l.segs, s)
	l.segMu.Unlock()
	l.active = s
	return nil
}

func (l *Log) fsyncSeg(s *segment) error {
	start := time.Now()
	err := datasync(s.f)
	l.st.metrics.Fsyncs.Inc()
	l.st.metrics.FsyncSeconds.Observe(time.Since(start).Seconds())
	return err
}

// waitDurable blocks until offsets below target are fsynced. Errors: ErrStorage (the
// fsync failed: the channel is fenced), ErrNotFound (the channel was deleted
// meanwhile), ErrClosed (shutdown).
func (l *Log) waitDurable(target int64) error {
	err := l.syncTo(target)
	if errors.Is(err, ErrClosed) {
		return l.closedErr() // without syncMu: closedErr takes Store.mu
	}
	return err
}

// syncTo is waitDurable's group commit: one waiter at a time is the leader and fsyncs
// everything written so far; the others wait for it and, if still not covered, one of
// them leads the next round. A log closed before or during the fsync answers
// ErrClosed: close fsyncs the active segment itself (when it is not fenced), and a
// file it closed under the leader's fsync is no disk failure.
func (l *Log) syncTo(target int64) error {
	if l.st.wal != nil {
		return l.walWait(target)
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	for l.durable < target {
		if l.syncErr != nil {
			if errors.Is(l.syncErr, ErrClosed) {
				return ErrClosed
			}
			return fmt.Errorf("%w: fsync: %v", ErrStorage, l.syncErr)
		}
		if l.syncing {
			l.syncCond.Wait()
			continue
		}
		l.syncing = true
		l.syncMu.Unlock()

		l.mu.Lock()
		seg, upto, pos, n, closed := l.active, l.next, l.active.size.Load(), l.pending, l.closed
		l.pending = 0
		var err error
		if closed {
			err = ErrClosed
		}
		l.mu.Unlock()
		if err == nil {
			err = l.fsyncSeg(seg)
			l.st.metrics.GroupCommitSize.Observe(float64(n))
			if errors.Is(err, os.ErrClosed) && seg.base < l.activeBase() {
				err = nil // sealed (fsynced at roll) and since removed by retention
			}
		}
		if err != nil && !closed {
			l.mu.Lock()
			if closed = l.closed; closed {
				err = ErrClosed // the close raced the fsync and closed the file under it
			} else {
				l.failLocked(err)
			}
			l.mu.Unlock()
		}

		l.syncMu.Lock()
		l.syncing = false
		if err != nil {
			l.syncErr = err
			l.syncCond.Broadcast()
			if closed {
				return ErrClosed
			}
			return fmt.Errorf("%w: fsync: %v", ErrStorage, err)
		}
		if upto > l.durable {
			l.durable = upto
			l.publish(hwMark{next: upto, segBase: seg.base, pos: pos})
		}
		l.syncCond.Broadcast()
		l.syncMu.Unlock()
		seg.dropBehind(pos)
		l.syncMu.Lock()
	}
	return nil
}

// syncIfDirty fsyncs the active segment when written since the last fsync (interval
// mode).
func (l *Log) syncIfDirty() {
	l.mu.Lock()
	if !l.dirty || l.closed || l.failed != nil {
		l.mu.Unlock()
		return
	}
	l.dirty = false
	seg, n := l.active, l.pending
	l.pending = 0
	err := l.fsyncSeg(seg) // under mu: the file cannot be closed meanwhile
	l.st.metrics.GroupCommitSize.Observe(float64(n))
	if err != nil {
		l.failLocked(err)
	} else {
		seg.dropBehind(seg.size.Load())
	}
	l.mu.Unlock()
}

// segmentFor returns the index in segs of the segment holding off. Caller holds segMu.
func (l *Log) segmentFor(off int64) int {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > off })
	return max(i-1, 0)
}

// visibleEnd is the file position readers may read to in s, given hw.
func visibleEnd(s *segment, hw *hwMark) int64 {
	switch {
	case s.base < hw.segBase:
		return s.size.Load()
	case s.base == hw.segBase:
		return hw.pos
	}
	return 0
}

// ReadRaw returns whole stored frames starting with the one containing off, up to
// maxBytes (at least one frame when one is available), from one segment. It returns
// nil at the high watermark. Errors: ErrOutOfRange (off < log start or > high
// watermark), ErrStorage, ErrNotFound (channel deleted), ErrClosed (shutdown).
func (l *Log) ReadRaw(off int64, maxBytes int) ([]byte, error) {
	return l.ReadRawTo(off, maxBytes, nil)
}

// ReadRawTo is ReadRaw reading into a buffer from alloc, called at most once with the
// number of bytes to read; the result is a prefix of that buffer, and the buffer is
// the caller's whether or not the read succeeds. alloc nil allocates with make.
func (l *Log) ReadRawTo(off int64, maxBytes int, alloc func(n int) []byte) ([]byte, error) {
	return l.ReadRawUpTo(off, maxBytes, math.MaxInt64, alloc)
}

// ReadRawUpTo is ReadRawTo returning only frames whose base offset is below limit
// (read_committed readers pass the last stable offset): an off at or past limit, but
// not past the high watermark, returns nil.
func (l *Log) ReadRawUpTo(off int64, maxBytes int, limit int64, alloc func(n int) []byte) ([]byte, error) {
	if l.isClosed() {
		return nil, l.closedErr()
	}
	hw := l.hw.Load()
	if off < l.logStart.Load() || off > hw.next {
		return nil, fmt.Errorf("%w: offset %d outside [%d, %d]", ErrOutOfRange, off, l.logStart.Load(), hw.next)
	}
	limit = min(limit, hw.next)
	if off >= limit {
		return nil, nil
	}
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if off < l.segs[0].base {
		// Retention removed the segment since the log start check above.
		return nil, fmt.Errorf("%w: offset %d below the first segment %d", ErrOutOfRange, off, l.segs[0].base)
	}
	for i := l.segmentFor(off); i < len(l.segs); i++ {
		s := l.segs[i]
		if s.base >= limit || s.closed.Load() {
			return nil, nil
		}
		end := visibleEnd(s, hw)
		pos, first, ok, err := s.findPos(off, end, limit)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		return s.readFrames(pos, first, maxBytes, end, limit, alloc)
	}
	return nil, nil
}

// ReadRecords decodes records from off: at most maxRecords, stopping once maxBytes of
// keys, values and headers are collected (at least one record when available). next is
// the offset to read from next. Control records (transaction markers) are skipped.
func (l *Log) ReadRecords(off int64, maxRecords, maxBytes int) (recs []Record, next int64, err error) {
	return l.readRecords(off, maxRecords, maxBytes, false)
}

// ReadCommitted is ReadRecords at isolation read_committed: only records below the last
// stable offset, and none of aborted transactions (next moves past them).
func (l *Log) ReadCommitted(off int64, maxRecords, maxBytes int) (recs []Record, next int64, err error) {
	return l.readRecords(off, maxRecords, maxBytes, true)
}

func (l *Log) readRecords(off int64, maxRecords, maxBytes int, committed bool) (recs []Record, next int64, err error) {
	next = off
	size := 0
	limit := int64(math.MaxInt64)
	var aborted map[int64][][2]int64
	if committed {
		limit = l.LastStable()
		aborted = l.abortedSpans(off, limit)
	}
	for len(recs) < maxRecords && size < maxBytes {
		raw, err := l.ReadRawUpTo(next, max(maxBytes-size, 64<<10), limit, nil)
		if err != nil {
			if len(recs) > 0 && errors.Is(err, ErrOutOfRange) {
				break
			}
			return recs, next, err
		}
		if len(raw) == 0 {
			break
		}
		for len(raw) > 0 && len(recs) < maxRecords && size < maxBytes {
			n, err := frameLen(raw)
			if err != nil {
				return recs, next, err
			}
			if attr := binary.BigEndian.Uint16(raw[offAttributes:]); attr&(attrTransactional|attrControl) != 0 {
				if h := parseHeader(raw); attr&attrControl != 0 || isAborted(aborted, &h) {
					next = max(next, h.NextOffset())
					raw = raw[n:]
					continue
				}
			}
			batch, err := decodeBatchFrom(raw[:n], next, maxRecords-len(recs), maxBytes-size)
			if err != nil {
				return recs, next, err
			}
			h := parseHeader(raw)
			raw = raw[n:]
			for _, r := range batch {
				if r.Offset < next {
					continue
				}
				if r.Offset >= limit {
					return recs, next, nil // a batch across a log start clamped LSO
				}
				if len(recs) >= maxRecords || (size >= maxBytes && len(recs) > 0) {
					return recs, next, nil
				}
				recs = append(recs, r)
				size += len(r.Key) + len(r.Value)
				for _, hd := range r.Headers {
					size += len(hd.Key) + len(hd.Value)
				}
				next = r.Offset + 1
			}
			if next < h.NextOffset() && (len(recs) < maxRecords && size < maxBytes) {
				next = h.NextOffset()
			}
		}
	}
	return recs, next, nil
}

// isAborted reports whether the transactional batch h lies in one of its producer's
// aborted spans.
func isAborted(spans map[int64][][2]int64, h *batchHeader) bool {
	for _, sp := range spans[h.ProducerID] {
		if h.BaseOffset >= sp[0] && h.BaseOffset < sp[1] {
			return true
		}
	}
	return false
}

// ReadBatchRecords decodes every record at or after off of the whole frames
// ReadRawTo(off, maxBytes, alloc) returns: up to maxBytes bytes of stored (possibly
// compressed) frames from one segment, at least one frame when one is available, with
// no bound on the number of records. Each frame is read and verified once even when the
// caller uses its records in small steps, where ReadRecords stops within a frame and a
// later call reads and checks the whole frame again. The records alias the buffer
// from alloc, which the caller may reuse once it is done with them. next is the
// offset after the last frame read (off when none was). Errors: as ReadRawTo, and
// ErrDataLoss for a damaged frame.
func (l *Log) ReadBatchRecords(off int64, maxBytes int, alloc func(n int) []byte) (recs []Record, next int64, err error) {
	raw, err := l.ReadRawTo(off, maxBytes, alloc)
	if err != nil {
		return nil, off, err
	}
	return frameRecords(raw, off, nil)
}

// frameRecords decodes the records of the whole frames in raw, read from offset off,
// skipping the frames keep (when not nil) refuses. next is the offset after the last
// frame (off when raw holds none). Errors: ErrDataLoss for a damaged frame, and
// appendBatch's.
func frameRecords(raw []byte, off int64, keep func(frame []byte, h *batchHeader) bool) (recs []Record, next int64, err error) {
	next = off
	for len(raw) > 0 {
		n, err := frameLen(raw)
		if err != nil {
			return nil, off, fmt.Errorf("%w: %v", ErrDataLoss, err)
		}
		h := parseHeader(raw)
		if keep == nil || keep(raw[:n], &h) {
			if recs, err = appendBatch(recs, raw[:n], next, math.MaxInt, math.MaxInt); err != nil {
				return nil, off, err
			}
		}
		next = max(next, h.NextOffset())
		raw = raw[n:]
	}
	return recs, next, nil
}

// ReadDataRecords is ReadBatchRecords for a reader of data records at an isolation
// level (a Kafka share partition reading its log in place): control batches
// (transaction markers) are skipped, and with committed (read_committed) only frames
// below the last stable offset are read and the batches of aborted transactions are
// skipped too. next moves past the frames skipped, so a caller resuming there never
// sees them; an off at or past the last stable offset (committed) returns no record
// and next = off. Errors: as ReadBatchRecords.
func (l *Log) ReadDataRecords(off int64, maxBytes int, committed bool, alloc func(n int) []byte) (recs []Record, next int64, err error) {
	limit := int64(math.MaxInt64)
	var aborted map[int64][][2]int64
	if committed {
		limit = l.LastStable()
		if off >= limit {
			return nil, off, nil
		}
		aborted = l.abortedSpans(off, limit)
	}
	raw, err := l.ReadRawUpTo(off, maxBytes, limit, alloc)
	if err != nil {
		return nil, off, err
	}
	recs, next, err = frameRecords(raw, off, func(frame []byte, h *batchHeader) bool {
		attr := binary.BigEndian.Uint16(frame[offAttributes:])
		return attr&(attrTransactional|attrControl) == 0 || attr&attrControl == 0 && !isAborted(aborted, h)
	})
	if err != nil {
		return nil, off, err
	}
	if next > limit { // a batch across a log start that clamped the LSO
		i := len(recs)
		for i > 0 && recs[i-1].Offset >= limit {
			i--
		}
		recs, next = recs[:i], limit
	}
	return recs, next, nil
}

// Wait blocks until the high watermark passes off, ctx ends or timeout passes. It
// reports whether data is available.
func (l *Log) Wait(ctx context.Context, off int64, timeout time.Duration) bool {
	return l.waitFor(ctx, l.HighWatermark, off, timeout)
}

// WaitStable is Wait for read_committed readers: it waits until the last stable
// offset passes off (it moves only when the high watermark does).
func (l *Log) WaitStable(ctx context.Context, off int64, timeout time.Duration) bool {
	return l.waitFor(ctx, l.LastStable, off, timeout)
}

func (l *Log) waitFor(ctx context.Context, end func() int64, off int64, timeout time.Duration) bool {
	if timeout <= 0 {
		return end() > off
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		ch := l.Changed()
		if end() > off {
			return true
		}
		if l.isClosed() {
			return false
		}
		select {
		case <-ch:
		case <-t.C:
			return end() > off
		case <-ctx.Done():
			return false
		}
	}
}

func (l *Log) isClosed() bool { return l.closedFlag.Load() }

// LookupTime returns the offset and timestamp of the first record with timestamp >= ts
// (ms), or found=false.
func (l *Log) LookupTime(ts int64) (off, recTS int64, found bool, err error) {
	hw := l.hw.Load()
	start := l.logStart.Load()
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	for i := l.segmentFor(start); i < len(l.segs); i++ {
		s := l.segs[i]
		if s.base >= hw.next || s.closed.Load() {
			break
		}
		if s.maxTS.Load() < ts {
			continue
		}
		end := visibleEnd(s, hw)
		pos := s.lookupTime(ts)
		r, ok, err := scanFrames(s, pos, end, hw.next, func(h *batchHeader, frame []byte) (Record, bool, error) {
			if h.MaxTimestamp < ts || h.NextOffset() <= start {
				return Record{}, false, nil
			}
			recs, err := DecodeBatch(frame)
			if err != nil {
				return Record{}, false, err
			}
			for _, r := range recs {
				if r.Offset >= start && r.Timestamp >= ts {
					return r, true, nil
				}
			}
			return Record{}, false, nil
		})
		if err != nil {
			return 0, 0, false, err
		}
		if ok {
			return r.Offset, r.Timestamp, true, nil
		}
	}
	return 0, 0, false, nil
}

// LookupMaxTime returns the offset and timestamp of the record with the largest
// timestamp (the first such), or found=false for an empty log.
func (l *Log) LookupMaxTime() (off, recTS int64, found bool, err error) {
	hw := l.hw.Load()
	start := l.logStart.Load()
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	var best *segment
	for i := l.segmentFor(start); i < len(l.segs); i++ {
		s := l.segs[i]
		if s.base >= hw.next || s.closed.Load() {
			break
		}
		if best == nil || s.maxTS.Load() > best.maxTS.Load() {
			best = s
		}
	}
	if best == nil || best.maxTS.Load() < 0 {
		return 0, 0, false, nil
	}
	target := best.maxTS.Load()
	r, ok, err := scanFrames(best, 0, visibleEnd(best, hw), hw.next, func(h *batchHeader, frame []byte) (Record, bool, error) {
		if h.MaxTimestamp != target || h.NextOffset() <= start {
			return Record{}, false, nil
		}
		recs, err := DecodeBatch(frame)
		if err != nil {
			return Record{}, false, err
		}
		for _, r := range recs {
			if r.Offset >= start && r.Timestamp == target {
				return r, true, nil
			}
		}
		return Record{}, false, nil
	})
	if err != nil || !ok {
		return 0, 0, false, err
	}
	return r.Offset, r.Timestamp, true, nil
}

// scanFrames calls fn for each visible frame of s from pos until fn reports found.
func scanFrames(s *segment, pos, end, limit int64, fn func(*batchHeader, []byte) (Record, bool, error)) (Record, bool, error) {
	var hdr [batchHeaderLen]byte
	for pos+batchHeaderLen <= end {
		if _, err := s.f.ReadAt(hdr[:], pos); err != nil {
			return Record{}, false, fmt.Errorf("%w: read %s: %v", ErrStorage, s.path, err)
		}
		h := parseHeader(hdr[:])
		if h.BaseOffset >= limit || h.Length < batchHeaderLen || pos+int64(h.Length) > end {
			break
		}
		frame := make([]byte, h.Length)
		if _, err := s.f.ReadAt(frame, pos); err != nil {
			return Record{}, false, fmt.Errorf("%w: read %s: %v", ErrStorage, s.path, err)
		}
		r, ok, err := fn(&h, frame)
		if err != nil || ok {
			return r, ok, err
		}
		pos += int64(h.Length)
	}
	return Record{}, false, nil
}

// DeleteRecords moves the log start to before (-1 = the high watermark), persisting it,
// and deletes segments that fall wholly below it. It returns the log start after the
// call. As Kafka's UnifiedLog.maybeIncrementLogStartOffset, the log start only moves
// forward: before below it changes nothing and returns it (a repeated or stale
// DeleteRecords is not an error). Errors: ErrOutOfRange (before past the high
// watermark, or negative other than -1). In raft mode the move is an entry of the
// channel's group, applied by every replica at the same point of the log
// (raftDeleteRecords); errors are then also ErrNotLeader and ErrNotReplicated.
func (l *Log) DeleteRecords(before int64) (int64, error) {
	if l.st.raft != nil {
		return l.raftDeleteRecords(before)
	}
	return l.deleteRecords(before)
}

// deleteRecords is DeleteRecords on this replica alone.
func (l *Log) deleteRecords(before int64) (int64, error) {
	l.mu.Lock()
	hw := l.hw.Load().next
	if before == -1 {
		before = hw
	}
	start := l.logStart.Load()
	if before < 0 || before > hw {
		l.mu.Unlock()
		return start, fmt.Errorf("%w: %d outside [0, %d]", ErrOutOfRange, before, hw)
	}
	if before < start {
		l.mu.Unlock()
		return start, nil
	}
	if before > start {
		l.logStart.Store(before)
		if err := l.writeMetaLocked(); err != nil {
			l.logStart.Store(start)
			l.mu.Unlock()
			return start, fmt.Errorf("%w: write meta: %v", ErrStorage, err)
		}
		if before == l.next && l.active.size.Load() > 0 && l.failed == nil && !l.closed {
			if err := l.rollLocked(l.st.nowMs()); err != nil {
				l.failLocked(err)
			}
		}
	}
	l.mu.Unlock()
	l.wake()
	l.enforceRetention(l.st.nowMs())
	return before, nil
}

// enforceRetention deletes the oldest non-active segments that are wholly below the
// log start, older than retention_ms (by their largest timestamp) or beyond
// retention_bytes, and moves the log start forward accordingly.
func (l *Log) enforceRetention(nowMs int64) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	// In raft mode only DeleteRecords' entries run this (at apply): what it changes
	// must not depend on this replica's clock or segment sizes, so neither producer
	// expiry (the leader proposes it: raftExpireProducers) nor time and size
	// retention run here.
	raft := l.st.raft != nil
	if !raft {
		l.prods.expire(nowMs, func(pid int64) bool { _, ok := l.openTxn(pid); return ok })
	}
	l.trimTxns(l.logStart.Load())
	segs := l.segs // stable: only changed under mu
	start := l.logStart.Load()
	k := l.retentionCutLocked(nowMs, !raft)
	if k == 0 {
		l.mu.Unlock()
		return
	}
	victims := append([]*segment(nil), segs[:k]...)
	l.segMu.Lock()
	l.segs = append([]*segment(nil), segs[k:]...)
	l.segMu.Unlock()
	newStart := max(start, l.segs[0].base)
	if newStart != start {
		l.logStart.Store(newStart)
		l.trimTxns(newStart)
		if err := l.writeMetaLocked(); err != nil {
			l.log.Error("persist log start after retention", zap.Error(err))
		}
	}
	l.mu.Unlock()
	for _, s := range victims {
		if err := s.remove(); err != nil {
			l.log.Warn("remove segment", zap.String("segment", s.path), zap.Error(err))
		}
		l.st.metrics.RetentionDeleted.Inc()
	}
	l.log.Info("retention deleted segments", zap.Int("segments", len(victims)), zap.Int64("log_start", newStart))
}

// retentionCutLocked is how many of the oldest segments retention deletes: those
// wholly below the log start and, with timeAndSize, those older than retention_ms (by
// their largest timestamp) or beyond retention_bytes (Kafka: the delete policy only,
// not a compact-only topic). The active segment is never among them. Called with mu
// held.
func (l *Log) retentionCutLocked(nowMs int64, timeAndSize bool) int {
	cfg := l.cfg.Load()
	segs := l.segs
	var total int64
	for _, s := range segs {
		total += s.size.Load()
	}
	start := l.logStart.Load()
	del := timeAndSize && cfg.CleanupPolicy != CleanupCompact
	k := 0
	for ; k < len(segs)-1; k++ {
		s := segs[k]
		size := s.size.Load()
		below := segs[k+1].base <= start
		expired := del && cfg.RetentionMs >= 0 && nowMs-s.maxTS.Load() > cfg.RetentionMs
		tooBig := del && cfg.RetentionBytes >= 0 && total-size >= cfg.RetentionBytes
		if !below && !expired && !tooBig {
			break
		}
		total -= size
	}
	return k
}

// UpdateConfig replaces the stored config and persists it (UpdateConfigFields with
// no mask).
func (l *Log) UpdateConfig(c ChannelConfig) error { return l.UpdateConfigFields(c, nil) }

// UpdateConfigFields sets the fields of the stored config that mask names (their JSON
// names, as storage.proto's UpdateChannelConfigRequest.update_mask; none: all of in)
// to in's values and persists the result. In raft mode the change is an entry of the
// metadata group, merged and applied by every replica in its order with creates and
// deletes. Errors: ErrInvalidArgument (an unknown mask field, a value out of range),
// ErrNotFound, ErrStorage; raft mode: ErrNotLeader (not the metadata group's leader),
// ErrNotReplicated.
func (l *Log) UpdateConfigFields(in ChannelConfig, mask []string) error {
	c, err := MergeConfig(l.Config(), in, mask)
	if err != nil {
		return err
	}
	if err := c.validate(l.st.minSegmentBytes()); err != nil {
		return err
	}
	if l.st.raft != nil {
		return l.st.raftUpdateConfig(l.name, in, mask)
	}
	return l.setConfig(c)
}

// setConfig replaces the stored config with c (validated) and persists it.
func (l *Log) setConfig(c ChannelConfig) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.raw
	l.raw = c
	if err := l.writeMetaLocked(); err != nil {
		l.raw = old
		return fmt.Errorf("%w: write meta: %v", ErrStorage, err)
	}
	eff := c.Effective()
	l.cfg.Store(&eff)
	return nil
}

// close stops the log: pending and later appends fail with ErrClosed, waiters wake.
func (l *Log) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.closedFlag.Store(true)
	var err error
	if l.failed == nil && !l.active.closed.Load() {
		err = l.active.seal()
		if serr := l.active.f.Sync(); err == nil {
			err = serr
		}
		if werr := l.active.writeIndexes(); err == nil {
			err = werr
		}
	}
	l.segMu.Lock()
	for _, s := range l.segs {
		if cerr := s.close(); err == nil {
			err = cerr
		}
	}
	l.segMu.Unlock()
	l.mu.Unlock()
	l.syncMu.Lock()
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	l.wake()
	return err
}
