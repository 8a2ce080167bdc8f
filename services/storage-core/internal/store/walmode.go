package store

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// WAL mode (Options.WAL, issue 16 step 1). Every append is an entry of the channel's
// group in the node write-ahead log (internal/wal), which one writer goroutine fsyncs
// for all channels at once; the append is acknowledged, and the high watermark moves,
// once the WAL fsync covers it. The segment write is unchanged (offsets, producer and
// transaction state assigned under Log.mu: the apply step) but not fsynced on the
// append path: a checkpoint loop fsyncs each channel's active segment in the
// background and then records, per group, the last entry index (and next offset) the
// segments hold durably, in <data-dir>/wal/checkpoint; WAL files wholly at or below
// every group's checkpoint are removed. At start each channel's active segment may be
// cut at a bad batch anywhere past its checkpointed offset (not only a torn tail: the
// page cache writes back in any order), and the WAL entries above the checkpoint are
// written into the segments again, skipping frames already there (apply is keyed by
// entry index, then by offset), so it is idempotent.
//
// Entries are raftpb.Entry (term walTerm: there is no election in step 1) whose data
// is a command byte and its payload:
//
//	cmdFrames: the frames as written to the segment (offsets stamped), one or more.

const (
	walDirName     = "wal"
	checkpointFile = "checkpoint"
	// walTerm is the term of every entry in step 1 (one node, no elections).
	walTerm = 1
	// cmdFrames: the entry holds stamped RecordBatch frames.
	cmdFrames = 1
)

// walLog is a channel's state in the WAL. group is set at open (from meta.json); the
// other fields: index under Log.mu, marks/synced under Log.syncMu, ckpt* by the
// checkpoint loop (and Open).
type walLog struct {
	l     *Log
	group uint64
	index uint64 // last entry index written
	// marks are the high watermarks of written entries waiting for their WAL fsync,
	// in lsn order; synced is the last lsn the WAL reported durable for this group.
	marks  []walMark
	synced uint64
	// ckptIndex / ckptNext: what the last checkpoint recorded (segments fsynced).
	ckptIndex uint64
	ckptNext  int64
	replayErr error
}

type walMark struct {
	lsn uint64
	hw  hwMark
}

var _ wal.Waiter = (*walLog)(nil)

// Durable publishes the high watermark of every entry up to lsn (WAL writer).
func (w *walLog) Durable(lsn uint64) {
	l := w.l
	l.syncMu.Lock()
	w.synced = max(w.synced, lsn)
	w.publishLocked()
	l.syncMu.Unlock()
}

// Failed fails every append waiting on the WAL (WAL writer).
func (w *walLog) Failed(err error) {
	l := w.l
	l.syncMu.Lock()
	if l.syncErr == nil {
		l.syncErr = err
	}
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
}

// publishLocked publishes the last mark the WAL covers. Caller holds syncMu.
func (w *walLog) publishLocked() {
	k := 0
	for k < len(w.marks) && w.marks[k].lsn <= w.synced {
		k++
	}
	if k == 0 {
		return
	}
	m := w.marks[k-1].hw
	n := copy(w.marks, w.marks[k:])
	w.marks = w.marks[:n]
	l := w.l
	if m.next > l.durable {
		l.durable = m.next
		l.publish(m)
	}
	l.syncCond.Broadcast()
}

// walAppendLocked writes the frames b just written to the segment (ending at hw) as
// the group's next WAL entry. Caller holds Log.mu. Its durability wait is walWait.
func (l *Log) walAppendLocked(b []byte, res AppendResult, hw hwMark) (AppendResult, int64, error) {
	w := &l.wal
	lsn, err := l.st.wal.AppendData(w.group, walTerm, w.index+1, []byte{cmdFrames}, b, w)
	if err != nil {
		// The segment holds what the WAL does not: fence the channel, as a failed write.
		l.failLocked(err)
		return AppendResult{}, 0, fmt.Errorf("%w: write-ahead log: %v", ErrStorage, err)
	}
	w.index++
	l.syncMu.Lock()
	w.marks = append(w.marks, walMark{lsn: lsn, hw: hw})
	if w.synced >= lsn {
		w.publishLocked()
	}
	l.syncMu.Unlock()
	return res, hw.next, nil
}

// walWait blocks until offsets below target are covered by a WAL fsync. Errors as
// syncTo.
func (l *Log) walWait(target int64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	for l.durable < target {
		if l.syncErr != nil {
			if errors.Is(l.syncErr, wal.ErrClosed) {
				return ErrClosed
			}
			return fmt.Errorf("%w: fsync: %v", ErrStorage, l.syncErr)
		}
		if l.closedFlag.Load() {
			return ErrClosed
		}
		l.syncCond.Wait()
	}
	return nil
}

