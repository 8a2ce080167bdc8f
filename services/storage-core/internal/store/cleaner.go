package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The log cleaner compacts channels whose cleanup policy includes "compact", as Kafka's
// LogCleaner does (Cleaner.scala; KIP-58 min.compaction.lag.ms, KIP-354
// max.compaction.lag.ms, KIP-534 delete horizons, KIP-98 transactions):
//
//   - Only closed segments below the active one, the last stable offset (no open
//     transaction is touched) and, in WAL mode, the last checkpoint are cleanable; of
//     those, only segments whose newest record is older than min_compaction_lag_ms.
//   - The dirty section starts at the channel's cleaner checkpoint (file
//     "cleaner-offset", the first offset not yet taken into a pass; the log start when
//     missing). A pass runs when dirty bytes / cleanable bytes reach
//     min_cleanable_dirty_ratio, when the first dirty segment is older than
//     max_compaction_lag_ms, or when a delete horizon kept by the last pass has passed.
//   - A pass reads the dirty section into a map key -> newest offset, bounded by the
//     dedupe buffer (keys and ~48 bytes per entry): when it is full the pass ends the
//     map there and the rest stays dirty for the next pass; aborted and control batches
//     are not mapped. Then every cleanable segment below the map's end is rewritten,
//     oldest first, batch by batch (cleanBatch):
//     a record is kept unless the map holds a newer offset of its key;
//     a batch of an aborted transaction goes;
//     a tombstone (null value) that is the newest of its key is kept by the first pass
//     that sees it, which sets its batch's delete horizon (now + delete_retention_ms,
//     the delete-horizon attribute and the horizon as base timestamp, the record
//     timestamps unchanged), and goes in a pass at or after the horizon;
//     a transaction marker stays while a batch of its transaction was seen in the pass
//     (records of the transaction remain, or were removed by this very pass); once a
//     pass sees none it gets a delete horizon the same way, and a pass after the
//     horizon removes it (txnCleaner, Kafka's CleanedTransactionMetadata);
//     the last batch of each producer still in the producer state is kept, as a header
//     of no records when all its records went, and so are the markers of a producer's
//     current epoch when it has no batch in its state (as Kafka), so the idempotence
//     state can be rebuilt from the log.
//   - The aborted-transactions index follows what is left: when a pass reaches an ABORT
//     marker and saw no batch of its transaction, the entry is removed (dropAborted:
//     in memory and in the active segment's producer snapshot) before the segment
//     holding the marker is swapped, so no entry outlives its marker — a read_committed
//     Kafka consumer given an aborted range with no marker to end it would drop the
//     producer's later committed records.
//   - Offsets never change: a rewritten batch keeps its base offset, last offset delta,
//     max timestamp, producer fields and its records' offset deltas and timestamps
//     (gaps, as Kafka); it is stored uncompressed with a new CRC. An emptied batch is
//     dropped (but see the producers' last batches). The log start is unchanged.
//   - Consecutive segments whose bytes before the pass fit in segment_bytes (and whose
//     offsets fit the index's 32-bit relative offsets) are written as one segment at
//     the first one's base offset and name (Kafka Cleaner.groupSegmentsBySize), so a
//     log cleaned again and again does not end as many near-empty segments; a
//     segment the pass leaves unchanged and has no neighbour to merge with is not
//     rewritten. A pass merges what earlier passes shrank.
//   - Segments are swapped crash-safely (swapSegments): the new file is written and
//     fsynced under a ".clean" name and renamed to "<base>.log.<end>.swap" (the
//     commit point: it replaces every segment with a base in [base, end)), the old
//     index files and the other old .log files removed, then the swap file renamed
//     over the first .log, with a directory fsync after each step. A crash leaves
//     the old segments or a swap file that openLog finishes (completeSwaps), never a
//     mix; openLog removes ".clean" leftovers, and a segment without index files is
//     scanned. Readers hold Log.segMu while they read a file, so a read sees the old
//     or the new files whole.
//
// Channels with the delete policy are never looked at beyond a config check per pass.
// In raft mode every replica cleans its own segments, as each Kafka replica runs its
// own cleaner: the cleaned logs keep every offset, and what a pass removes (superseded
// records, tombstones and markers past their horizons) depends on that replica's
// segments and clock, so replicas may differ in what is still there to read, never in
// what is at an offset. The Raft log under them is not cleaned, so a restarted replica
// rebuilds its channels whole and cleans them again.

// CleanerOptions sizes the node's log cleaner (Kafka log.cleaner.*).
type CleanerOptions struct {
	// Threads is how many channels are cleaned at once (log.cleaner.threads); 0 = 1,
	// < 0 turns the cleaner off.
	Threads int
	// DedupeBufferBytes bounds the memory of the key maps, shared by the threads
	// (log.cleaner.dedupe.buffer.size); 0 = 128 MiB.
	DedupeBufferBytes int64
	// IOBytesPerSecond bounds the bytes the cleaner reads and writes per second, all
	// threads together (log.cleaner.io.max.bytes.per.second); 0 = no limit.
	IOBytesPerSecond float64
	// Backoff is the pause between passes when nothing is cleanable
	// (log.cleaner.backoff.ms); 0 = 15 s.
	Backoff time.Duration
}

