package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
)

// indexIntervalBytes is the spacing of sparse index entries (Kafka index.interval.bytes).
const indexIntervalBytes = 4096

// segment is one file of concatenated RecordBatch v2 frames, named by its base offset
// (Kafka layout: 00000000000000000000.log, .index, .timeindex). The in-memory indexes
// are authoritative while running; the .index (8-byte entries: relative offset uint32,
// position uint32) and .timeindex (12-byte entries: timestamp int64, relative offset
// uint32) files are written when a segment is sealed (rolled) and on clean close. On
// start the indexes are rebuilt from a walk of the batch headers (which the producer
// state rebuild needs anyway); the active segment is also CRC-checked batch by batch.
//
// Fields after f are guarded by the owning log's mu (writers) and published to readers
// through the log's segMu and high watermark; readers only use base, f and the index
// slices under segMu.RLock.
type segment struct {
	base int64
	path string // .log path
	f    *os.File

	size       atomic.Int64 // bytes written (readers: only up to the high watermark)
	next       int64        // offset after the last batch
	maxTS      atomic.Int64 // largest batch max timestamp; -1 when empty
	firstTS    int64        // max timestamp of the first batch, for segment_ms; -1 when empty
	createdMs  int64        // wall time the segment was created (or opened empty)
	sinceIndex int64        // bytes since the last index entry
	prealloc   int64        // end of the preallocated region (writer only)
	lastBase   int64        // base offset of the last batch
	dropped    atomic.Int64 // page cache dropped below this position
	readahead  atomic.Int64 // readers' prefetch (WILLNEED) was issued below this position

	closed atomic.Bool // file closed (retention, delete, shutdown)

	idxMu sync.RWMutex
	idx   []indexEntry
	tidx  []timeEntry
}

type indexEntry struct {
	rel uint32
	pos uint32
}

type timeEntry struct {
	ts  int64
	rel uint32
}

func segmentName(base int64, ext string) string { return fmt.Sprintf("%020d%s", base, ext) }

func newSegment(base int64, path string, f *os.File, createdMs int64) *segment {
	s := &segment{base: base, path: path, f: f, next: base, firstTS: -1, createdMs: createdMs}
	s.maxTS.Store(-1)
	return s
}

func createSegment(dir string, base, nowMs int64) (*segment, error) {
	path := filepath.Join(dir, segmentName(base, ".log"))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	_ = os.Remove(filepath.Join(dir, segmentName(base, ".index")))
	_ = os.Remove(filepath.Join(dir, segmentName(base, ".timeindex")))
	return newSegment(base, path, f, nowMs), nil
}

// preallocChunk is how far ahead of the write position segment blocks are reserved.
const preallocChunk = 16 << 20

// reserve preallocates blocks so a write of n bytes at pos lands in allocated space.
// limit (the segment size limit) bounds the reservation. Writer only.
func (s *segment) reserve(pos, n, limit int64) {
	if pos+n <= s.prealloc {
		return
	}
	start := max(pos, s.prealloc)
	end := max(pos+n, min(start+preallocChunk, limit))
	preallocate(s.f, start, end-start)
	s.prealloc = end
}

// Page cache window: after an fsync, clean pages more than cacheWindow bytes behind the
// durable position are dropped, in steps of cacheDropStep. Steady appends then reuse
// recently freed pages instead of growing the page cache with fresh ones (on VMs with
// free page reporting a fresh page costs a host fault, which made appends ~6x slower);
// tailing readers stay within the window. Older reads come from disk.
const (
	cacheWindow   = 64 << 20
	cacheDropStep = 8 << 20
)

// dropBehind drops the page cache of s below durable - cacheWindow. Called after an
// fsync covering durable.
func (s *segment) dropBehind(durable int64) {
	from := s.dropped.Load()
	to := durable - cacheWindow
	if to-from < cacheDropStep || !s.dropped.CompareAndSwap(from, to) {
		return
	}
	dropCache(s.f, from, to-from)
}

// seal releases preallocated blocks past the end of a segment that will not grow.
func (s *segment) seal() error {
	if s.prealloc > s.size.Load() {
		s.prealloc = 0
		return s.f.Truncate(s.size.Load())
	}
	return nil
}