// replayEntry applies a WAL entry found at start above the checkpoint: frames already
// in the segment (a frame's next offset at or below the log's) are skipped, the others
// written as the append did. A frame past the log's end is a gap: ErrDataLoss.
func (l *Log) replayEntry(e *raftpb.Entry, openMs int64) error {
	if len(e.Data) == 0 || e.Data[0] != cmdFrames {
		return fmt.Errorf("%w: WAL entry %d of channel %s has an unknown command", ErrDataLoss, e.Index, l.name)
	}
	b := e.Data[1:]
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := 0; p < len(b); {
		n, err := frameLen(b[p:])
		if err != nil {
			return fmt.Errorf("%w: WAL entry %d of channel %s: %v", ErrDataLoss, e.Index, l.name, err)
		}
		frame := b[p : p+n]
		p += n
		h := parseHeader(frame)
		if h.NextOffset() <= l.next {
			continue
		}
		if h.BaseOffset != l.next {
			return fmt.Errorf("%w: WAL entry %d of channel %s starts at offset %d, but the segments end at %d",
				ErrDataLoss, e.Index, l.name, h.BaseOffset, l.next)
		}
		if err := l.maybeRollLocked(int64(n), openMs); err != nil {
			return fmt.Errorf("%w: roll segment: %v", ErrStorage, err)
		}
		seg := l.active
		pos := seg.size.Load()
		seg.reserve(pos, int64(n), l.cfg.Load().SegmentBytes)
		if _, err := seg.f.WriteAt(frame, pos); err != nil {
			return fmt.Errorf("%w: write: %v", ErrStorage, err)
		}
		seg.addIndex(&h, pos)
		var ctrl []byte
		if h.Attributes&attrControl != 0 {
			ctrl = frame
		}
		l.recoverBatch(&h, ctrl, openMs)
		seg.size.Store(pos + int64(n))
		l.next = h.NextOffset()
	}
	l.wal.index = e.Index
	return nil
}

// checkpoint is one group's line in <data-dir>/wal/checkpoint: entries up to index
// are in fsynced segments, which end at offset next.
type checkpoint struct {
	index uint64
	next  int64
}

var checkpointMagic = []byte("TWC1")

// encodeCheckpoint: "TWC1" | count uint32 | count x (group, index uint64, next int64)
// | crc32c of all before (big endian).
func encodeCheckpoint(c map[uint64]checkpoint) []byte {
	b := append([]byte(nil), checkpointMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
	for g, e := range c {
		b = binary.BigEndian.AppendUint64(b, g)
		b = binary.BigEndian.AppendUint64(b, e.index)
		b = binary.BigEndian.AppendUint64(b, uint64(e.next))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// readCheckpoint reads dir's checkpoint; a missing file is an empty checkpoint, a
// damaged one an error (it is written atomically, so damage is the disk's).
func readCheckpoint(dir string) (map[uint64]checkpoint, error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[uint64]checkpoint{}, nil
	}
	if err != nil {
		return nil, err
	}
	bad := fmt.Errorf("%w: %s is damaged", ErrDataLoss, filepath.Join(dir, checkpointFile))
	if len(b) < 12 || string(b[:4]) != string(checkpointMagic) ||
		crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, bad
	}
	n := int(binary.BigEndian.Uint32(b[4:]))
	if len(b) != 12+24*n {
		return nil, bad
	}
	c := make(map[uint64]checkpoint, n)
	for i := 0; i < n; i++ {
		p := b[8+24*i:]
		c[binary.BigEndian.Uint64(p)] = checkpoint{index: binary.BigEndian.Uint64(p[8:]), next: int64(binary.BigEndian.Uint64(p[16:]))}
	}
	return c, nil
}

func (s *Store) walDir() string { return filepath.Join(s.dir, walDirName) }

// walCutFrom is the offset from which channel group's active segment may be cut at
// start (see recoverActive): its checkpointed end in WAL mode, none otherwise.
func (s *Store) walCutFrom(group uint64) int64 {
	if !s.opts.WAL {
		return math.MaxInt64
	}
	return s.ckpt[group].next
}

// newGroupID returns a random non-zero group id.
func newGroupID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if g := binary.BigEndian.Uint64(b[:]) >> 1; g != 0 {
			return g
		}
	}
}

// checkWALDir refuses a data directory holding WAL files when WAL mode is off: the
// acknowledged appends they hold may be in no fsynced segment.
func (s *Store) checkWALDir() error {
	ents, err := os.ReadDir(s.walDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".wal" {
			return fmt.Errorf("%s holds a write-ahead log written in WAL mode (--wal): start with --wal, whose clean shutdown leaves every segment fsynced", s.walDir())
		}
	}
	return nil
}