func (o CleanerOptions) withDefaults() CleanerOptions {
	if o.Threads == 0 {
		o.Threads = 1
	}
	if o.DedupeBufferBytes == 0 {
		o.DedupeBufferBytes = 128 << 20
	}
	if o.Backoff == 0 {
		o.Backoff = 15 * time.Second
	}
	return o
}

// cleanerCheckpointFile holds a channel's first dirty offset (decimal).
const cleanerCheckpointFile = "cleaner-offset"

// cleanSuffix names a cleaned segment (and its index files) before the swap.
const cleanSuffix = ".clean"

// dedupeEntryBytes is the accounted size of a key map entry beside its key bytes.
const dedupeEntryBytes = 48

// cleanerLog is a channel's cleaner state (Log.clean).
type cleanerLog struct {
	busy atomic.Bool
	// firstDirty is 1 + the cleaner checkpoint; 0 until read from the file.
	firstDirty atomic.Int64
	// tombstoneDue is the earliest delete horizon (ms) the last pass kept (a tombstone
	// or marker may go then); 0 none known.
	tombstoneDue atomic.Int64
}

// cleaner is the node's cleaner: threads, the I/O throttle.
type cleaner struct {
	st   *Store
	opts CleanerOptions

	ioMu    sync.Mutex
	ioStart time.Time
	ioBytes float64
}

// startCleaner starts the cleaner threads (Open).
func (s *Store) startCleaner() {
	o := s.opts.Cleaner.withDefaults()
	if o.Threads < 0 {
		return
	}
	c := &cleaner{st: s, opts: o, ioStart: time.Now()}
	s.cleaner = c
	for range o.Threads {
		s.wg.Add(1)
		go s.loop(o.Backoff, func() {
			for c.cleanOne() {
				select {
				case <-s.stop:
					return
				default:
				}
			}
		})
	}
}

// RunCleaner cleans every compacted channel that is due, once, on the calling
// goroutine (tests, benchmarks); in WAL mode it checkpoints first, so every closed
// segment is cleanable. It returns the number of passes run.
func (s *Store) RunCleaner() int {
	if err := s.RunCheckpoint(); err != nil {
		s.log.Warn("checkpoint before cleaning", zap.Error(err))
	}
	c := s.cleaner
	if c == nil {
		c = &cleaner{st: s, opts: s.opts.Cleaner.withDefaults(), ioStart: time.Now()}
	}
	n := 0
	for c.cleanOne() {
		n++
	}
	return n
}

// cleanOne cleans the dirtiest due channel not being cleaned; it reports whether it
// ran a pass.
func (c *cleaner) cleanOne() bool {
	now := c.st.nowMs()
	var best *Log
	bestRatio := -1.0
	for _, l := range c.st.snapshot() {
		cfg := l.cfg.Load()
		if !cfg.Compacted() || l.isClosed() || l.clean.busy.Load() {
			continue
		}
		ratio, due := l.dirtyRatio(cfg, now)
		c.st.metrics.CleanerDirtyRatio.WithLabelValues(l.name).Set(ratio)
		if due && ratio > bestRatio {
			best, bestRatio = l, ratio
		}
	}
	if best == nil || !best.clean.busy.CompareAndSwap(false, true) {
		return false
	}
	defer best.clean.busy.Store(false)
	threads := int64(max(c.opts.Threads, 1))
	if err := c.clean(best, c.opts.DedupeBufferBytes/threads, now); err != nil {
		if !errors.Is(err, ErrClosed) {
			best.log.Warn("log cleaner pass failed", zap.Error(err))
		}
		return false
	}
	return true
}

// throttle waits so the cleaner's I/O stays within IOBytesPerSecond.
func (c *cleaner) throttle(n int) {
	if c.opts.IOBytesPerSecond <= 0 {
		return
	}
	c.ioMu.Lock()
	c.ioBytes += float64(n)
	wait := time.Duration(c.ioBytes/c.opts.IOBytesPerSecond*float64(time.Second)) - time.Since(c.ioStart)
	if wait < -time.Second {
		// Idle time does not bank a burst beyond a second's worth.
		c.ioStart, c.ioBytes = time.Now().Add(-time.Second), c.opts.IOBytesPerSecond
		wait = 0
	}
	c.ioMu.Unlock()
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-c.st.stop:
		}
	}
}

// cleanableSegs returns the segments a pass may read and rewrite (see the package
// comment), oldest first.
func (l *Log) cleanableSegs(cfg *ChannelConfig, now int64) []*segment {
	bound := l.LastStable()
	if l.st.opts.WAL || l.st.opts.Raft != nil {
		l.st.ckptMu.Lock()
		bound = min(bound, l.wal.ckptNext)
		l.st.ckptMu.Unlock()
	}
	l.mu.Lock()
	bound = min(bound, l.active.base)
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	l.mu.Unlock()
	k := 0
	for ; k < len(segs)-1; k++ {
		s := segs[k]
		if segs[k+1].base > bound || cfg.MinCompactionLagMs > 0 && now-s.maxTS.Load() < cfg.MinCompactionLagMs {
			break
		}
	}
	return segs[:k]
}

