package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// binding copies matching records of a source log into its queue's log, in source
// order, exactly once. Every copied record carries HeaderSource and HeaderSourceSeq;
// the cursor (next source sequence) is checkpointed in the state file now and then
// together with the queue log's high watermark at that moment, and recovered at open
// as max(checkpoint, last copied source sequence + 1 found in the queue log from the
// checkpoint's offset on). A record is copied only after every earlier one was, and
// the cursor moves only after the copy is durable, so a crash anywhere neither loses
// nor repeats a record.
type binding struct {
	q          *Queue
	source     string
	filterExpr string
	filter     Filter
	start      int64
	srcCreated int64        // the source log's creation time (0: not recorded)
	cursor     atomic.Int64 // next source sequence to look at
	// committed: copy at isolation read_committed (Binding.ReadCommitted); set again
	// by a share fetch (Queue.SetShareIsolation).
	committed atomic.Bool

	// appended holds a copied chunk as the queue log's records, for loadAppended
	// (pump goroutine only).
	appended []store.Record

	ckptCursor int64 // last checkpointed cursor (pump goroutine only)
	ckptHW     int64 // queue log high watermark of that checkpoint (pump goroutine only)
	ckptAt     time.Time

	// durable tracks the queue offset from which the committed checkpoint's recovery
	// rescans the queue log: retention never trims the log past it (maintain), or a
	// crash would copy the trimmed records again.
	durable struct {
		sync.Mutex
		off        int64 // queue offset of the last committed checkpoint
		pending    *dbOp // the last enqueued checkpoint, not known committed yet
		pendingOff int64
	}
}

// setDurable records the queue offset of a committed checkpoint (open, create).
func (b *binding) setDurable(off int64) {
	b.durable.Lock()
	b.durable.off, b.durable.pending = off, nil
	b.durable.Unlock()
}

// durableOff returns the queue offset of the last committed checkpoint.
func (b *binding) durableOff() int64 {
	b.durable.Lock()
	defer b.durable.Unlock()
	if p := b.durable.pending; p != nil {
		select {
		case <-p.done:
			if p.err == nil {
				b.durable.off = max(b.durable.off, b.durable.pendingOff)
			}
			b.durable.pending = nil
		default:
		}
	}
	return b.durable.off
}

// Pump limits: records per source read, bytes per queue append.
const (
	pumpReadRecords = 1000
	pumpReadBytes   = 1 << 20
	pumpAppendBytes = 1 << 20
	pumpRetry       = time.Second
	ckptEvery       = time.Second
)

func encodeCkpt(cursor, queueOff int64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(cursor))
	binary.BigEndian.PutUint64(b[8:], uint64(queueOff))
	return b
}

func decodeCkpt(b []byte) (cursor, queueOff int64, ok bool) {
	if len(b) != 16 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])), true
}

// run pumps until stop is closed or the queue's log is closed.
func (b *binding) run(stop <-chan struct{}) {
	defer b.q.pumps.Done()
	log := b.q.m.log.With(zap.String("queue", b.q.name), zap.String("source", b.source))
	retry := func() bool {
		t := time.NewTimer(pumpRetry)
		defer t.Stop()
		select {
		case <-stop:
			return false
		case <-t.C:
			return true
		}
	}
	warned := false
	for {
		select {
		case <-stop:
			b.checkpoint(true)
			return
		default:
		}
		src, err := b.q.m.st.Get(b.source)
		if err == nil && b.srcCreated != 0 && src.CreatedMs() != b.srcCreated {
			err = fmt.Errorf("%w: %s was deleted and created again; the binding follows the deleted log", store.ErrNotFound, b.source)
		}
		if err != nil {
			if !warned {
				log.Warn("binding source unavailable; retrying", zap.Error(err))
				warned = true
			}
			b.checkpoint(false)
			if !retry() {
				return
			}
			continue
		}
		changed := src.Changed()
		cur := b.cursor.Load()
		off := channel.SequenceToOffset(cur)
		if start := src.LogStart(); off < start {
			log.Warn("binding cursor below the source's log start; records removed by retention are skipped",
				zap.Int64("cursor", cur), zap.Int64("log_start_sequence", channel.OffsetToSequence(start)))
			off = start
			b.cursor.Store(channel.OffsetToSequence(off))
		}
		if hw := src.HighWatermark(); off > hw {
			// Only after a restart that cut the source's tail (a torn or corrupt last
			// batch): the next records appended take the cut sequences, so the
			// binding must look at them instead of skipping them.
			log.Error("binding cursor past the source's end (its tail was cut at start); resuming at its end",
				zap.Int64("cursor", cur), zap.Int64("source_next_sequence", channel.OffsetToSequence(hw)))
			b.rewind(channel.OffsetToSequence(hw))
			continue
		}
		committed := b.committed.Load()
		end := src.HighWatermark()
		if committed {
			end = src.LastStable()
		}
		if off >= end {
			b.checkpoint(false)
			t := time.NewTimer(pumpRetry) // also notices a deleted and recreated source
			select {
			case <-stop:
				t.Stop()
				b.checkpoint(true)
				return
			case <-changed:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		read := src.ReadRecords
		if committed {
			read = src.ReadCommitted
		}
		recs, next, err := read(off, pumpReadRecords, pumpReadBytes)
		if err != nil {
			if errors.Is(err, store.ErrOutOfRange) {
				continue
			}
			log.Warn("binding read failed; retrying", zap.Error(err))
			if !retry() {
				return
			}
			continue
		}
		warned = false
		done, err := b.copy(recs)
		if err != nil {
			if errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrNotFound) {
				return // queue deleted or shutting down
			}
			log.Warn("binding append to the queue failed; retrying", zap.Error(err))
			b.cursor.Store(done)
			if !retry() {
				return
			}
			continue
		}
		b.cursor.Store(channel.OffsetToSequence(next))
		b.q.fill()
		b.checkpoint(false)
	}
}

// copy appends the matching records of recs to the queue log, in chunks of about
// pumpAppendBytes. On error it returns the source sequence of the first record not
// copied.
func (b *binding) copy(recs []store.Record) (int64, error) {
	met := b.q.m.opts.Metrics
	var chunk []store.NewRecord
	chunkStart := int64(0) // source sequence of the chunk's first record
	size := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		res, _, err := b.q.log.Append(chunk)
		if err == nil {
			met.Copied.Add(float64(len(chunk)))
			if res.LogAppendTime < 0 && !res.Duplicate {
				b.loadAppended(res.BaseOffset, chunk)
			}
		}
		chunk, size = chunk[:0], 0
		return err
	}
	for _, r := range recs {
		if r.Control {
			continue
		}
		if !matches(b.filter, r.Headers) {
			met.Filtered.Inc()
			continue
		}
		seq := channel.OffsetToSequence(r.Offset)
		if len(chunk) == 0 {
			chunkStart = seq
		}
		hs := make([]store.Header, 0, len(r.Headers)+2)
		hs = append(hs, r.Headers...)
		hs = append(hs, store.Header{Key: HeaderSource, Value: []byte(b.source)},
			store.Header{Key: HeaderSourceSeq, Value: strconv.AppendInt(nil, seq, 10)})
		ts := r.Timestamp
		if ts <= 0 {
			ts = 1 // 0 would mean "now" to the encoder
		}
		chunk = append(chunk, store.NewRecord{Timestamp: ts, Key: r.Key, Value: r.Value, Headers: hs})
		size += len(r.Key) + len(r.Value) + 64
		for _, h := range r.Headers {
			size += len(h.Key) + len(h.Value)
		}
		if size >= pumpAppendBytes {
			if err := flush(); err != nil {
				return chunkStart, err
			}
		}
	}
	if err := flush(); err != nil {
		return chunkStart, err
	}
	return 0, nil
}

