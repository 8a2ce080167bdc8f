package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"

	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"go.uber.org/zap"
)

// Raft mode's checkpoints and node WAL truncation (issue 16, step 4 without snapshots).
//
// Each group has a checkpoint in <data-dir>/raft-wal/checkpoint: the last entry
// (index, term) whose effects are durable on this node (for a channel: its segments
// fsynced up to offset next; for the metadata group: every create, delete and config
// change is durable when its apply returns) and the WAL floor last set for it. The
// checkpoint loop (Options.CheckpointInterval) fsyncs each channel's active segment
// (sealed ones are fsynced at their roll), records the checkpoint, then sets each
// group's floor to the smaller of its checkpoint and its raftnode.Compacted point
// (every voter has persisted the log up to it: no leader will send those entries
// again) and removes the WAL files wholly below the floors.
//
// At start the channels directory is kept: each channel's segments are cut back to
// the checkpointed offset (segments rolled after it removed, the one holding it
// truncated there: what lies past it is rebuilt by applying the entries above the
// checkpoint again, which assigns the same offsets), and each group resumes at its
// checkpoint (raftnode.Restart), replaying only the WAL above it. Without a
// checkpoint file (a node that never wrote one) the channels directory is rebuilt
// from the whole WAL, as before.
//
// Two changes are made durable at once instead of waiting for the loop: a metadata
// entry that changes anything writes the metadata group's checkpoint when applied,
// so a restart re-applies at most that entry to a state that already has it (create
// adopts the channel whose group is the entry's; delete and config are idempotent),
// never a run of creates and deletes to a state ahead of them; and a channel's
// DeleteRecords entry first checkpoints the channel (its segments' end is in the
// active segment, which DeleteRecords never removes), so the cut at start never falls
// in a segment DeleteRecords removed.

const raftCheckpointFile = "checkpoint"

// raftCheckpoint is one group's line of the checkpoint file.
type raftCheckpoint struct {
	// index, term: the last entry whose effects are durable here.
	index, term uint64
	// next: a channel's segments end at this offset after that entry.
	next int64
	// floor: the WAL floor last set for the group; the WAL holds every entry above it.
	floor raftnode.Floor
}

var raftCheckpointMagic = []byte("TRC1")

const raftCheckpointLine = 48