// firstDirty returns the channel's cleaner checkpoint, read from its file at first use.
func (l *Log) firstDirty() int64 {
	if v := l.clean.firstDirty.Load(); v > 0 {
		return v - 1
	}
	v := int64(0)
	if b, err := os.ReadFile(filepath.Join(l.dir, cleanerCheckpointFile)); err == nil {
		v, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	l.clean.firstDirty.CompareAndSwap(0, max(v, 0)+1)
	return l.clean.firstDirty.Load() - 1
}

// dirtyRatio returns the dirty share of the cleanable bytes and whether a pass is due.
func (l *Log) dirtyRatio(cfg *ChannelConfig, now int64) (float64, bool) {
	segs := l.cleanableSegs(cfg, now)
	if len(segs) == 0 {
		return 0, false
	}
	first := max(l.firstDirty(), l.logStart.Load())
	var clean, dirty int64
	lagDue := false
	for i, s := range segs {
		end := s.next
		if i+1 < len(segs) {
			end = segs[i+1].base
		} else {
			end = max(end, s.base+1)
		}
		if end <= first {
			clean += s.size.Load()
			continue
		}
		if dirty == 0 && cfg.MaxCompactionLagMs > 0 && s.firstTS >= 0 && now-s.firstTS > cfg.MaxCompactionLagMs {
			lagDue = true
		}
		dirty += s.size.Load()
	}
	if clean+dirty == 0 {
		return 0, false
	}
	ratio := float64(dirty) / float64(clean+dirty)
	due := dirty > 0 && (ratio >= cfg.MinCleanableDirtyRatio || lagDue)
	if d := l.clean.tombstoneDue.Load(); d > 0 && now >= d {
		due = true
	}
	return ratio, due
}

// segEnd is the offset after the offsets segs[i] covers (the next segment's base).
func segEnd(segs []*segment, i int) int64 {
	if i+1 < len(segs) {
		return segs[i+1].base
	}
	return segs[i].next
}

// clean runs one pass over l with a key map of at most mapBytes.
func (c *cleaner) clean(l *Log, mapBytes int64, now int64) error {
	cfg := l.cfg.Load()
	segs := l.cleanableSegs(cfg, now)
	if len(segs) == 0 {
		return nil
	}
	start := time.Now()
	first := max(l.firstDirty(), l.logStart.Load())
	upper := segEnd(segs, len(segs)-1)
	aborted := l.abortedSpans(l.logStart.Load(), upper)

	// Build the key map over the dirty section.
	keys := make(map[string]int64)
	used := int64(0)
	mapEnd := first
	full := false
	for i, s := range segs {
		if full || segEnd(segs, i) <= first {
			continue
		}
		err := c.scanSegment(s, func(h *batchHeader, frame []byte) (bool, error) {
			if h.BaseOffset < first || h.Attributes&attrControl != 0 || isAborted(aborted, h) {
				mapEnd = max(mapEnd, h.NextOffset())
				return true, nil
			}
			var added int64
			err := eachRecord(frame, h, func(off int64, key, _ []byte, _ int64) {
				if _, ok := keys[string(key)]; !ok {
					added += int64(len(key)) + dedupeEntryBytes
				}
			})
			if err != nil {
				return false, err
			}
			if used+added > mapBytes && len(keys) > 0 {
				full = true
				return false, nil
			}
			used += added
			err = eachRecord(frame, h, func(off int64, key, _ []byte, _ int64) { keys[string(key)] = off })
			mapEnd = max(mapEnd, h.NextOffset())
			return true, err
		})
		if err != nil {
			return err
		}
		if !full {
			mapEnd = max(mapEnd, segEnd(segs, i))
		}
	}
	tombDue := l.clean.tombstoneDue.Load()
	if mapEnd <= first && (tombDue == 0 || now < tombDue) {
		return nil
	}
	tombDue = 0

	// The producers' last batches, kept (as headers when emptied); a producer with no
	// batch left in its state keeps the markers of its current epoch (Kafka
	// Cleaner.isBatchLastRecordOfProducer).
	l.mu.Lock()
	lastOf := make(map[int64]int64, len(l.prods))
	epochOf := make(map[int64]int16, len(l.prods))
	for pid, p := range l.prods {
		if p.n > 0 {
			lastOf[pid] = p.batches[p.n-1].baseOffset
		} else {
			epochOf[pid] = p.epoch
		}
	}
	l.mu.Unlock()

	isLast := func(h *batchHeader) bool {
		if h.ProducerID < 0 {
			return false
		}
		if off, ok := lastOf[h.ProducerID]; ok {
			return off == h.BaseOffset
		}
		e, ok := epochOf[h.ProducerID]
		return ok && h.Attributes&attrControl != 0 && e == h.ProducerEpoch
	}
	txns := newTxnCleaner(l.abortedEntries(l.logStart.Load(), upper))
	var read, written int64
	var todo []*segment
	for _, s := range segs {
		if s.base >= mapEnd {
			break
		}
		todo = append(todo, s)
	}
	for _, g := range groupSegments(todo, l.logStart.Load(), cfg.SegmentBytes) {
		var w *segWriter
		for _, s := range g {
			var out []byte
			changed := false
			err := c.scanSegment(s, func(h *batchHeader, frame []byte) (bool, error) {
				read += int64(len(frame))
				nb, keep, err := cleanBatch(frame, h, cleanCtx{
					keys: keys, mapEnd: mapEnd, now: now, retentionMs: cfg.DeleteRetentionMs, txns: txns, due: &tombDue,
					last: isLast(h),
				})
				switch {
				case err != nil:
					return false, err
				case !keep:
					changed = true
				case nb != nil:
					out = append(out, nb...)
					changed = true
				default:
					out = append(out, frame...)
				}
				return true, nil
			})
			if err != nil {
				w.discard()
				return err
			}
			// The index entries of aborted transactions with no record left go before any
			// of their markers may (a read_committed consumer given an aborted range with
			// no marker to end it would drop the producer's later records).
			if len(txns.drop) > 0 {
				if err := l.dropAborted(txns.drop); err != nil {
					w.discard()
					return err
				}
				txns.drop = txns.drop[:0]
			}
			if len(g) == 1 && !changed {
				break
			}
			if w == nil {
				if w, err = l.newSegWriter(g[0]); err != nil {
					return err
				}
			}
			c.throttle(len(out))
			if err := w.write(out); err != nil {
				w.discard()
				return err
			}
			written += int64(len(out))
			l.st.metrics.CleanerWrittenBytes.Add(float64(len(out)))
		}
		if w == nil {
			continue
		}
		if err := l.swapSegments(g, w); err != nil {
			return err
		}
	}
	l.clean.tombstoneDue.Store(tombDue)
	if err := writeFileAtomic(l.dir, cleanerCheckpointFile, []byte(strconv.FormatInt(mapEnd, 10)+"\n")); err != nil {
		return fmt.Errorf("%w: write cleaner checkpoint: %v", ErrStorage, err)
	}
	l.clean.firstDirty.Store(mapEnd + 1)
	m := l.st.metrics
	m.CleanerRemovedBytes.Add(float64(max(read-written, 0)))
	m.CleanerLastClean.WithLabelValues(l.name).Set(float64(time.Now().UnixMilli()) / 1000)
	l.log.Debug("log cleaner pass", zap.Int64("first_dirty", first), zap.Int64("map_end", mapEnd), zap.Int("keys", len(keys)),
		zap.Int64("read_bytes", read), zap.Int64("written_bytes", written), zap.Duration("took", time.Since(start)))
	return nil
}

// txnCleaner follows the transactions of a pass over the cleanable segments, oldest
// first, as Kafka's CleanedTransactionMetadata: it says which batches belong to an
// aborted transaction (removed) and which markers no longer have a record of their
// transaction in the log (removable after their delete horizon), and collects the
// aborted-index entries of transactions with no record left (drop).
type txnCleaner struct {
	aborted   []abortedTxn // not yet reached, by first offset
	ongoing   map[int64]*abortedRun
	committed map[int64]bool // producers with a batch of their committed transaction seen
	drop      []abortedTxn
}

type abortedRun struct {
	a        abortedTxn
	observed bool // a batch of the transaction is still in the log
}

func newTxnCleaner(aborted []abortedTxn) *txnCleaner {
	return &txnCleaner{aborted: aborted, ongoing: map[int64]*abortedRun{}, committed: map[int64]bool{}}
}

func (t *txnCleaner) reach(off int64) {
	for len(t.aborted) > 0 && t.aborted[0].first <= off {
		a := t.aborted[0]
		t.aborted = t.aborted[1:]
		if _, ok := t.ongoing[a.pid]; !ok {
			t.ongoing[a.pid] = &abortedRun{a: a}
		}
	}
}

// onBatch reports whether the data batch h belongs to an aborted transaction.
func (t *txnCleaner) onBatch(h *batchHeader) bool {
	t.reach(h.LastOffset())
	if h.Attributes&attrTransactional == 0 {
		return false
	}
	if r, ok := t.ongoing[h.ProducerID]; ok {
		r.observed = true
		return true
	}
	t.committed[h.ProducerID] = true
	return false
}

// onMarker reports whether the control batch frame may be removed: no batch of its
// transaction was seen in this pass (so none is left), or it is emptied or unknown.
func (t *txnCleaner) onMarker(h *batchHeader, frame []byte) bool {
	t.reach(h.LastOffset())
	if h.RecordCount == 0 {
		return true
	}
	ci, ok := parseControl(frame)
	if !ok {
		return false
	}
	if !ci.commit {
		r, ok := t.ongoing[h.ProducerID]
		delete(t.ongoing, h.ProducerID)
		if ok && r.observed {
			return false
		}
		if ok {
			t.drop = append(t.drop, r.a)
		}
		return true
	}
	seen := t.committed[h.ProducerID]
	delete(t.committed, h.ProducerID)
	return !seen
}

// cleanCtx is what cleanBatch needs of its pass.
type cleanCtx struct {
	keys        map[string]int64 // key -> newest offset below mapEnd
	mapEnd      int64
	now         int64 // ms
	retentionMs int64 // delete_retention_ms
	txns        *txnCleaner
	due         *int64 // earliest delete horizon kept (ms), 0 none; updated
	last        bool   // the producer's last batch (or a marker of its epoch): kept
}

// deleteHorizon returns the batch's delete horizon (ms) and whether it has one.
func deleteHorizon(h *batchHeader) (int64, bool) {
	if h.Attributes&attrDeleteHorizon == 0 {
		return 0, false
	}
	return h.BaseTimestamp, true
}

func (c *cleanCtx) keepDue(horizon int64) {
	if *c.due == 0 || horizon < *c.due {
		*c.due = horizon
	}
}

// cleanBatch decides one batch of a pass, as Kafka's Cleaner.cleanInto filter
// (KIP-534): it returns keep false to drop the batch, else the rewritten frame (nil:
// unchanged). A data batch of an aborted transaction goes; a record goes when the key
// map holds a newer offset of its key; a tombstone that is the newest of its key is
// kept, and its batch gets a delete horizon (now + delete_retention_ms) on the first
// pass that keeps it; a pass at or after the horizon removes it. A marker whose
// transaction has no record left gets a delete horizon the same way and goes on a pass
// at or after it. The producer's last batch stays, as a header of no records when all
// its records went, and so does a marker of its epoch when it has no batch left.
func cleanBatch(frame []byte, h *batchHeader, c cleanCtx) ([]byte, bool, error) {
	horizon, hasHorizon := deleteHorizon(h)
	if h.Attributes&attrControl != 0 {
		if !c.txns.onMarker(h, frame) || c.last {
			return nil, true, nil
		}
		if !hasHorizon {
			c.keepDue(c.now + c.retentionMs)
			nb, _, _, err := rebuildBatch(frame, h, nil, true, c.now+c.retentionMs)
			return nb, true, err
		}
		if c.now >= horizon {
			return nil, false, nil
		}
		c.keepDue(horizon)
		return nil, true, nil
	}
	if c.txns.onBatch(h) {
		if !c.last {
			return nil, false, nil
		}
		if h.RecordCount == 0 {
			return nil, true, nil
		}
		nb, _, _, err := rebuildBatch(frame, h, func(int64, []byte, []byte) bool { return false }, true, noHorizon)
		return nb, true, err
	}
	tombs := false
	nb, kept, total, err := rebuildBatch(frame, h, func(off int64, key, value []byte) bool {
		if off >= c.mapEnd {
			tombs = tombs || value == nil
			return true
		}
		if newest, ok := c.keys[string(key)]; ok && newest > off {
			return false
		}
		if value == nil {
			if hasHorizon && c.now >= horizon {
				return false
			}
			tombs = true
		}
		return true
	}, c.last, noHorizon)
	switch {
	case err != nil:
		return nil, false, err
	case kept == 0 && !c.last:
		return nil, false, nil
	case tombs && hasHorizon:
		c.keepDue(horizon)
	case tombs:
		// The first pass keeping a tombstone of this batch sets its delete horizon.
		c.keepDue(c.now + c.retentionMs)
		src, sh := frame, h
		if kept < total {
			src = nb
			nh := parseHeader(nb)
			sh = &nh
		}
		nb, _, _, err = rebuildBatch(src, sh, nil, true, c.now+c.retentionMs)
		return nb, true, err
	}
	return nb, true, nil
}

// scanSegment calls fn with every frame of the sealed segment s, oldest first, until fn
// returns false. The segment is read in 1 MiB chunks; a segment closed meanwhile
// (retention, delete, shutdown) ends the pass with ErrClosed.
func (c *cleaner) scanSegment(s *segment, fn func(h *batchHeader, frame []byte) (bool, error)) error {
	const chunk = 1 << 20
	size := s.size.Load()
	var buf []byte
	for pos := int64(0); pos < size; {
		n := min(int64(chunk), size-pos)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if s.closed.Load() {
			return ErrClosed
		}
		if _, err := s.f.ReadAt(b, pos); err != nil {
			if s.closed.Load() {
				return ErrClosed
			}
			return fmt.Errorf("%w: read %s: %v", ErrStorage, s.path, err)
		}
		c.throttle(len(b))
		c.st.metrics.CleanerReadBytes.Add(float64(len(b)))
		got := 0
		for got < len(b) {
			fl, err := frameLen(b[got:])
			if err != nil || fl > len(b)-got {
				break
			}
			h := parseHeader(b[got:])
			ok, err := fn(&h, b[got:got+fl])
			if err != nil || !ok {
				return err
			}
			got += fl
		}
		if got == 0 {
			// A frame larger than the chunk: read it whole.
			var hdr [batchHeaderLen]byte
			copy(hdr[:], b)
			h := parseHeader(hdr[:])
			if h.Length < batchHeaderLen || pos+int64(h.Length) > size {
				return fmt.Errorf("%w: bad batch at %d of %s", ErrDataLoss, pos, s.path)
			}
			big := make([]byte, h.Length)
			if _, err := s.f.ReadAt(big, pos); err != nil {
				return fmt.Errorf("%w: read %s: %v", ErrStorage, s.path, err)
			}
			ok, err := fn(&h, big)
			if err != nil || !ok {
				return err
			}
			got = len(big)
		}
		pos += int64(got)
	}
	return nil
}

// eachRecord calls fn with every record of a stored frame: offset, key, value and
// timestamp (ms; the batch's max timestamp for LogAppendTime).
func eachRecord(frame []byte, h *batchHeader, fn func(off int64, key, value []byte, ts int64)) error {
	recs, err := recordsSection(frame, h)
	if err != nil {
		return err
	}
	for i := 0; i < int(h.RecordCount) && len(recs) > 0; i++ {
		l, k := binary.Varint(recs)
		if k <= 0 || l < 0 || int64(len(recs)-k) < l {
			return fmt.Errorf("%w: record %d length at offset %d", ErrDataLoss, i, h.BaseOffset)
		}
		off, key, value, ts, err := recordFields(recs[k:k+int(l)], h)
		if err != nil {
			return err
		}
		fn(off, key, value, ts)
		recs = recs[k+int(l):]
	}
	return nil
}

// recordsSection returns the (decompressed) records of a stored frame.
func recordsSection(frame []byte, h *batchHeader) ([]byte, error) {
	if crc32.Checksum(frame[offAttributes:], castagnoli) != binary.BigEndian.Uint32(frame[offCRC:]) {
		return nil, fmt.Errorf("%w: CRC mismatch in the batch at offset %d", ErrDataLoss, h.BaseOffset)
	}
	recs := frame[batchHeaderLen:]
	if codec := h.Attributes & attrCompressionMask; codec != 0 {
		out, err := decompress(recs, codec)
		if err != nil {
			return nil, fmt.Errorf("%w: decompress: %v", ErrDataLoss, err)
		}
		recs = append([]byte(nil), out...)
	}
	return recs, nil
}

// recordFields parses a record body: absolute offset, key, value, timestamp.
func recordFields(body []byte, h *batchHeader) (int64, []byte, []byte, int64, error) {
	if len(body) < 1 {
		return 0, nil, nil, 0, fmt.Errorf("%w: empty record at offset %d", ErrDataLoss, h.BaseOffset)
	}
	r := recReader{b: body[1:]}
	tsDelta := r.varint()
	od := r.varint()
	key := r.bytes()
	value := r.bytes()
	if r.err != nil {
		return 0, nil, nil, 0, fmt.Errorf("%w: record at offset %d: %v", ErrDataLoss, h.BaseOffset, r.err)
	}
	ts := h.BaseTimestamp + tsDelta
	if h.Attributes&attrTimestampType != 0 {
		ts = h.MaxTimestamp
	}
	return h.BaseOffset + od, key, value, ts, nil
}

// noHorizon leaves a rebuilt batch's delete horizon as it was.
const noHorizon = math.MinInt64

// rebuildBatch rebuilds a stored frame with the records keep accepts (all when keep is
// nil), uncompressed, with the same base offset, last offset delta, max timestamp and
// producer fields and a new CRC. With horizon other than noHorizon the batch gets that
// delete horizon: the delete-horizon attribute, the horizon as base timestamp, and
// every record's timestamp delta rewritten so its timestamp is unchanged (Kafka
// MemoryRecordsBuilder with deleteHorizonMs). It returns the new frame, nil when it
// is unchanged (all kept, no horizon to set) or empty and not retainEmpty, and the
// kept and total record counts. With retainEmpty a batch of no records is kept as a
// header (a producer's last batch: Kafka keeps it so the producer state survives).
func rebuildBatch(frame []byte, h *batchHeader, keep func(off int64, key, value []byte) bool, retainEmpty bool, horizon int64) ([]byte, int, int, error) {
	recs, err := recordsSection(frame, h)
	if err != nil {
		return nil, 0, 0, err
	}
	base := h.BaseTimestamp
	if horizon != noHorizon {
		base = horizon
	}
	var body []byte
	kept, total := 0, 0
	for len(recs) > 0 && total < int(h.RecordCount) {
		l, k := binary.Varint(recs)
		if k <= 0 || l < 1 || int64(len(recs)-k) < l {
			return nil, 0, 0, fmt.Errorf("%w: record length at offset %d", ErrDataLoss, h.BaseOffset)
		}
		rec := recs[k : k+int(l)]
		off, key, value, _, err := recordFields(rec, h)
		if err != nil {
			return nil, 0, 0, err
		}
		total++
		if keep == nil || keep(off, key, value) {
			kept++
			if horizon == noHorizon {
				body = append(body, recs[:k+int(l)]...)
			} else {
				tsDelta, n := binary.Varint(rec[1:])
				if n <= 0 {
					return nil, 0, 0, fmt.Errorf("%w: record timestamp at offset %d", ErrDataLoss, h.BaseOffset)
				}
				nd := binary.AppendVarint(nil, h.BaseTimestamp+tsDelta-base)
				rest := rec[1+n:]
				body = binary.AppendVarint(body, int64(1+len(nd)+len(rest)))
				body = append(body, rec[0])
				body = append(body, nd...)
				body = append(body, rest...)
			}
		}
		recs = recs[k+int(l):]
	}
	if kept == total && horizon == noHorizon || kept == 0 && !retainEmpty {
		return nil, kept, total, nil
	}
	out := make([]byte, batchHeaderLen, batchHeaderLen+len(body))
	copy(out, frame[:batchHeaderLen])
	out = append(out, body...)
	binary.BigEndian.PutUint32(out[offBatchLength:], uint32(len(out)-batchLengthField))
	attrs := binary.BigEndian.Uint16(out[offAttributes:]) &^ uint16(attrCompressionMask)
	if horizon != noHorizon {
		attrs |= attrDeleteHorizon
		binary.BigEndian.PutUint64(out[offBaseTS:], uint64(base))
	}
	binary.BigEndian.PutUint16(out[offAttributes:], attrs)
	binary.BigEndian.PutUint32(out[offRecordCount:], uint32(kept))
	binary.BigEndian.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], castagnoli))
	return out, kept, total, nil
}

