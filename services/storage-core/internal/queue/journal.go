package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tributary/tributary/services/storage-core/internal/diskio"
)

// The state journal, <data-dir>/queues.db.journal, makes the most frequent state
// commit, an ack's (ackCommit: Pub/Sub Acknowledge, Kafka share ACCEPT/REJECT),
// durable with one sequential write and one fdatasync instead of a bbolt
// transaction's two (its pages, then its meta page). A group commit whose every change
// has a journal record (dbOp.rec) appends them and answers; the changes stay pending
// in memory and are applied to queues.db by the next bbolt commit (checkpoint), ahead
// of that commit's own changes, so every change reaches queues.db in enqueue order.
// A checkpoint runs for any change without a record, for a view, once the pending
// records reach maxJournalBytes or are maxJournalAge old, and at close; it records the
// sequence of the last record it applied (journal/applied) in the same transaction,
// then empties the file. At open the records above that sequence are applied in one
// transaction, in order: the changes answered before a crash are all there, and
// none twice.
//
// Record: payload length (4 bytes, big-endian), CRC-32C of the epoch, sequence and
// payload (4), sequence (8), payload (a kind byte, then the change:
// ackCommit.encode). The epoch (8 bytes, not stored in the record) is the bbolt
// transaction id of queues.db's last commit, which each checkpoint and the replay at
// start advance: a record verifies only until queues.db is committed again. Reading
// stops at the first record that is short, fails its CRC or has a sequence not above
// its predecessor's: a torn last append, whose changes were never answered, or what
// an emptying that did not reach the disk left after newer records. The epoch covers
// what sequences cannot: the emptying at start lost in a crash leaves the bytes after
// a torn record, whose sequences the next run gives again, under its records; and a
// queues.db committed by another writer (a binary without the journal, a restore)
// holds changes newer than the journal's.
const (
	journalHeader = 16
	// maxJournalBytes (the file's size: headers and payloads) and maxJournalAge
	// bound the pending records: the memory they hold and the work of the replay
	// after a crash.
	maxJournalBytes = 8 << 20
	maxJournalAge   = time.Second
	// maxJournalRecord bounds one record's payload when reading.
	maxJournalRecord = 64 << 20
)

// Journal record kinds.
const journalAck byte = 1

var (
	bktJournal = []byte("journal")
	keyApplied = []byte("applied")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// journal is the open journal file; only the committer goroutine uses it.
type journal struct {
	f    *os.File
	size int64 // bytes written since it was last emptied
	// seq is the last sequence given to a record, applied the last one queues.db
	// holds (journal/applied).
	seq, applied uint64
	// epoch is the bbolt transaction id of queues.db's last commit: the CRC seed of
	// the records appended until the next (recordCRC).
	epoch uint64
	buf   []byte
}

// recordCRC is the CRC-32C of epoch, then h[8:] (the sequence), then payload.
func recordCRC(epoch uint64, h, payload []byte) uint32 {
	var e [8]byte
	binary.BigEndian.PutUint64(e[:], epoch)
	return crc32.Update(crc32.Update(crc32.Checksum(e[:], castagnoli), castagnoli, h[8:journalHeader]), castagnoli, payload)
}

// append writes recs as records after the last one and fdatasyncs them. On failure
// their sequences stay used: their bytes may be on disk, and the bbolt transaction
// that makes their changes durable instead records them as applied.
func (j *journal) append(recs [][]byte) error {
	b := j.buf[:0]
	seq := j.seq
	for _, r := range recs {
		seq++
		var h [journalHeader]byte
		binary.BigEndian.PutUint32(h[0:], uint32(len(r)))
		binary.BigEndian.PutUint64(h[8:], seq)
		binary.BigEndian.PutUint32(h[4:], recordCRC(j.epoch, h[:], r))
		b = append(append(b, h[:]...), r...)
	}
	j.buf = b
	j.seq = seq
	if _, err := j.f.WriteAt(b, j.size); err != nil {
		return err
	}
	if err := diskio.Fdatasync(j.f); err != nil {
		return err
	}
	j.size += int64(len(b))
	return nil
}

// reset empties the file once a checkpoint applied every record. Not synced: records
// left by a truncation that did not reach the disk are at or below journal/applied
// and skipped.
func (j *journal) reset() error {
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	j.size = 0
	return nil
}

// journalRecord is one record read back.
type journalRecord struct {
	seq     uint64
	payload []byte
}

// readJournal returns the records of r appended at epoch, in order, up to the first
// torn or damaged one, or one of another epoch.
func readJournal(r io.Reader, epoch uint64) ([]journalRecord, error) {
	var out []journalRecord
	var h [journalHeader]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, nil
			}
			return nil, err
		}
		n := binary.BigEndian.Uint32(h[0:])
		seq := binary.BigEndian.Uint64(h[8:])
		if n == 0 || n > maxJournalRecord || len(out) > 0 && seq <= out[len(out)-1].seq {
			return out, nil
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, nil
			}
			return nil, err
		}
		if recordCRC(epoch, h[:], p) != binary.BigEndian.Uint32(h[4:]) {
			return out, nil
		}
		out = append(out, journalRecord{seq, p})
	}
}

