// Package wal is storage-core's per-node write-ahead log: one log shared by every
// group (channel) of the node, holding go.etcd.io/raft/v3 entries (raftpb.Entry: index,
// term, data) and hard states (raftpb.HardState) per group. One writer goroutine
// writes whatever every group appended since its last round with one write and one
// fdatasync, so appends of all groups share fsyncs (the shape of raft's
// AsyncStorageWrites: the caller hands entries over and is told when they are durable).
//
// On disk, <dir>/<seq>.wal files (seq a 20-digit counter), allocated as zeros 4 MiB
// ahead of the writes so most fdatasyncs update no file size, rolled once past
// SegmentBytes, holding 8-byte aligned records:
//
//	crc32c uint32 (of bytes 4..end of payload) | payload length uint32 |
//	lsn uint64 | synced uint64 | group uint64 | kind uint8 | 7 zero bytes |
//	payload (raftpb.Entry or raftpb.HardState, marshaled) | zero padding to 8
//
// lsn numbers records 1, 2, ... across files; synced is the highest lsn known durable
// when the record was written. A zero header ends a file. At Open the last file's first
// bad record starts a torn tail, which is cut, unless an intact record after it says
// (synced) that the bad one had been fsynced: that is damage to acknowledged data, and
// Open fails with ErrDataLoss, as it does for any bad record in an earlier file (fsynced
// whole before the next file was started). A new file gets the latest hard state of
// every group first (lsn 0), so removing older files never loses one.
//
// Truncation: the owner says per group which entries it no longer needs (SetFloor,
// e.g. the applied index whose segment data is fsynced); Truncate removes the oldest
// files whose every entry is at or below its group's floor. A group with no floor (a
// deleted channel, DropGroup) holds no file.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/storage-core/internal/diskio"
)

// Record kinds.
const (
	kindEntry     = 1
	kindHardState = 2
)