// groupSegments splits the segments a pass rewrites (consecutive, oldest first) into
// the runs each rewritten as one segment, as Kafka's Cleaner.groupSegmentsBySize: a run
// takes the next segment while the run's bytes before cleaning stay within maxBytes
// (segment_bytes) and its offsets within math.MaxInt32 of its base (the index's
// relative offsets), so the merged segment is no larger than a rolled one. Segments
// wholly below logStart are left out (retention removes them whole; merged into a
// live one they would stay, unreadable).
func groupSegments(segs []*segment, logStart, maxBytes int64) [][]*segment {
	var groups [][]*segment
	var size int64
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].base <= logStart {
			continue
		}
		n := len(groups)
		if n > 0 {
			g := groups[n-1]
			if size+s.size.Load() <= maxBytes && segEnd(segs, i)-g[0].base <= math.MaxInt32 {
				groups[n-1] = append(g, s)
				size += s.size.Load()
				continue
			}
		}
		groups = append(groups, []*segment{s})
		size = s.size.Load()
	}
	return groups
}

// segWriter writes the cleaned frames of a run of segments into the file that is to
// replace them (<base>.log.clean) and builds its indexes as it goes.
type segWriter struct {
	tmp string
	f   *os.File
	ns  *segment
	pos int64
}

// newSegWriter creates the file of the segment replacing a run starting with first.
func (l *Log) newSegWriter(first *segment) (*segWriter, error) {
	tmp := filepath.Join(l.dir, segmentName(first.base, ".log")+cleanSuffix)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStorage, err)
	}
	return &segWriter{tmp: tmp, f: f, ns: newSegment(first.base, first.path, f, first.createdMs)}, nil
}