// openJournal opens the journal at path and applies to b, in one transaction, every
// record above journal/applied appended at epoch (the transaction id of b's last
// commit, read before b was changed by this open), then empties it. Errors: a record
// that does not decode (ErrState: written by another version, or damaged past its
// CRC), I/O.
func openJournal(b *bolt.DB, path string, epoch uint64) (*journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	j := &journal{f: f, epoch: epoch}
	if err := j.replay(b, path); err != nil {
		_ = f.Close()
		return nil, err
	}
	return j, nil
}

func (j *journal) replay(b *bolt.DB, path string) error {
	recs, err := readJournal(j.f, j.epoch)
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrState, path, err)
	}
	var epoch uint64
	err = b.Update(func(tx *bolt.Tx) error {
		epoch = uint64(tx.ID())
		jb, err := tx.CreateBucketIfNotExists(bktJournal)
		if err != nil {
			return err
		}
		applied := uint64(0)
		if v := jb.Get(keyApplied); len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		j.seq = applied
		for _, r := range recs {
			if r.seq <= applied {
				continue
			}
			fn, err := decodeJournal(r.payload)
			if err != nil {
				return fmt.Errorf("%w: %s record %d: %v", ErrState, path, r.seq, err)
			}
			if err := fn(tx); err != nil {
				return err
			}
			j.seq = r.seq
		}
		return putApplied(tx, j.seq)
	})
	if err != nil {
		return err
	}
	j.applied, j.epoch = j.seq, epoch
	// Only once the records are in queues.db.
	return j.reset()
}

func putApplied(tx *bolt.Tx, seq uint64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], seq)
	return tx.Bucket(bktJournal).Put(keyApplied, v[:])
}

// decodeJournal returns the change a record's payload holds.
func decodeJournal(p []byte) (func(*bolt.Tx) error, error) {
	if len(p) == 0 {
		return nil, errors.New("empty record")
	}
	switch p[0] {
	case journalAck:
		var c ackCommit
		if err := c.decode(p[1:]); err != nil {
			return nil, err
		}
		return c.apply, nil
	}
	return nil, fmt.Errorf("unknown record kind %d", p[0])
}

// ackCommit is an ack's state change (Queue.commitAcksLocked): the ack floor, the
// delivered mark (-1: unchanged), delivery records to put, the offsets acked above the
// floor (sorted), and the delivery records of acked messages to delete.
type ackCommit struct {
	name      string
	inc       uint64
	floor     int64
	mark      int64
	countOffs []int64
	countVals [][]byte
	above     []int64
	delKeys   []int64
}