// addIndex records index entries for a batch written at pos. Called by the writer.
func (s *segment) addIndex(h *batchHeader, pos int64) {
	if s.sinceIndex == 0 && len(s.idx) == 0 || s.sinceIndex >= indexIntervalBytes {
		s.idxMu.Lock()
		s.idx = append(s.idx, indexEntry{rel: uint32(h.BaseOffset - s.base), pos: uint32(pos)})
		if h.MaxTimestamp > s.maxTS.Load() {
			s.tidx = append(s.tidx, timeEntry{ts: h.MaxTimestamp, rel: uint32(h.BaseOffset - s.base)})
		}
		s.idxMu.Unlock()
		s.sinceIndex = 0
	} else if h.MaxTimestamp > s.maxTS.Load() && len(s.tidx) == 0 {
		s.idxMu.Lock()
		s.tidx = append(s.tidx, timeEntry{ts: h.MaxTimestamp, rel: uint32(h.BaseOffset - s.base)})
		s.idxMu.Unlock()
	}
	s.sinceIndex += int64(h.Length)
	if h.MaxTimestamp > s.maxTS.Load() {
		s.maxTS.Store(h.MaxTimestamp)
	}
	if s.firstTS < 0 {
		s.firstTS = h.MaxTimestamp
	}
	s.next = h.NextOffset()
	s.lastBase = h.BaseOffset
}

// lookup returns the file position of the last index entry at or before off.
func (s *segment) lookup(off int64) int64 {
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	rel := off - s.base
	i := sort.Search(len(s.idx), func(i int) bool { return int64(s.idx[i].rel) > rel })
	if i == 0 {
		return 0
	}
	return int64(s.idx[i-1].pos)
}

// lookupTime returns the file position to scan from for the first record with
// timestamp >= ts: the batch of the last time index entry whose timestamp is < ts.
func (s *segment) lookupTime(ts int64) int64 {
	s.idxMu.RLock()
	i := sort.Search(len(s.tidx), func(i int) bool { return s.tidx[i].ts >= ts })
	var rel int64 = -1
	if i > 0 {
		rel = int64(s.tidx[i-1].rel)
	}
	s.idxMu.RUnlock()
	if rel < 0 {
		return 0
	}
	return s.lookup(s.base + rel)
}

// writeIndexes writes the .index and .timeindex files of a sealed segment and fsyncs
// them. A missing or bad index file only costs a rebuild scan on start.
func (s *segment) writeIndexes() error {
	s.idxMu.Lock()
	if mx := s.maxTS.Load(); mx >= 0 && (len(s.tidx) == 0 || s.tidx[len(s.tidx)-1].ts < mx) {
		// Close the time index with the segment's largest timestamp (as Kafka does at
		// roll), so a load from the files knows it. The running max at the last batch
		// is the segment max, so the entry is exact.
		s.tidx = append(s.tidx, timeEntry{ts: mx, rel: uint32(s.lastBase - s.base)})
	}
	s.idxMu.Unlock()
	s.idxMu.RLock()
	ib := make([]byte, 0, 8*len(s.idx))
	for _, e := range s.idx {
		ib = binary.BigEndian.AppendUint32(ib, e.rel)
		ib = binary.BigEndian.AppendUint32(ib, e.pos)
	}
	tb := make([]byte, 0, 12*len(s.tidx))
	for _, e := range s.tidx {
		tb = binary.BigEndian.AppendUint64(tb, uint64(e.ts))
		tb = binary.BigEndian.AppendUint32(tb, e.rel)
	}
	s.idxMu.RUnlock()
	dir := filepath.Dir(s.path)
	if err := writeFileAtomic(dir, segmentName(s.base, ".index"), ib); err != nil {
		return err
	}
	return writeFileAtomic(dir, segmentName(s.base, ".timeindex"), tb)
}

// loadSealed opens a sealed (non-last) segment. It trusts the index files when they
// are present and consistent with the file, and otherwise rebuilds them by scanning
// batch headers. visit is called for every batch header (producer and transaction
// state rebuild), with the whole frame for control batches (nil for others).
func loadSealed(path string, base int64, visit func(*batchHeader, []byte)) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	s := newSegment(base, path, f, st.ModTime().UnixMilli())
	size := st.Size()
	s.size.Store(size)
	// Walk headers: needed for producer state, next offset and max timestamp.
	var hdr [batchHeaderLen]byte
	pos := int64(0)
	for pos < size {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("read batch header at %d of %s: %w", pos, path, err)
		}
		h := parseHeader(hdr[:])
		if h.Length < batchHeaderLen || pos+int64(h.Length) > size {
			_ = f.Close()
			return nil, fmt.Errorf("%w: bad batch at %d of sealed segment %s", ErrCorruptBatch, pos, path)
		}
		s.addIndex(&h, pos)
		if visit != nil {
			var frame []byte
			if h.Attributes&attrControl != 0 {
				frame = make([]byte, h.Length)
				if _, err := f.ReadAt(frame, pos); err != nil {
					_ = f.Close()
					return nil, fmt.Errorf("read control batch at %d of %s: %w", pos, path, err)
				}
			}
			visit(&h, frame)
		}
		pos += int64(h.Length)
	}
	return s, nil
}