// write appends the concatenated frames data.
func (w *segWriter) write(data []byte) error {
	if w.pos+int64(len(data)) > math.MaxUint32 {
		return fmt.Errorf("%w: cleaned segment %s would exceed 4 GiB", ErrStorage, w.ns.path)
	}
	if _, err := w.f.Write(data); err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrStorage, w.tmp, err)
	}
	for p := 0; p < len(data); {
		h := parseHeader(data[p:])
		w.ns.addIndex(&h, w.pos+int64(p))
		p += int(h.Length)
	}
	w.pos += int64(len(data))
	w.ns.size.Store(w.pos)
	return nil
}

// discard removes the unfinished file (nil: nothing written).
func (w *segWriter) discard() {
	if w == nil {
		return
	}
	_ = w.f.Close()
	_ = os.Remove(w.tmp)
}

// swapName is the name of a finished cleaned segment at base that replaces every
// segment with a base in [base, end) (the commit point of swapSegments).
func swapName(base, end int64) string {
	return segmentName(base, ".log") + "." + segmentName(end, swapSuffix)
}

// parseSwapName returns the base and end of a swapName.
func parseSwapName(name string) (base, end int64, ok bool) {
	rest, ok := strings.CutSuffix(name, swapSuffix)
	if !ok {
		return 0, 0, false
	}
	b, e, ok := strings.Cut(rest, ".log.")
	if !ok || len(b) != 20 || len(e) != 20 {
		return 0, 0, false
	}
	base, err1 := strconv.ParseInt(b, 10, 64)
	end, err2 := strconv.ParseInt(e, 10, 64)
	return base, end, err1 == nil && err2 == nil && base < end
}