const (
	headerLen = 40
	// DefaultSegmentBytes is the size WAL files are rolled at.
	DefaultSegmentBytes = 64 << 20
	fileExt             = ".wal"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors.
var (
	// ErrDataLoss: a record that was fsynced (or lies in a file before the last one)
	// fails its CRC or framing: acknowledged data is damaged. Open refuses the WAL.
	ErrDataLoss = errors.New("wal: fsynced record is damaged")
	// ErrFailed: a write or fsync of the WAL failed; every later Append fails too
	// (after a failed fsync the page cache cannot be trusted).
	ErrFailed = errors.New("wal: write failed")
	// ErrClosed: the WAL is closed.
	ErrClosed = errors.New("wal: closed")
)

// Waiter is told when a group's records appended in a round are durable (Durable with
// the round's last lsn) or will never be (Failed). Calls come from the writer
// goroutine, holding no WAL lock, in lsn order.
type Waiter interface {
	Durable(lsn uint64)
	Failed(err error)
}

// Options configure a WAL.
type Options struct {
	// SegmentBytes is the file size a file is rolled at (once a round ends past it).
	// 0 = DefaultSegmentBytes.
	SegmentBytes int64
	// OnSync, when set, is called after every fsync round with its duration and the
	// number of records it made durable (metrics).
	OnSync func(d time.Duration, records int)
	// ReplayEntry and ReplayHardState are called by Open for every record found, in
	// lsn order (a file's carried hard states first). e.Data aliases a read buffer:
	// copy what outlives the call. An error stops Open.
	ReplayEntry     func(group uint64, e *raftpb.Entry) error
	ReplayHardState func(group uint64, hs raftpb.HardState) error
}

// file is one WAL file.
type file struct {
	seq  uint64
	path string
	// maxIdx: per group, the largest entry index in the file (truncation).
	maxIdx map[uint64]uint64
}

// round is what was appended since the writer's last swap.
type round struct {
	buf     []byte
	maxIdx  map[uint64]uint64
	waiters []Waiter
	records int
	lastLSN uint64
	// eager: the round holds something other than lazy hard states (AppendLazy),
	// so the writer writes it as soon as it is free.
	eager bool
}

func newRound() *round { return &round{maxIdx: map[uint64]uint64{}} }

// WAL is an open write-ahead log. Append is safe for concurrent use; per group the
// caller keeps entries in index order (storage-core appends under the channel's lock).
type WAL struct {
	dir  string
	opts Options
	log  *zap.Logger

	// mu guards the pending round, lsn, hard states, floors and failure.
	mu      sync.Mutex
	cur     *round
	lsn     uint64 // last lsn assigned
	synced  uint64 // last lsn durable
	hs      map[uint64]raftpb.HardState
	floors  map[uint64]uint64
	err     error
	closing bool
	kick    chan struct{}
	done    chan struct{}
	// flush: Flush asked for the pending round to be written even if it holds
	// only lazy hard states.
	flush bool

	// filesMu guards files (appended by the writer, prefix removed by Truncate).
	filesMu sync.Mutex
	files   []*file
	// writer state (writer goroutine only)
	f       *os.File
	fpos    int64
	dropped int64 // page cache dropped below this position of f
	alloc   int64 // f is allocated (zeros) up to here
	spare   *round
}

// Open opens (creating) the WAL in dir, replays every record through the Options'
// callbacks, cuts a torn tail and starts the writer. New records go to a new file.
// Errors: ErrDataLoss (see the package doc), a callback's error, I/O errors.
func Open(dir string, opts Options, log *zap.Logger) (*WAL, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w := &WAL{dir: dir, opts: opts, log: log, cur: newRound(), spare: newRound(),
		hs: map[uint64]raftpb.HardState{}, floors: map[uint64]uint64{},
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	seqs, err := listFiles(dir)
	if err != nil {
		return nil, err
	}
	for i, seq := range seqs {
		f := &file{seq: seq, path: filepath.Join(dir, fileName(seq)), maxIdx: map[uint64]uint64{}}
		if err := w.replayFile(f, i == len(seqs)-1); err != nil {
			return nil, err
		}
		w.files = append(w.files, f)
	}
	w.synced = w.lsn
	next := uint64(1)
	if len(seqs) > 0 {
		next = seqs[len(seqs)-1] + 1
	}
	if err := w.startFile(next); err != nil {
		return nil, err
	}
	go w.writer()
	return w, nil
}

// Truncated reports whether files were ever removed from the WAL in dir (Truncate):
// its oldest file is not the first one written. A directory without files is not.
// Errors: reading dir.
func Truncated(dir string) (bool, error) {
	seqs, err := listFiles(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return len(seqs) > 0 && seqs[0] > 1, nil
}

func fileName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, fileExt) }

func listFiles(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		b, ok := strings.CutSuffix(e.Name(), fileExt)
		if !ok || len(b) != 20 {
			continue
		}
		v, err := strconv.ParseUint(b, 10, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, v)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs, nil
}

// hdr is a parsed record header.
type hdr struct {
	crc    uint32
	n      uint32
	lsn    uint64
	synced uint64
	group  uint64
	kind   byte
}

func parseHdr(b []byte) hdr {
	return hdr{crc: binary.LittleEndian.Uint32(b), n: binary.LittleEndian.Uint32(b[4:]),
		lsn: binary.LittleEndian.Uint64(b[8:]), synced: binary.LittleEndian.Uint64(b[16:]),
		group: binary.LittleEndian.Uint64(b[24:]), kind: b[32]}
}

func recLen(n uint32) int64 { return (headerLen + int64(n) + 7) &^ 7 }

// intact reports whether a whole record with a matching CRC starts at b[0].
func intact(b []byte) (hdr, bool) {
	if len(b) < headerLen || b[32] != kindEntry && b[32] != kindHardState {
		return hdr{}, false
	}
	h := parseHdr(b)
	if h.kind != kindEntry && h.kind != kindHardState || int64(len(b)) < headerLen+int64(h.n) {
		return h, false
	}
	return h, crc32.Checksum(b[4:headerLen+int(h.n)], castagnoli) == h.crc
}

// replayFile reads f, calling the replay callbacks. In the last file a bad record
// starts a torn tail, cut here; elsewhere it is ErrDataLoss.
func (w *WAL) replayFile(f *file, last bool) error {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return err
	}
	pos := int64(0)
	head := true // carried hard states (lsn 0) come first
	size := int64(len(data))
	bad := false
	for pos+headerLen <= size {
		h, ok := intact(data[pos:])
		if !ok {
			// A zero header is the end of what was written, or, in the last file, a
			// page never written back before a crash: checked below like a bad one.
			bad = !allZero(data[pos:pos+headerLen]) || last
			break
		}
		if h.lsn == 0 {
			if !head || h.kind != kindHardState {
				bad = true
				break
			}
		} else {
			if w.lsn != 0 && h.lsn != w.lsn+1 {
				bad = true
				break
			}
			head = false
			w.lsn = h.lsn
		}
		payload := data[pos+headerLen : pos+headerLen+int64(h.n)]
		switch h.kind {
		case kindEntry:
			var e raftpb.Entry
			if err := e.Unmarshal(payload); err != nil {
				return fmt.Errorf("%w: %s at byte %d: entry does not decode: %v", ErrDataLoss, f.path, pos, err)
			}
			if e.Index > f.maxIdx[h.group] {
				f.maxIdx[h.group] = e.Index
			}
			if w.opts.ReplayEntry != nil {
				if err := w.opts.ReplayEntry(h.group, &e); err != nil {
					return err
				}
			}
		case kindHardState:
			var hs raftpb.HardState
			if err := hs.Unmarshal(payload); err != nil {
				return fmt.Errorf("%w: %s at byte %d: hard state does not decode: %v", ErrDataLoss, f.path, pos, err)
			}
			w.hs[h.group] = hs
			if w.opts.ReplayHardState != nil {
				if err := w.opts.ReplayHardState(h.group, hs); err != nil {
					return err
				}
			}
		}
		pos += recLen(h.n)
	}
	if pos+headerLen > size && pos < size && !allZero(data[pos:]) {
		bad = true // a partial header
	}
	if !bad {
		return nil
	}
	if !last {
		return fmt.Errorf("%w: %s: bad record at byte %d in a file that was fsynced whole", ErrDataLoss, f.path, pos)
	}
	// A bad record in the last file: a torn tail unless a later intact record was
	// written after it had been fsynced.
	for p := pos + 8; p+headerLen <= size; p += 8 {
		h, ok := intact(data[p:])
		if !ok || h.lsn <= w.lsn {
			continue
		}
		if h.synced > w.lsn {
			return fmt.Errorf("%w: %s: bad record at byte %d (lsn %d), but the record at byte %d was written after lsn %d was fsynced",
				ErrDataLoss, f.path, pos, w.lsn+1, p, h.synced)
		}
	}
	if allZero(data[pos:]) {
		return nil // the clean end: nothing to cut
	}
	w.log.Warn("truncated torn tail of the write-ahead log", zap.String("file", f.path),
		zap.Int64("valid_bytes", pos), zap.Uint64("last_lsn", w.lsn))
	fh, err := os.OpenFile(f.path, os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer fh.Close()
	if err := fh.Truncate(pos); err != nil {
		return err
	}
	return fh.Sync()
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// startFile creates file seq, preallocates it, writes the carried hard states and
// fsyncs it and the directory. Writer goroutine (or Open) only.
func (w *WAL) startFile(seq uint64) error {
	path := filepath.Join(w.dir, fileName(seq))
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	// Zeros ahead of the writes (allocChunk at a time): appends then change no file
	// size, so most fdatasyncs write no metadata; a zero header marks the end.
	_ = fallocate(fh, 0, min(allocChunk, w.opts.SegmentBytes))
	w.alloc = min(allocChunk, w.opts.SegmentBytes)
	w.mu.Lock()
	hs := make(map[uint64]raftpb.HardState, len(w.hs))
	for g, s := range w.hs {
		hs[g] = s
	}
	synced := w.synced
	w.mu.Unlock()
	var buf []byte
	for g, s := range hs {
		buf = appendRecord(buf, kindHardState, 0, synced, g, &s)
	}
	if len(buf) > 0 {
		if _, err := fh.WriteAt(buf, 0); err != nil {
			_ = fh.Close()
			return err
		}
	}
	if err := fh.Sync(); err != nil {
		_ = fh.Close()
		return err
	}
	if err := syncDir(w.dir); err != nil {
		_ = fh.Close()
		return err
	}
	if w.f != nil {
		_ = w.f.Close()
	}
	w.f, w.fpos, w.dropped = fh, int64(len(buf)), 0
	w.filesMu.Lock()
	w.files = append(w.files, &file{seq: seq, path: path, maxIdx: map[uint64]uint64{}})
	w.filesMu.Unlock()
	return nil
}

// marshaler is what raftpb's generated types offer.
type marshaler interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

func appendRecord(buf []byte, kind byte, lsn, synced, group uint64, m marshaler) []byte {
	n := m.Size()
	start := len(buf)
	total := int(recLen(uint32(n)))
	buf = grow(buf, total)
	r := buf[start : start+total]
	binary.LittleEndian.PutUint32(r[4:], uint32(n))
	binary.LittleEndian.PutUint64(r[8:], lsn)
	binary.LittleEndian.PutUint64(r[16:], synced)
	binary.LittleEndian.PutUint64(r[24:], group)
	r[32] = kind
	clear(r[33:headerLen])
	_, _ = m.MarshalToSizedBuffer(r[headerLen : headerLen+n])
	clear(r[headerLen+n:])
	binary.LittleEndian.PutUint32(r, crc32.Checksum(r[4:headerLen+n], castagnoli))
	return buf
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 64<<10))
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// Append hands entries and, when hs is not nil, a hard state of group to the writer
// and returns the lsn of the last record; w is told (Durable) once it is durable. The
// caller keeps each group's entries in index order. Errors: ErrFailed, ErrClosed.
func (w *WAL) Append(group uint64, ents []raftpb.Entry, hs *raftpb.HardState, wt Waiter) (uint64, error) {
	return w.append(group, ents, hs, wt, true)
}

// AppendLazy is Append of a hard state alone that does not start a write of its own:
// it is written (and wt told) with the next round an Append starts, or at the next
// Flush. For a hard state whose only change is the commit index, which raft does not
// need durable at once (etcd's MustSync is false for it): a follower learns a new
// commit index with every MsgApp, and a write and fsync of its own for each would
// delay the next entries' round.
func (w *WAL) AppendLazy(group uint64, hs raftpb.HardState, wt Waiter) (uint64, error) {
	return w.append(group, nil, &hs, wt, false)
}

// Flush has the writer write what was appended lazily (AppendLazy), if anything.
func (w *WAL) Flush() {
	w.mu.Lock()
	pending := len(w.cur.buf) > 0 && !w.cur.eager
	if pending {
		w.flush = true
	}
	w.mu.Unlock()
	if pending {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

func (w *WAL) append(group uint64, ents []raftpb.Entry, hs *raftpb.HardState, wt Waiter, eager bool) (uint64, error) {
	w.mu.Lock()
	if w.err != nil || w.closing {
		err := w.err
		if err == nil {
			err = ErrClosed
		}
		w.mu.Unlock()
		return 0, err
	}
	r := w.cur
	if _, seen := r.maxIdx[group]; !seen && wt != nil {
		r.waiters = append(r.waiters, wt)
	}
	mi := r.maxIdx[group]
	for i := range ents {
		w.lsn++
		r.buf = appendRecord(r.buf, kindEntry, w.lsn, w.synced, group, &ents[i])
		mi = max(mi, ents[i].Index)
	}
	r.maxIdx[group] = mi
	if hs != nil {
		w.lsn++
		r.buf = appendRecord(r.buf, kindHardState, w.lsn, w.synced, group, hs)
		w.hs[group] = *hs
	}
	r.records += len(ents)
	if hs != nil {
		r.records++
	}
	r.lastLSN = w.lsn
	r.eager = r.eager || eager
	lsn := w.lsn
	w.mu.Unlock()
	if eager {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return lsn, nil
}

// AppendEntry is Append of one normal entry (term, index, data) without a hard state.
func (w *WAL) AppendEntry(group, term, index uint64, data []byte, wt Waiter) (uint64, error) {
	e := [1]raftpb.Entry{{Term: term, Index: index, Type: raftpb.EntryNormal, Data: data}}
	return w.Append(group, e[:], nil, wt)
}

// AppendData is AppendEntry of one normal entry whose data is head followed by body,
// encoded straight into the writer's buffer (no copy of the two joined). The record is
// a raftpb.Entry on disk, as Append writes it.
func (w *WAL) AppendData(group, term, index uint64, head, body []byte, wt Waiter) (uint64, error) {
	dlen := uint64(len(head) + len(body))
	n := 1 + uvarintLen(term) + 1 + uvarintLen(index) + 2 + 1 + uvarintLen(dlen) + int(dlen)
	w.mu.Lock()
	if w.err != nil || w.closing {
		err := w.err
		if err == nil {
			err = ErrClosed
		}
		w.mu.Unlock()
		return 0, err
	}
	r := w.cur
	mi, seen := r.maxIdx[group]
	if !seen && wt != nil {
		r.waiters = append(r.waiters, wt)
	}
	r.maxIdx[group] = max(mi, index)
	w.lsn++
	start := len(r.buf)
	total := int(recLen(uint32(n)))
	r.buf = grow(r.buf, total)
	rec := r.buf[start : start+total]
	binary.LittleEndian.PutUint32(rec[4:], uint32(n))
	binary.LittleEndian.PutUint64(rec[8:], w.lsn)
	binary.LittleEndian.PutUint64(rec[16:], w.synced)
	binary.LittleEndian.PutUint64(rec[24:], group)
	rec[32] = kindEntry
	clear(rec[33:headerLen])
	// raftpb.Entry fields: 2 Term, 3 Index, 1 Type (EntryNormal = 0), 4 Data.
	e := rec[headerLen:headerLen]
	e = binary.AppendUvarint(append(e, 0x10), term)
	e = binary.AppendUvarint(append(e, 0x18), index)
	e = append(e, 0x08, byte(raftpb.EntryNormal))
	e = binary.AppendUvarint(append(e, 0x22), dlen)
	e = append(e, head...)
	e = append(e, body...)
	clear(rec[headerLen+n:])
	binary.LittleEndian.PutUint32(rec, crc32.Checksum(rec[4:headerLen+n], castagnoli))
	_ = e
	r.records++
	r.lastLSN = w.lsn
	r.eager = true
	lsn := w.lsn
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return lsn, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// writer writes and fsyncs rounds until Close.
func (w *WAL) writer() {
	defer close(w.done)
	for {
		<-w.kick
		w.mu.Lock()
		r := w.cur
		closing := w.closing
		if len(r.buf) == 0 && len(r.waiters) == 0 || !r.eager && !w.flush && !closing {
			w.mu.Unlock()
			if closing {
				return
			}
			continue
		}
		w.flush = false
		w.cur, w.spare = w.spare, nil
		w.mu.Unlock()
		err := w.writeRound(r)
		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("%w: %v", ErrFailed, err)
			w.log.Error("write-ahead log write failed; every append fails until restart", zap.Error(err))
		}
		if err == nil {
			w.synced = r.lastLSN
		}
		ferr := w.err
		w.mu.Unlock()
		for _, wt := range r.waiters {
			if ferr != nil {
				wt.Failed(ferr)
			} else {
				wt.Durable(r.lastLSN)
			}
		}
		if ferr != nil {
			// Fail whatever was appended meanwhile, then keep failing appends.
			w.mu.Lock()
			rest := w.cur
			w.cur = newRound()
			w.mu.Unlock()
			for _, wt := range rest.waiters {
				wt.Failed(ferr)
			}
		}
		r.buf, r.waiters, r.records, r.lastLSN, r.eager = r.buf[:0], r.waiters[:0], 0, 0, false
		clear(r.maxIdx)
		w.mu.Lock()
		w.spare = r
		if w.cur.eager || w.flush || w.closing {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
		w.mu.Unlock()
	}
}

// writeRound writes r at the end of the current file, fsyncs, and rolls the file
// when it is full.
func (w *WAL) writeRound(r *round) error {
	if w.failedWrite() {
		return ErrFailed
	}
	start := time.Now()
	if len(r.buf) > 0 {
		if end := w.fpos + int64(len(r.buf)); end > w.alloc {
			n := max(end-w.alloc, allocChunk)
			if fallocate(w.f, w.alloc, n) == nil {
				w.alloc += n
			}
		}
		if _, err := w.f.WriteAt(r.buf, w.fpos); err != nil {
			return err
		}
		if err := diskio.Fdatasync(w.f); err != nil {
			return err
		}
		w.fpos += int64(len(r.buf))
		if to := w.fpos - 1<<20; to-w.dropped >= 4<<20 {
			dropCache(w.f, w.dropped, to-w.dropped)
			w.dropped = to
		}
	}
	if w.opts.OnSync != nil {
		w.opts.OnSync(time.Since(start), r.records)
	}
	w.filesMu.Lock()
	cur := w.files[len(w.files)-1]
	for g, i := range r.maxIdx {
		if i > cur.maxIdx[g] {
			cur.maxIdx[g] = i
		}
	}
	w.filesMu.Unlock()
	if w.fpos >= w.opts.SegmentBytes {
		return w.startFile(cur.seq + 1)
	}
	return nil
}

func (w *WAL) failedWrite() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// SetFloor says group no longer needs its entries at or below index (they may be
// removed by Truncate). A group without a floor holds no file; give a new group
// floor 0 before its first Append.
func (w *WAL) SetFloor(group, index uint64) {
	w.mu.Lock()
	w.floors[group] = index
	w.mu.Unlock()
}

// DropGroup forgets group (a deleted channel): its entries and hard state no longer
// hold any file.
func (w *WAL) DropGroup(group uint64) {
	w.mu.Lock()
	delete(w.floors, group)
	delete(w.hs, group)
	w.mu.Unlock()
}

// Truncate removes the oldest files (never the one being written) whose every entry
// lies at or below its group's floor. It returns how many it removed.
func (w *WAL) Truncate() (int, error) {
	w.mu.Lock()
	floors := make(map[uint64]uint64, len(w.floors))
	for g, f := range w.floors {
		floors[g] = f
	}
	w.mu.Unlock()
	w.filesMu.Lock()
	k := 0
	for ; k < len(w.files)-1; k++ {
		ok := true
		for g, i := range w.files[k].maxIdx {
			if f, has := floors[g]; has && i > f {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
	}
	victims := append([]*file(nil), w.files[:k]...)
	w.files = append([]*file(nil), w.files[k:]...)
	w.filesMu.Unlock()
	var errs []error
	for _, f := range victims {
		if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if len(victims) > 0 {
		if err := syncDir(w.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return len(victims), errors.Join(errs...)
}

// Files is the number of WAL files (tests, metrics).
func (w *WAL) Files() int {
	w.filesMu.Lock()
	defer w.filesMu.Unlock()
	return len(w.files)
}

// LastLSN is the lsn of the last record appended (and, after Open, replayed).
func (w *WAL) LastLSN() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lsn
}

// HardState is the latest hard state of group (replayed or appended), if any.
func (w *WAL) HardState(group uint64) (raftpb.HardState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs, ok := w.hs[group]
	return hs, ok
}

// Close writes what was appended, stops the writer and closes the file. Appends after
// Close fail with ErrClosed.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		<-w.done
		return nil
	}
	w.closing = true
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	<-w.done
	w.mu.Lock()
	err := w.err
	if w.err == nil {
		w.err = ErrClosed
	}
	w.mu.Unlock()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// allocChunk is how far ahead of the writes a WAL file is allocated.
const allocChunk = 4 << 20

// fallocate allocates [off, off+n) of f as zeros, extending its size.
func fallocate(f *os.File, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = syscall.Fallocate(int(fd), 0, off, n) }); err != nil {
		return err
	}
	return ferr
}

// dropCache drops the clean page cache of [off, off+n): WAL pages are read only at
// recovery, so keeping them only grows the page cache.
func dropCache(f *os.File, off, n int64) {
	if off < 0 || n <= 0 {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall6(syscall.SYS_FADVISE64, fd, uintptr(off), uintptr(n), 4, 0, 0)
	})
}