// loadIndexed opens a sealed segment from its .index and .timeindex files without
// reading the log. next is the following segment's base offset. ok is false when the
// files are missing or inconsistent (the caller falls back to loadSealed).
func loadIndexed(path string, base, next int64) (*segment, bool) {
	dir := filepath.Dir(path)
	ib, err1 := os.ReadFile(filepath.Join(dir, segmentName(base, ".index")))
	tb, err2 := os.ReadFile(filepath.Join(dir, segmentName(base, ".timeindex")))
	if err1 != nil || err2 != nil || len(ib)%8 != 0 || len(tb)%12 != 0 {
		return nil, false
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, false
	}
	size := st.Size()
	s := newSegment(base, path, f, st.ModTime().UnixMilli())
	s.size.Store(size)
	s.next = next
	ok := size == 0 || len(ib) >= 8
	for i := 0; ok && i < len(ib); i += 8 {
		e := indexEntry{rel: binary.BigEndian.Uint32(ib[i:]), pos: binary.BigEndian.Uint32(ib[i+4:])}
		if int64(e.pos) >= size || base+int64(e.rel) >= next || len(s.idx) > 0 && (e.rel <= s.idx[len(s.idx)-1].rel || e.pos <= s.idx[len(s.idx)-1].pos) {
			ok = false
		}
		s.idx = append(s.idx, e)
	}
	if ok && len(s.idx) > 0 && (s.idx[0].rel != 0 || s.idx[0].pos != 0) {
		ok = false
	}
	for i := 0; ok && i < len(tb); i += 12 {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(tb[i:])), rel: binary.BigEndian.Uint32(tb[i+8:])}
		if base+int64(e.rel) >= next || len(s.tidx) > 0 && e.ts < s.tidx[len(s.tidx)-1].ts {
			ok = false
		}
		s.tidx = append(s.tidx, e)
	}
	if !ok {
		_ = f.Close()
		return nil, false
	}
	if len(s.tidx) > 0 {
		s.maxTS.Store(s.tidx[len(s.tidx)-1].ts)
		s.firstTS = s.tidx[0].ts
	}
	return s, true
}

// recoverActive opens the last segment, validates every batch (length, magic, CRC,
// offset continuity) and truncates at the first bad one when it starts a torn tail.
// It returns the segment and the number of bytes truncated. A bad batch followed by an
// intact one is ErrDataLoss (validFrameAfter), nothing is truncated, unless the bad
// batch is at or past offset cutFrom (WAL mode: the segment is fsynced only below the
// checkpoint, the rest is replayed from the WAL; math.MaxInt64 otherwise).
func recoverActive(path string, base, cutFrom, end int64, visit func(*batchHeader, []byte)) (*segment, int64, int, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, 0, err
	}
	s := newSegment(base, path, f, st.ModTime().UnixMilli())
	fileSize := st.Size()
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, fileSize), 1<<20)
	pos := int64(0)
	buf := make([]byte, 0, 64<<10)
	bad := false
	for pos < fileSize && s.next < end {
		if fileSize-pos < batchHeaderLen {
			bad = true
			break
		}
		head, err := r.Peek(batchHeaderLen)
		if err != nil {
			bad = true
			break
		}
		h := parseHeader(head)
		if head[offMagic] != 2 || h.Length < batchHeaderLen || pos+int64(h.Length) > fileSize || h.BaseOffset != s.next || h.LastOffsetDelta < 0 {
			bad = true
			break
		}
		if cap(buf) < int(h.Length) {
			buf = make([]byte, h.Length)
		}
		buf = buf[:h.Length]
		if _, err := io.ReadFull(r, buf); err != nil {
			bad = true
			break
		}
		if crc32.Checksum(buf[offAttributes:], castagnoli) != binary.BigEndian.Uint32(buf[offCRC:]) {
			bad = true
			break
		}
		s.addIndex(&h, pos)
		if visit != nil {
			var frame []byte
			if h.Attributes&attrControl != 0 {
				frame = buf
			}
			visit(&h, frame)
		}
		pos += int64(h.Length)
	}
	truncated := fileSize - pos
	nbad := 0
	if end < math.MaxInt64 {
		// Raft mode resuming from a checkpoint: what lies past end is not damage but
		// the effect of entries above the checkpoint, which are applied again.
		if s.next != end {
			_ = f.Close()
			return nil, 0, 0, fmt.Errorf("%w: %s holds offsets up to %d only, but its checkpoint says %d", ErrDataLoss, path, s.next, end)
		}
		if pos < fileSize {
			if err := f.Truncate(pos); err != nil {
				_ = f.Close()
				return nil, 0, 0, fmt.Errorf("truncate %s at %d: %w", path, pos, err)
			}
			if err := f.Sync(); err != nil {
				_ = f.Close()
				return nil, 0, 0, fmt.Errorf("sync %s: %w", path, err)
			}
		}
		bad, truncated = false, 0
	}
	if bad {
		if at, ok := validFrameAfter(f, pos, fileSize, s.next); ok && s.next < cutFrom {
			_ = f.Close()
			return nil, 0, 0, fmt.Errorf("%w: bad batch at byte %d of %s (offset %d) is followed by an intact batch at byte %d: not a torn tail, refusing to truncate",
				ErrDataLoss, pos, path, s.next, at)
		}
		nbad = 1
		if err := f.Truncate(pos); err != nil {
			_ = f.Close()
			return nil, 0, 0, fmt.Errorf("truncate %s at %d: %w", path, pos, err)
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return nil, 0, 0, fmt.Errorf("sync %s: %w", path, err)
		}
	}
	s.size.Store(pos)
	if _, err := f.Seek(pos, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, 0, 0, err
	}
	return s, truncated, nbad, nil
}