// openWAL gives every channel a group, replays the WAL into the segments, publishes
// each channel's end and starts the checkpoint loop. Called by Open after the channels
// are loaded.
func (s *Store) openWAL() error {
	byGroup := make(map[uint64]*Log, len(s.logs))
	for _, l := range s.logs {
		if l.wal.group == 0 || byGroup[l.wal.group] != nil {
			l.wal.group = newGroupID()
			if err := l.writeMetaLocked(); err != nil {
				return fmt.Errorf("write meta of %s: %w", l.name, err)
			}
		}
		byGroup[l.wal.group] = l
		c := s.ckpt[l.wal.group]
		l.wal.index, l.wal.ckptIndex, l.wal.ckptNext = c.index, c.index, c.next
	}
	openMs := s.nowMs()
	m := s.metrics
	w, err := wal.Open(s.walDir(), wal.Options{
		SegmentBytes: s.opts.WALFileBytes,
		OnSync: func(d time.Duration, n int) {
			m.WALFsyncs.Inc()
			m.WALFsyncSeconds.Observe(d.Seconds())
			m.GroupCommitSize.Observe(float64(n))
		},
		ReplayEntry: func(g uint64, e *raftpb.Entry) error {
			l := byGroup[g]
			if l == nil || l.wal.replayErr != nil || e.Index <= l.wal.index {
				return nil // a deleted channel's, or already in the segments
			}
			if err := l.replayEntry(e, openMs); err != nil {
				l.wal.replayErr = err
			}
			return nil
		},
	}, s.log.Named("wal"))
	if err != nil {
		return fmt.Errorf("open write-ahead log: %w", err)
	}
	s.wal = w
	for g, l := range byGroup {
		if err := l.wal.replayErr; err != nil {
			s.log.Error("channel fenced: its write-ahead log entries do not fit its segments", zap.String("channel", l.name), zap.Error(err))
			l.closeFiles()
			delete(s.logs, l.name)
			s.fenced[l.name] = fencedChannel{dir: l.dir, err: err}
			continue
		}
		l.durable = l.next
		l.publish(hwMark{next: l.next, segBase: l.active.base, pos: l.active.size.Load()})
		l.LastStable()
		w.SetFloor(g, l.wal.ckptIndex)
	}
	// Checkpoint now: what was replayed, and channels written before WAL mode was on
	// (no checkpoint yet), get fsynced segments and a checkpointed end.
	return s.RunCheckpoint()
}

// RunCheckpoint fsyncs the active segment of every channel written since the last
// checkpoint, records the checkpoint and removes the WAL files it frees (WAL mode; the
// checkpoint loop runs it every Options.CheckpointInterval).
func (s *Store) RunCheckpoint() error {
	if s.wal == nil {
		return nil
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	logs := s.snapshot()
	c := make(map[uint64]checkpoint, len(logs))
	var errs []error
	for _, l := range logs {
		l.mu.Lock()
		seg, next, idx, pos := l.active, l.next, l.wal.index, l.active.size.Load()
		skip := l.closed || l.failed != nil
		l.mu.Unlock()
		if !skip && (idx != l.wal.ckptIndex || next != l.wal.ckptNext) {
			if err := l.fsyncSeg(seg); err != nil {
				if !errors.Is(err, os.ErrClosed) {
					l.mu.Lock()
					l.failLocked(err)
					l.mu.Unlock()
					errs = append(errs, err)
				}
			} else {
				seg.dropBehind(pos)
				l.wal.ckptIndex, l.wal.ckptNext = idx, next
			}
		}
		c[l.wal.group] = checkpoint{index: l.wal.ckptIndex, next: l.wal.ckptNext}
	}
	if err := s.writeCheckpoint(c); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for g, e := range c {
		s.wal.SetFloor(g, e.index)
	}
	for _, l := range logs {
		if l.isClosed() {
			s.wal.DropGroup(l.wal.group) // deleted meanwhile
		}
	}
	if _, err := s.wal.Truncate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Store) writeCheckpoint(c map[uint64]checkpoint) error {
	return writeFileAtomic(s.walDir(), checkpointFile, encodeCheckpoint(c))
}

// closeWAL writes the last checkpoint after every channel was closed (closing fsyncs
// the active segments), closes the WAL and removes the files it no longer needs.
func (s *Store) closeWAL(closed map[*Log]error) error {
	c := make(map[uint64]checkpoint, len(closed))
	for l, err := range closed {
		if err == nil && l.failed == nil {
			l.wal.ckptIndex, l.wal.ckptNext = l.wal.index, l.next
		}
		c[l.wal.group] = checkpoint{index: l.wal.ckptIndex, next: l.wal.ckptNext}
	}
	werr := s.wal.Close()
	if err := s.writeCheckpoint(c); err != nil {
		return errors.Join(werr, err)
	}
	for g, e := range c {
		s.wal.SetFloor(g, e.index)
	}
	_, terr := s.wal.Truncate()
	return errors.Join(werr, terr)
}
