package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The leader-epoch index of a channel in raft mode (Kafka's LeaderEpochFileCache and
// its leader-epoch-checkpoint file; KIP-101, KIP-279). Every entry of a channel's Raft
// group that writes records (an append, a transaction marker) or opens a term
// (cmdRaftEpoch) assigns its term at the log end offset it is applied at, before it
// writes; the index keeps, per epoch, the first offset of that epoch, ascending in both.
// It is built at apply, so it is the same on every replica, and persisted in
// leader-epoch-checkpoint in the channel's directory at every change (rare: once per
// term that writes, and at log-start moves). At open it is read back (or rebuilt from
// the batches' partitionLeaderEpoch when the file is missing), cut to the log end and
// trimmed to the log start. The default mode has no index: its epoch is 0 forever.

// epochFile is the index's file in the channel directory (Kafka's name and format:
// version 0, the entry count, then one "epoch start-offset" line per entry).
const epochFile = "leader-epoch-checkpoint"

// epochEntry is an epoch and the offset of its first record.
type epochEntry struct {
	epoch int32
	start int64
}

// epochIndex is a channel's leader-epoch index; its methods are safe for concurrent use.
type epochIndex struct {
	dir string
	mu  sync.Mutex
	e   []epochEntry
}

// assign records that epoch begins at offset start (Kafka LeaderEpochFileCache.assign):
// entries whose epoch is at least epoch or that start at or after start give way to it;
// the same epoch as the latest is no change. It persists a change.
func (x *epochIndex) assign(epoch int32, start int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n := len(x.e); n > 0 && x.e[n-1].epoch == epoch && x.e[n-1].start <= start {
		return nil
	}
	k := len(x.e)
	for k > 0 && (x.e[k-1].epoch >= epoch || x.e[k-1].start >= start) {
		k--
	}
	x.e = append(x.e[:k], epochEntry{epoch: epoch, start: start})
	return x.persistLocked()
}

// trimStart drops what lies before the log start (Kafka truncateFromStart): the entries
// that start before logStart go, except the last of them, which then starts at logStart.
// A nil index (the default mode) has nothing to trim.
func (x *epochIndex) trimStart(logStart int64) error {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	k := 0
	for k < len(x.e) && x.e[k].start < logStart {
		k++
	}
	if k == 0 || (k == 1 && x.e[0].start == logStart) {
		return nil
	}
	last := x.e[k-1]
	last.start = logStart
	x.e = append([]epochEntry{last}, x.e[k:]...)
	return x.persistLocked()
}

// cutEnd drops the entries that start past end, the log end offset (Kafka
// truncateFromEnd, which also drops an entry at end: here one starting at end may be
// the opening of a term without records yet, which raft does not apply again).
func (x *epochIndex) cutEnd(end int64) bool {
	k := len(x.e)
	for k > 0 && x.e[k-1].start > end {
		k--
	}
	cut := k < len(x.e)
	x.e = x.e[:k]
	return cut
}

// latest is the largest epoch in the index (false: none).
func (x *epochIndex) latest() (int32, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.e) == 0 {
		return 0, false
	}
	return x.e[len(x.e)-1].epoch, true
}

// endOffsetFor answers OffsetForLeaderEpoch for requested as Kafka's leader does
// (LeaderEpochFileCache.endOffsetFor): for the latest epoch, that epoch and leo;
// otherwise the start offset of the first epoch above requested, with the largest
// epoch at or below requested (requested itself when it is older than every epoch
// kept). An epoch above every one kept, -1 (UNDEFINED_EPOCH), or an empty index answer
// (-1, -1).
func (x *epochIndex) endOffsetFor(requested int32, leo int64) (int32, int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := len(x.e)
	if requested < 0 || n == 0 {
		return -1, -1
	}
	if x.e[n-1].epoch == requested {
		return requested, leo
	}
	hi := sort.Search(n, func(i int) bool { return x.e[i].epoch > requested })
	switch hi {
	case n:
		return -1, -1
	case 0:
		return requested, x.e[0].start
	}
	return x.e[hi-1].epoch, x.e[hi].start
}

func (x *epochIndex) persistLocked() error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(x.e))
	for _, e := range x.e {
		fmt.Fprintf(&b, "%d %d\n", e.epoch, e.start)
	}
	if err := writeFileAtomic(x.dir, epochFile, b.Bytes()); err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrStorage, epochFile, err)
	}
	return nil
}

// readEpochFile parses dir's epoch file; ok is false when there is none.
func readEpochFile(dir string) (e []epochEntry, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, epochFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	bad := func(what string) error {
		return fmt.Errorf("%w: %s in %s: %s", ErrDataLoss, epochFile, dir, what)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 2 || lines[0] != "0" {
		return nil, false, bad("not version 0")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n != len(lines)-2 {
		return nil, false, bad("entry count does not match")
	}
	for _, ln := range lines[2:] {
		es, ss, _ := strings.Cut(ln, " ")
		ep, err1 := strconv.ParseInt(es, 10, 32)
		st, err2 := strconv.ParseInt(ss, 10, 64)
		if err1 != nil || err2 != nil || ep < 0 || st < 0 {
			return nil, false, bad("entry " + strconv.Quote(ln))
		}
		if k := len(e); k > 0 && (e[k-1].epoch >= int32(ep) || e[k-1].start > st) {
			return nil, false, bad("entries not ascending")
		}
		e = append(e, epochEntry{epoch: int32(ep), start: st})
	}
	return e, true, nil
}

// openEpochs loads channel l's epoch index at open (raft mode): the file cut to the
// log end and trimmed to the log start, or, without a file, rebuilt from the
// partitionLeaderEpoch of every batch kept.
func (l *Log) openEpochs() error {
	x := &epochIndex{dir: l.dir}
	e, ok, err := readEpochFile(l.dir)
	if err != nil {
		return err
	}
	if !ok {
		if e, err = l.scanEpochs(); err != nil {
			return err
		}
	}
	x.e = e
	x.mu.Lock()
	changed := x.cutEnd(l.next) || !ok
	if changed {
		err = x.persistLocked()
	}
	x.mu.Unlock()
	if err != nil {
		return err
	}
	if err := x.trimStart(l.logStart.Load()); err != nil {
		return err
	}
	l.epochs = x
	return nil
}

// scanEpochs reads the partitionLeaderEpoch of every batch from the log start on and
// returns where each epoch begins.
func (l *Log) scanEpochs() ([]epochEntry, error) {
	var e []epochEntry
	start := l.logStart.Load()
	var hdr [batchHeaderLen]byte
	for _, s := range l.segs {
		size := s.size.Load()
		for pos := int64(0); pos+batchHeaderLen <= size; {
			if _, err := s.f.ReadAt(hdr[:], pos); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("read batch header at %d of %s: %w", pos, s.path, err)
			}
			h := parseHeader(hdr[:])
			if h.Length < batchHeaderLen {
				return nil, fmt.Errorf("%w: bad batch at %d of %s", ErrCorruptBatch, pos, s.path)
			}
			ep := int32(binary.BigEndian.Uint32(hdr[offPartitionLeaderEpoch:]))
			if h.NextOffset() > start && ep >= 0 {
				if k := len(e); k == 0 || ep > e[k-1].epoch {
					e = append(e, epochEntry{epoch: ep, start: max(h.BaseOffset, start)})
				}
			}
			pos += int64(h.Length)
		}
	}
	return e, nil
}

// kafkaEpoch is a Raft term as a Kafka leader epoch (int32; terms past it are capped).
func kafkaEpoch(term uint64) int32 {
	return int32(min(term, math.MaxInt32))
}