// encodeRaftCheckpoint: "TRC1" | count uint32 | count x (group, index, term, next,
// floor index, floor term: 8 bytes each) | crc32c of all before (big endian).
func encodeRaftCheckpoint(c map[uint64]raftCheckpoint) []byte {
	b := make([]byte, 0, 12+raftCheckpointLine*len(c))
	b = append(b, raftCheckpointMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
	for g, e := range c {
		b = binary.BigEndian.AppendUint64(b, g)
		b = binary.BigEndian.AppendUint64(b, e.index)
		b = binary.BigEndian.AppendUint64(b, e.term)
		b = binary.BigEndian.AppendUint64(b, uint64(e.next))
		b = binary.BigEndian.AppendUint64(b, e.floor.Index)
		b = binary.BigEndian.AppendUint64(b, e.floor.Term)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// readRaftCheckpoint reads dir's checkpoint file; ok is false when there is none. A
// damaged file is ErrDataLoss (it is written atomically, so damage is the disk's).
func readRaftCheckpoint(dir string) (c map[uint64]raftCheckpoint, ok bool, err error) {
	path := filepath.Join(dir, raftCheckpointFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	bad := fmt.Errorf("%w: %s is damaged", ErrDataLoss, path)
	if len(b) < 12 || string(b[:4]) != string(raftCheckpointMagic) ||
		crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, false, bad
	}
	n := int(binary.BigEndian.Uint32(b[4:]))
	if len(b) != 12+raftCheckpointLine*n {
		return nil, false, bad
	}
	c = make(map[uint64]raftCheckpoint, n)
	for i := 0; i < n; i++ {
		p := b[8+raftCheckpointLine*i:]
		c[binary.BigEndian.Uint64(p)] = raftCheckpoint{
			index: binary.BigEndian.Uint64(p[8:]), term: binary.BigEndian.Uint64(p[16:]),
			next:  int64(binary.BigEndian.Uint64(p[24:])),
			floor: raftnode.Floor{Index: binary.BigEndian.Uint64(p[32:]), Term: binary.BigEndian.Uint64(p[40:])},
		}
	}
	return c, true, nil
}

func (c raftCheckpoint) restart() raftnode.Restart {
	return raftnode.Restart{Applied: raftnode.Floor{Index: c.index, Term: c.term}, Floor: c.floor}
}

// raftCutAt is the offset channel group's segments are cut back to at start: its
// checkpointed end when raft mode resumes from a checkpoint file (0 for a channel
// created after the last one was written), none otherwise.
func (s *Store) raftCutAt(group uint64) int64 {
	if s.raftResume == nil {
		return math.MaxInt64
	}
	return s.raftResume[group].next
}

// cutSegments removes channel dir's segments (and their index and producer snapshot
// files) whose base is past end and, of the one that then ends the log, its index
// files (it is scanned again as the active segment, which recoverActive cuts at
// end). bases is sorted; it returns those kept. Errors: ErrDataLoss when no segment
// starts at or below end.
func cutSegments(dir string, bases []int64, end int64) ([]int64, error) {
	k := len(bases)
	for k > 0 && bases[k-1] > end {
		k--
	}
	if k == 0 && len(bases) > 0 {
		return nil, fmt.Errorf("%w: %s: the checkpoint ends at offset %d, before the first segment (%d)", ErrDataLoss, dir, end, bases[0])
	}
	var errs []error
	rm := func(base int64, exts ...string) {
		for _, ext := range exts {
			if err := os.Remove(filepath.Join(dir, segmentName(base, ext))); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	for _, b := range bases[k:] {
		rm(b, ".log", ".index", ".timeindex", ".snapshot")
	}
	if k > 0 {
		rm(bases[k-1], ".index", ".timeindex")
	}
	if len(errs) == 0 && k < len(bases) {
		errs = append(errs, syncDir(dir))
	}
	return bases[:k], errors.Join(errs...)
}

// writeRaftCheckpoint writes the checkpoint file. Caller holds ckptMu.
func (r *raftState) writeCheckpointLocked() error {
	return writeFileAtomic(r.walDir(), raftCheckpointFile, encodeRaftCheckpoint(r.ckpts))
}

func (r *raftState) walDir() string { return filepath.Join(r.s.dir, raftWALDir) }

// mergeLocked records c for group g unless g's checkpoint is already at or past it.
// Caller holds ckptMu.
func (r *raftState) mergeLocked(g uint64, c raftCheckpoint) {
	old, ok := r.ckpts[g]
	if ok && old.index >= c.index {
		return
	}
	c.floor = old.floor
	r.ckpts[g] = c
}

// checkpointMeta records, at once, the metadata group's checkpoint at its entry
// (index, term), just applied (metaSM: a change is durable when its apply returns).
func (r *raftState) checkpointMeta(index, term uint64) {
	r.s.ckptMu.Lock()
	defer r.s.ckptMu.Unlock()
	r.mergeLocked(metaGroup, raftCheckpoint{index: index, term: term})
	if err := r.writeCheckpointLocked(); err != nil {
		r.s.log.Error("raft checkpoint of the metadata group", zap.Error(err))
	}
}

// forget drops a deleted channel's checkpoint.
func (r *raftState) forget(g uint64) {
	r.s.ckptMu.Lock()
	delete(r.ckpts, g)
	r.s.ckptMu.Unlock()
}

// checkpointLog checkpoints channel l at once, at its last applied entry at (on its
// apply goroutine, before an entry that removes segments: DeleteRecords). Errors: the
// segment fsync's or the file write's; either fences the channel (this replica can
// no longer follow the group's entries safely).
func (r *raftState) checkpointLog(l *Log, at raftnode.Floor) error {
	l.mu.Lock()
	seg, next := l.active, l.next
	l.mu.Unlock()
	err := l.fsyncSeg(seg)
	if err == nil {
		r.s.ckptMu.Lock()
		r.mergeLocked(l.wal.group, raftCheckpoint{index: at.Index, term: at.Term, next: next})
		if c := r.ckpts[l.wal.group]; c.index == at.Index {
			l.wal.ckptIndex, l.wal.ckptNext = c.index, c.next
		}
		err = r.writeCheckpointLocked()
		r.s.ckptMu.Unlock()
	}
	if err != nil {
		l.mu.Lock()
		l.failLocked(err)
		l.mu.Unlock()
	}
	return err
}

// sealProducers makes channel l's producer state durable as it is after entry at (a
// producer expiry, on the apply goroutine): a start rebuilds it from the producer
// snapshot of its last segment and that segment's batches, so the active segment is
// rolled (its successor's snapshot is the state now) or, when empty, its snapshot
// rewritten, and the channel checkpointed at the entry, so the next start cuts no
// earlier than that. Errors as checkpointLog's, or the roll's (the channel is fenced).
func (r *raftState) sealProducers(l *Log, at raftnode.Floor) error {
	l.mu.Lock()
	var err error
	if l.active.size.Load() > 0 {
		err = l.rollLocked(r.s.nowMs())
	} else {
		err = writeSnapshot(l.dir, l.active.base, l.prods, l.txn.Load(), l.logStart.Load())
	}
	if err != nil {
		l.failLocked(err)
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return r.checkpointLog(l, at)
}

// RunRaftCheckpoint checkpoints every group (raft mode; the checkpoint loop runs it
// every Options.CheckpointInterval): the metadata group at its applied entry, each
// channel written since its last checkpoint at its applied entry once its active
// segment is fsynced (an entry applied before this node's own WAL write of it is
// durable waits for the next round), then sets the WAL floors and removes the WAL
// files below them. Errors: fsync failures (the channel is fenced), the checkpoint
// file's write, the WAL's file removal.
func (s *Store) RunRaftCheckpoint() error {
	r := s.raft
	if r == nil {
		return nil
	}
	node := r.node
	type update struct {
		g uint64
		c raftCheckpoint
		l *Log
	}
	var ups []update
	var errs []error
	durable := func(g, index uint64) bool {
		d, err := node.DurableIndex(g)
		return err == nil && index <= d
	}
	var mi, mt uint64
	if node.WithApplied(metaGroup, func(i, t uint64) { mi, mt = i, t }) == nil && durable(metaGroup, mi) {
		ups = append(ups, update{g: metaGroup, c: raftCheckpoint{index: mi, term: mt}})
	}
	for _, l := range s.snapshot() {
		g := l.wal.group
		var c raftCheckpoint
		var seg *segment
		skip := true
		err := node.WithApplied(g, func(i, t uint64) {
			c.index, c.term = i, t
			l.mu.Lock()
			seg, c.next, skip = l.active, l.next, l.closed || l.failed != nil
			l.mu.Unlock()
		})
		if err != nil || skip || c.index <= r.checkpointIndex(g) || !durable(g, c.index) {
			continue
		}
		if err := l.fsyncSeg(seg); err != nil {
			if !errors.Is(err, os.ErrClosed) {
				l.mu.Lock()
				l.failLocked(err)
				l.mu.Unlock()
				errs = append(errs, err)
			}
			continue
		}
		ups = append(ups, update{g: g, c: c, l: l})
	}
	s.ckptMu.Lock()
	for _, u := range ups {
		r.mergeLocked(u.g, u.c)
		if c := r.ckpts[u.g]; u.l != nil && c.index == u.c.index {
			u.l.wal.ckptIndex, u.l.wal.ckptNext = c.index, c.next
		}
	}
	for g, c := range r.ckpts {
		cf, err := node.Compacted(g)
		if err != nil {
			delete(r.ckpts, g) // deleted
			continue
		}
		f := raftnode.Floor{Index: c.index, Term: c.term}
		if cf.Index < f.Index {
			f = cf
		}
		if f.Index > c.floor.Index {
			c.floor = f
			r.ckpts[g] = c
		}
	}
	floors := make(map[uint64]uint64, len(r.ckpts))
	for g, c := range r.ckpts {
		floors[g] = c.floor.Index
	}
	// The floors are durable before any file below them is removed: a restart
	// resumes each group's log right after its floor.
	if err := r.writeCheckpointLocked(); err != nil {
		s.ckptMu.Unlock()
		return errors.Join(append(errs, err)...)
	}
	s.ckptMu.Unlock()
	for g, f := range floors {
		r.w.SetFloor(g, f)
	}
	for g := range floors {
		if _, err := node.Compacted(g); err != nil {
			r.w.DropGroup(g) // deleted meanwhile: SetFloor must not hold its files
		}
	}
	if _, err := r.w.Truncate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkpointIndex is group g's checkpointed entry index (0: none).
func (r *raftState) checkpointIndex(g uint64) uint64 {
	r.s.ckptMu.Lock()
	defer r.s.ckptMu.Unlock()
	return r.ckpts[g].index
}

// closeCheckpoint writes the last checkpoint once the groups are stopped and the
// channels closed (closing fsyncs the active segments): the next start replays
// nothing it does not have to. closed maps each channel to its close error.
func (r *raftState) closeCheckpoint(closed map[*Log]error) error {
	r.s.ckptMu.Lock()
	defer r.s.ckptMu.Unlock()
	for l, err := range closed {
		if err != nil || l.failed != nil {
			continue
		}
		g := l.wal.group
		_ = r.node.WithApplied(g, func(i, t uint64) {
			if d, err := r.node.DurableIndex(g); err == nil && i <= d {
				r.mergeLocked(g, raftCheckpoint{index: i, term: t, next: l.next})
			}
		})
	}
	var mi, mt uint64
	if r.node.WithApplied(metaGroup, func(i, t uint64) { mi, mt = i, t }) == nil {
		if d, err := r.node.DurableIndex(metaGroup); err == nil && mi <= d {
			r.mergeLocked(metaGroup, raftCheckpoint{index: mi, term: mt})
		}
	}
	return r.writeCheckpointLocked()
}
