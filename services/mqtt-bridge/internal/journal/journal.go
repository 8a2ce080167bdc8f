// Package journal is an append-only file of records, for state that must outlive the
// process: the listener's MQTT sessions. Appends go to the operating system at once (a
// process that is killed, even with SIGKILL, loses nothing it appended); Sync makes
// them survive a machine crash as well, concurrent callers sharing one fsync. Opening
// a journal drops a torn or corrupt tail (what an interrupted write leaves), and
// Rewrite replaces the whole file atomically with a compacted set of records.
//
// File layout: the 8-byte magic "TRBJRNL1", then frames of a 4-byte big-endian
// payload length, the 4-byte big-endian CRC-32C (Castagnoli) of the payload, and the
// payload.
package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

const magic = "TRBJRNL1"

const frameHeader = 8

// maxRecord bounds one record (a frame claiming more is taken for corruption).
const maxRecord = 1 << 30

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by the operations of a closed journal.
var ErrClosed = errors.New("journal closed")

// ErrLocked is returned by Open when another process holds the journal's directory.
var ErrLocked = errors.New("journal in use by another process")

// Journal is an open journal file. Its methods are safe for concurrent use.
type Journal struct {
	path string
	lock *os.File // holds an exclusive flock on path + ".lock" while open

	mu      sync.Mutex // guards f, size, written, closed
	f       *os.File
	size    int64
	written uint64 // appends so far (each bumps it)
	closed  bool

	syncMu sync.Mutex // one fsync at a time; guards synced
	synced uint64     // appends known to be on disk
}

// Open opens (creating it if needed) the journal at path and returns it with its
// records in order. A torn or corrupt tail is cut off and its size reported in
// dropped (bytes). A file whose header was never wholly written (see unwrittenHeader)
// is started afresh. A file that is not a journal is an error, left untouched, and so is
// a journal another process has open (ErrLocked).
func Open(path string) (j *Journal, records [][]byte, dropped int64, err error) {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, 0, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, nil, 0, fmt.Errorf("lock %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = lock.Close()
		}
	}()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, 0, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, 0, err
	}
	if unwrittenHeader(data) {
		if err := f.Truncate(0); err != nil {
			_ = f.Close()
			return nil, nil, 0, err
		}
		if _, err := f.WriteAt([]byte(magic), 0); err != nil {
			_ = f.Close()
			return nil, nil, 0, err
		}
		if err := syncFileAndDir(f, path); err != nil {
			_ = f.Close()
			return nil, nil, 0, err
		}
		data = []byte(magic)
	}
	if len(data) < len(magic) || !bytes.Equal(data[:len(magic)], []byte(magic)) {
		_ = f.Close()
		return nil, nil, 0, fmt.Errorf("%s is not a journal (no %q header)", path, magic)
	}
	records, good := parse(data)
	if dropped = int64(len(data)) - good; dropped > 0 {
		if err := f.Truncate(good); err != nil {
			_ = f.Close()
			return nil, nil, 0, err
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return nil, nil, 0, err
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, nil, 0, err
	}
	return &Journal{path: path, lock: lock, f: f, size: good}, records, dropped, nil
}

// unwrittenHeader reports whether data is a journal file whose header was never
// (wholly) written: empty, a part of the magic, or only zeros (a crash can leave the
// file's new size without its data). Records are appended only after the header is
// synced, so such a file holds none.
func unwrittenHeader(data []byte) bool {
	if len(data) < len(magic) && bytes.HasPrefix([]byte(magic), data) {
		return true
	}
	return len(data) <= len(magic) && bytes.Count(data, []byte{0}) == len(data)
}

// parse returns the whole frames of data (after the magic) and where they end.
func parse(data []byte) (records [][]byte, end int64) {
	off := len(magic)
	for {
		if len(data)-off < frameHeader {
			return records, int64(off)
		}
		n := binary.BigEndian.Uint32(data[off:])
		sum := binary.BigEndian.Uint32(data[off+4:])
		if n > maxRecord || int(n) > len(data)-off-frameHeader {
			return records, int64(off)
		}
		payload := data[off+frameHeader : off+frameHeader+int(n)]
		if crc32.Checksum(payload, crcTable) != sum {
			return records, int64(off)
		}
		records = append(records, payload)
		off += frameHeader + int(n)
	}
}

func frame(buf []byte, rec []byte) []byte {
	var h [frameHeader]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(rec)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(rec, crcTable))
	return append(append(buf, h[:]...), rec...)
}

// Append writes recs at the end of the journal in one write: once it returns they
// survive the process (not yet a machine crash: see Sync).
func (j *Journal) Append(recs ...[]byte) error {
	var buf []byte
	for _, r := range recs {
		if len(r) > maxRecord {
			return fmt.Errorf("journal record of %d bytes (at most %d)", len(r), maxRecord)
		}
		buf = frame(buf, r)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	n, err := j.f.Write(buf)
	j.size += int64(n)
	j.written++
	if err != nil && n > 0 {
		// A partial frame would hide every later one: cut it off.
		if terr := j.f.Truncate(j.size - int64(n)); terr == nil {
			j.size -= int64(n)
			_, _ = j.f.Seek(j.size, io.SeekStart)
		}
	}
	return err
}

// Sync returns once everything appended before the call is on disk (fsync). Callers
// that arrive while an fsync runs share the next one.
func (j *Journal) Sync() error {
	j.mu.Lock()
	target := j.written
	j.mu.Unlock()
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if j.synced >= target {
		return nil
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	f, upto := j.f, j.written
	j.mu.Unlock()
	if err := f.Sync(); err != nil {
		return err
	}
	j.synced = upto
	return nil
}

// Size is the journal file's length in bytes.
func (j *Journal) Size() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size
}

// Rewrite replaces the journal's content with recs: written to a new file, synced,
// renamed over the journal and the directory synced, so that a crash at any point
// leaves either the old or the new content, whole.
func (j *Journal) Rewrite(recs [][]byte) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := []byte(magic)
	for _, r := range recs {
		buf = frame(buf, r)
	}
	if _, err := f.Write(buf); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, j.path); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	// The new file is in place: append to it from now on, even if its directory entry
	// could not be synced (then the error says so).
	_ = j.f.Close()
	j.f, j.size = f, int64(len(buf))
	j.written++
	j.synced = j.written
	return syncDir(j.path)
}

// Close syncs and closes the journal and releases its lock.
func (j *Journal) Close() error {
	err := j.Sync()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	_ = j.lock.Close()
	return err
}

func syncFileAndDir(f *os.File, path string) error {
	if err := f.Sync(); err != nil {
		return err
	}
	return syncDir(path)
}

func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