// swapSuffix ends the name of a finished cleaned segment not yet in place.
const swapSuffix = ".swap"

// Steps of swapSegments, passed to Options.swapHook (crash tests).
const (
	swapStepWritten  = "written"  // the .clean file is written and fsynced
	swapStepCommit   = "commit"   // renamed to its swap name, directory fsynced
	swapStepRemoved  = "removed"  // one old file removed (once per file)
	swapStepRemoveOK = "removeok" // removals fsynced
	swapStepRenamed  = "renamed"  // the swap file renamed to the segment's name
	swapStepDone     = "done"     // directory fsynced, indexes written
)

// swapSegments replaces the sealed segments olds (consecutive in l.segs, oldest first)
// with the segment w wrote, at olds[0]'s base and name. Crash-safe (kill -9 or power
// loss at any step leaves, after openLog, the old segments or the new one, never
// both nor a part): w's file is fsynced, then renamed to swapName(base, end) (end: the
// base of the segment after olds) and the directory fsynced — the commit point; then
// the old segments' index files and the old .log files other than the first are
// removed, the directory fsynced, the swap file renamed over the first .log and the
// directory fsynced again. openLog finishes a swap file it finds (completeSwaps) and
// removes a .clean file. A run that retention changed meanwhile is left as it was
// (nil). Errors: ErrStorage, ErrClosed.
func (l *Log) swapSegments(olds []*segment, w *segWriter) error {
	dir := l.dir
	hook := func(step string) {
		if h := l.st.opts.swapHook; h != nil {
			h(step, len(olds))
		}
	}
	fail := func(err error) error {
		w.discard()
		return fmt.Errorf("%w: clean %s: %v", ErrStorage, olds[0].path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fail(err)
	}
	ns := w.ns
	last := olds[len(olds)-1]
	ns.next = last.next
	for _, s := range olds {
		ns.maxTS.Store(max(ns.maxTS.Load(), s.maxTS.Load()))
	}
	if olds[0].firstTS >= 0 {
		ns.firstTS = olds[0].firstTS
	}
	ns.lastBase = max(ns.lastBase, olds[0].base)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		w.discard()
		return ErrClosed
	}
	idx := -1
	for i, s := range l.segs {
		if s == olds[0] {
			idx = i
		}
	}
	if idx < 0 || idx+len(olds) >= len(l.segs) || !slices.Equal(l.segs[idx:idx+len(olds)], olds) {
		// Retention removed some meanwhile, or a run reached the active segment.
		w.discard()
		return nil
	}
	hook(swapStepWritten)
	end := l.segs[idx+len(olds)].base
	swap := filepath.Join(dir, swapName(olds[0].base, end))
	if err := os.Rename(w.tmp, swap); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		_ = os.Remove(swap)
		return fail(err)
	}
	// Committed: from here a failure stops the log (openLog finishes the swap).
	stop := func(err error) error {
		_ = w.f.Close()
		l.failLocked(err)
		return fmt.Errorf("%w: clean %s: %v", ErrStorage, olds[0].path, err)
	}
	hook(swapStepCommit)
	for i, s := range olds {
		exts := []string{".index", ".timeindex", ".log"}
		if i == 0 {
			exts = exts[:2]
		}
		for _, ext := range exts {
			if err := os.Remove(filepath.Join(dir, segmentName(s.base, ext))); err != nil && !os.IsNotExist(err) {
				return stop(err)
			}
			hook(swapStepRemoved)
		}
	}
	if err := syncDir(dir); err != nil {
		return stop(err)
	}
	hook(swapStepRemoveOK)
	if err := os.Rename(swap, olds[0].path); err != nil {
		return stop(err)
	}
	hook(swapStepRenamed)
	if err := syncDir(dir); err != nil {
		return stop(err)
	}
	segs := make([]*segment, 0, len(l.segs)-len(olds)+1)
	segs = append(segs, l.segs[:idx]...)
	segs = append(segs, ns)
	segs = append(segs, l.segs[idx+len(olds):]...)
	l.segMu.Lock()
	l.segs = segs
	l.segMu.Unlock()
	for _, s := range olds {
		_ = s.close()
	}
	if err := ns.writeIndexes(); err != nil {
		l.log.Warn("write indexes of a cleaned segment (rebuilt at the next start)", zap.String("segment", ns.path), zap.Error(err))
	}
	hook(swapStepDone)
	return nil
}