func (c *ackCommit) apply(tx *bolt.Tx) error {
	b := incStateBucket(tx, c.name, c.inc)
	if b == nil {
		return nil
	}
	if err := b.Put(keyFloor, offKey(c.floor)); err != nil {
		return err
	}
	ab, at := b.Bucket(bktAcked), b.Bucket(bktAttempts)
	if c.mark >= 0 {
		if err := b.Put(keyDelivered, offKey(c.mark)); err != nil {
			return err
		}
	}
	for i, off := range c.countOffs {
		if err := at.Put(offKey(off), c.countVals[i]); err != nil {
			return err
		}
	}
	for i := 0; i < len(c.above); {
		j := i + 1
		for j < len(c.above) && c.above[j] <= c.above[j-1]+1 {
			j++
		}
		if err := putAckedRange(ab, c.above[i], c.above[j-1]+1); err != nil {
			return err
		}
		i = j
	}
	// Attempts below the floor go with deleteBelow; deleting them one by one as
	// well cost a B+tree descent each.
	for _, off := range c.delKeys {
		if err := at.Delete(offKey(off)); err != nil {
			return err
		}
	}
	if err := trimAckedBelow(ab, c.floor); err != nil {
		return err
	}
	return deleteBelow(at, c.floor)
}

// encode returns c as a journal payload.
func (c *ackCommit) encode() []byte {
	b := make([]byte, 0, 32+len(c.name)+10*(len(c.above)+len(c.delKeys)+2*len(c.countOffs)))
	b = append(b, journalAck)
	b = binary.AppendUvarint(b, uint64(len(c.name)))
	b = append(b, c.name...)
	b = binary.BigEndian.AppendUint64(b, c.inc)
	b = binary.AppendVarint(b, c.floor)
	b = binary.AppendVarint(b, c.mark)
	b = binary.AppendUvarint(b, uint64(len(c.countOffs)))
	for i, off := range c.countOffs {
		b = binary.AppendVarint(b, off)
		b = binary.AppendUvarint(b, uint64(len(c.countVals[i])))
		b = append(b, c.countVals[i]...)
	}
	for _, offs := range [][]int64{c.above, c.delKeys} {
		b = binary.AppendUvarint(b, uint64(len(offs)))
		for _, off := range offs {
			b = binary.AppendVarint(b, off)
		}
	}
	return b
}

// decode reads what encode wrote (after the kind byte).
func (c *ackCommit) decode(p []byte) error {
	r := journalReader{p: p}
	c.name = string(r.bytes())
	c.inc = r.u64()
	c.floor, c.mark = r.varint(), r.varint()
	n := r.count()
	for range n {
		c.countOffs = append(c.countOffs, r.varint())
		c.countVals = append(c.countVals, r.bytes())
	}
	for _, offs := range []*[]int64{&c.above, &c.delKeys} {
		n := r.count()
		for range n {
			*offs = append(*offs, r.varint())
		}
	}
	if r.err == nil && len(r.p) > 0 {
		r.err = errors.New("trailing bytes")
	}
	return r.err
}

// journalReader decodes a payload; the first error sticks and ends the reading.
type journalReader struct {
	p   []byte
	err error
}

func (r *journalReader) fail() {
	if r.err == nil {
		r.err = errors.New("truncated record")
	}
	r.p = nil
}

func (r *journalReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.p)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.p = r.p[n:]
	return v
}

func (r *journalReader) varint() int64 {
	v, n := binary.Varint(r.p)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.p = r.p[n:]
	return v
}

// count reads a length and checks that it can be met by the bytes left (each
// element takes at least one).
func (r *journalReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.p)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *journalReader) bytes() []byte {
	n := r.count()
	b := r.p[:n:n]
	r.p = r.p[n:]
	return b
}

func (r *journalReader) u64() uint64 {
	if len(r.p) < 8 {
		r.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(r.p)
	r.p = r.p[8:]
	return v
}