// loadAppended hands the chunk just appended at queue offset base to the window
// (Queue.loadAppended), as the records a read of the queue log would decode: offsets
// from base, the timestamps stored, no producer. The window copies what it takes.
func (b *binding) loadAppended(base int64, chunk []store.NewRecord) {
	recs := b.appended[:0]
	for i, r := range chunk {
		recs = append(recs, store.Record{
			Offset: base + int64(i), Timestamp: r.Timestamp, Key: r.Key, Value: r.Value,
			Headers: r.Headers, ProducerID: -1, ProducerEpoch: -1,
		})
	}
	b.q.loadAppended(recs)
	clear(recs) // the source read's buffer, not kept
	b.appended = recs[:0]
}

// rewind moves the cursor back to cur and checkpoints it, lowering the stored one
// (checkpoint never lowers it), and waits for the commit.
func (b *binding) rewind(cur int64) {
	b.cursor.Store(cur)
	hw := b.q.log.HighWatermark()
	name, source, inc := b.q.name, b.source, b.q.inc
	op := b.q.m.db.enqueue(func(tx *bolt.Tx) error {
		s := incStateBucket(tx, name, inc)
		if s == nil {
			return nil
		}
		return s.Bucket(bktCursors).Put([]byte(source), encodeCkpt(cur, hw))
	})
	b.ckptCursor, b.ckptHW, b.ckptAt = cur, hw, time.Now()
	if err := op.wait(); err != nil {
		b.q.m.log.Warn("binding checkpoint not persisted", zap.String("queue", name), zap.String("source", source), zap.Error(err))
		return
	}
	b.setDurable(hw)
}

// checkpoint records the cursor with the queue log's high watermark (everything this
// binding copied so far is below it), at most every ckptEvery unless force. It does
// not wait for the commit: a lost checkpoint only means a longer rescan at open.
func (b *binding) checkpoint(force bool) {
	cur := b.cursor.Load()
	hw := b.q.log.HighWatermark()
	// An idle binding checkpoints too while other bindings grow the queue log, so
	// its checkpoint's offset (durableOff) does not hold retention back.
	if cur == b.ckptCursor && hw == b.ckptHW || !force && time.Since(b.ckptAt) < ckptEvery && b.ckptCursor != 0 {
		return
	}
	b.ckptCursor, b.ckptHW, b.ckptAt = cur, hw, time.Now()
	name, source, inc := b.q.name, b.source, b.q.inc
	op := b.q.m.db.enqueue(func(tx *bolt.Tx) error {
		s := incStateBucket(tx, name, inc)
		if s == nil {
			return nil
		}
		cb := s.Bucket(bktCursors)
		if old, _, ok := decodeCkpt(cb.Get([]byte(source))); ok && old > cur {
			return nil
		}
		return cb.Put([]byte(source), encodeCkpt(cur, hw))
	})
	b.durable.Lock()
	if b.durable.pending == nil || b.durable.pendingOff <= hw {
		b.durable.pending, b.durable.pendingOff = op, hw
	}
	b.durable.Unlock()
}