// findPos returns the file position of the frame containing off, or the first frame
// after it, and that frame's length. ok is false when no visible frame (below file
// position end and base offset limit) is at or after off in this segment.
func (s *segment) findPos(off int64, end, limit int64) (pos int64, length int64, ok bool, err error) {
	pos = s.lookup(off)
	var hdr [offBaseTS]byte
	for {
		if pos+batchHeaderLen > end {
			return 0, 0, false, nil
		}
		if _, err := s.f.ReadAt(hdr[:], pos); err != nil {
			return 0, 0, false, fmt.Errorf("%w: read %s: %v", ErrStorage, s.path, err)
		}
		base := int64(binary.BigEndian.Uint64(hdr[0:]))
		if base >= limit {
			return 0, 0, false, nil
		}
		length = int64(int32(binary.BigEndian.Uint32(hdr[offBatchLength:]))) + batchLengthField
		last := base + int64(int32(binary.BigEndian.Uint32(hdr[offLastDelta:])))
		if length < batchHeaderLen || pos+length > end {
			return 0, 0, false, nil
		}
		if last >= off {
			return pos, length, true, nil
		}
		pos += length
	}
}

// readFrames reads whole frames from pos (where a frame of firstLen bytes starts),
// ending before file position end and before base offset limit: at least the first
// frame, then more while they fit in maxBytes, into a buffer from alloc (nil: make).
func (s *segment) readFrames(pos, firstLen int64, maxBytes int, end, limit int64, alloc func(int) []byte) ([]byte, error) {
	n := max(firstLen, min(int64(maxBytes), end-pos))
	var buf []byte
	if alloc != nil {
		buf = alloc(int(n))[:n]
	} else {
		buf = make([]byte, n)
	}
	got, err := s.f.ReadAt(buf, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: read %s: %v", ErrStorage, s.path, err)
	}
	buf = buf[:got] // a buffer from alloc is not zeroed: never look past what was read
	s.prefetch(pos+n, end)
	return buf[:wholeFrames(buf, limit)], nil
}

// Reader prefetch: a reader behind the page cache window (dropBehind) reads from disk,
// one fetch at a time per partition. After each read the next prefetchAhead bytes are
// requested from the kernel in the background (POSIX_FADV_WILLNEED), in steps of at
// least prefetchStep, so the reader's next fetch finds them in the page cache while
// the disk works ahead. For cached data (tailing readers) the call finds the pages
// present and does no I/O.
const (
	prefetchAhead = 16 << 20
	prefetchStep  = 4 << 20
)

// prefetch starts background readahead of [from, min(from+prefetchAhead, end)) unless
// all but prefetchStep of it was already requested. One position per segment is
// tracked: with several readers, the one furthest ahead drives it.
func (s *segment) prefetch(from, end int64) {
	to := min(from+prefetchAhead, end)
	ra := s.readahead.Load()
	start := max(ra, from)
	if to-start < prefetchStep || !s.readahead.CompareAndSwap(ra, to) {
		return
	}
	go willNeed(s.f, start, to-start)
}

// wholeFrames returns the length of the prefix of buf made of whole frames with base
// offsets below limit.
func wholeFrames(buf []byte, limit int64) int {
	p := 0
	for p+batchHeaderLen <= len(buf) {
		base := int64(binary.BigEndian.Uint64(buf[p:]))
		l := int(int32(binary.BigEndian.Uint32(buf[p+offBatchLength:]))) + batchLengthField
		if base >= limit || l < batchHeaderLen || p+l > len(buf) {
			break
		}
		p += l
	}
	return p
}

func (s *segment) close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.f.Close()
}

func (s *segment) remove() error {
	_ = s.close()
	dir := filepath.Dir(s.path)
	var errs []error
	for _, ext := range []string{".log", ".index", ".timeindex"} {
		if err := os.Remove(filepath.Join(dir, segmentName(s.base, ext))); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