// completeSwaps finishes, in the channel directory dir at open, the swaps of
// swapSegments a crash interrupted after their commit point: for each swap file, the
// segment files with a base in its range are removed and it is renamed to its
// segment's name. ok reports whether any was found.
func completeSwaps(dir string, entries []os.DirEntry) (bool, error) {
	found := false
	for _, e := range entries {
		base, end, ok := parseSwapName(e.Name())
		if !ok {
			continue
		}
		found = true
		for _, o := range entries {
			n := o.Name()
			for _, ext := range []string{".log", ".index", ".timeindex"} {
				b, ok := strings.CutSuffix(n, ext)
				if !ok || len(b) != 20 {
					continue
				}
				if v, err := strconv.ParseInt(b, 10, 64); err == nil && v >= base && v < end {
					if err := os.Remove(filepath.Join(dir, n)); err != nil && !os.IsNotExist(err) {
						return found, err
					}
				}
			}
		}
		if err := syncDir(dir); err != nil {
			return found, err
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(dir, segmentName(base, ".log"))); err != nil {
			return found, err
		}
		if err := syncDir(dir); err != nil {
			return found, err
		}
	}
	return found, nil
}

// isCleanLeftover reports a file of a cleaner pass a crash interrupted (openLog
// removes them).
func isCleanLeftover(name string) bool { return strings.HasSuffix(name, cleanSuffix) }

// sparseOffset is the offset of a record of a cleaned batch (fewer records than its
// offset range): the base offset plus the record's offset delta; -1 when unreadable.
func sparseOffset(body []byte, base int64) int64 {
	if len(body) < 1 {
		return -1
	}
	r := recReader{b: body[1:]}
	_ = r.varint()
	od := r.varint()
	if r.err != nil || od < 0 || od > math.MaxInt32 {
		return -1
	}
	return base + od
}
