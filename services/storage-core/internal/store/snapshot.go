package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
)

// Producer state snapshots (Kafka's <offset>.snapshot). At each segment roll the
// producer and transaction state as of the new segment's base offset is written
// atomically as <base>.snapshot, so a start only scans the active segment's batch
// headers on top of it instead of every retained segment. Format (big endian):
//
//	"TPS3" | count uint32 | count x (pid int64, epoch int16, lastMs int64,
//	coordEpoch int32, n uint8, n x (firstSeq int32, lastSeq int32, baseOffset int64)) |
//	open uint32 | open x (pid int64, first int64) |
//	aborted uint32 | aborted x (pid int64, first int64, last int64, lso int64) |
//	crc32c of all before
//
// "TPS2" (written before transactions were kept) is the same without coordEpoch and
// the two transaction lists; it is read as having no transactions (no marker could
// be written then).
var (
	snapshotMagic   = []byte("TPS3")
	snapshotMagicV2 = []byte("TPS2")
)

var errBadSnapshot = errors.New("bad producer snapshot")

func snapshotName(base int64) string { return segmentName(base, ".snapshot") }

// encodeSnapshot encodes ps and t (nil: no transactions); aborted entries whose
// marker is below start are left out.
func encodeSnapshot(ps producers, t *txnState, start int64) []byte {
	b := append([]byte(nil), snapshotMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
	for pid, st := range ps {
		b = binary.BigEndian.AppendUint64(b, uint64(pid))
		b = binary.BigEndian.AppendUint16(b, uint16(st.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(st.lastMs))
		b = binary.BigEndian.AppendUint32(b, uint32(st.coordEpoch))
		b = append(b, byte(st.n))
		for i := 0; i < st.n; i++ {
			pb := st.batches[i]
			b = binary.BigEndian.AppendUint32(b, uint32(pb.firstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(pb.lastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.baseOffset))
		}
	}
	var open [][2]int64
	var aborted []abortedTxn
	if t != nil {
		t.mu.Lock()
		for pid, first := range t.open {
			open = append(open, [2]int64{pid, first})
		}
		for _, a := range t.aborted {
			if a.last >= start {
				aborted = append(aborted, a)
			}
		}
		t.mu.Unlock()
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(open)))
	for _, o := range open {
		b = binary.BigEndian.AppendUint64(b, uint64(o[0]))
		b = binary.BigEndian.AppendUint64(b, uint64(o[1]))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(aborted)))
	for _, a := range aborted {
		for _, v := range [4]int64{a.pid, a.first, a.last, a.lso} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSnapshot decodes a TPS3 or TPS2 snapshot. t is nil when it holds no
// transaction state.
func decodeSnapshot(b []byte) (producers, *txnState, error) {
	if len(b) < 12 {
		return nil, nil, errBadSnapshot
	}
	v3 := string(b[:4]) == string(snapshotMagic)
	if !v3 && string(b[:4]) != string(snapshotMagicV2) {
		return nil, nil, errBadSnapshot
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, nil, fmt.Errorf("%w: checksum", errBadSnapshot)
	}
	n := binary.BigEndian.Uint32(body[4:])
	p := body[8:]
	ps := make(producers, min(n, 1<<16))
	fixed := 19
	if v3 {
		fixed = 23
	}
	for i := uint32(0); i < n; i++ {
		if len(p) < fixed {
			return nil, nil, fmt.Errorf("%w: short", errBadSnapshot)
		}
		st := &producerState{epoch: int16(binary.BigEndian.Uint16(p[8:])), lastMs: int64(binary.BigEndian.Uint64(p[10:])), coordEpoch: -1}
		pid := int64(binary.BigEndian.Uint64(p))
		if v3 {
			st.coordEpoch = int32(binary.BigEndian.Uint32(p[18:]))
		}
		cnt := int(p[fixed-1])
		p = p[fixed:]
		if cnt > maxProducerBatches || len(p) < cnt*16 {
			return nil, nil, fmt.Errorf("%w: batches", errBadSnapshot)
		}
		for j := 0; j < cnt; j++ {
			st.push(producerBatch{
				firstSeq:   int32(binary.BigEndian.Uint32(p)),
				lastSeq:    int32(binary.BigEndian.Uint32(p[4:])),
				baseOffset: int64(binary.BigEndian.Uint64(p[8:])),
			})
			p = p[16:]
		}
		ps[pid] = st
	}
	var t *txnState
	if v3 {
		t = newTxnState()
		if len(p) < 4 {
			return nil, nil, fmt.Errorf("%w: short", errBadSnapshot)
		}
		no := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(len(p)) < uint64(no)*16 {
			return nil, nil, fmt.Errorf("%w: open transactions", errBadSnapshot)
		}
		for i := uint32(0); i < no; i++ {
			pid, first := int64(binary.BigEndian.Uint64(p)), int64(binary.BigEndian.Uint64(p[8:]))
			t.open[pid] = first
			t.firstOpen = min(t.firstOpen, first)
			p = p[16:]
		}
		if len(p) < 4 {
			return nil, nil, fmt.Errorf("%w: short", errBadSnapshot)
		}
		na := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(len(p)) < uint64(na)*32 {
			return nil, nil, fmt.Errorf("%w: aborted transactions", errBadSnapshot)
		}
		t.aborted = make([]abortedTxn, na)
		for i := range t.aborted {
			t.aborted[i] = abortedTxn{
				pid: int64(binary.BigEndian.Uint64(p)), first: int64(binary.BigEndian.Uint64(p[8:])),
				last: int64(binary.BigEndian.Uint64(p[16:])), lso: int64(binary.BigEndian.Uint64(p[24:])),
			}
			p = p[32:]
		}
		if len(t.open) == 0 && len(t.aborted) == 0 {
			t = nil
		}
	}
	if len(p) != 0 {
		return nil, nil, fmt.Errorf("%w: trailing bytes", errBadSnapshot)
	}
	return ps, t, nil
}

// writeSnapshot writes the snapshot for base (producers ps, transactions t, aborted
// entries from log start start) and removes older ones.
func writeSnapshot(dir string, base int64, ps producers, t *txnState, start int64) error {
	if err := writeFileAtomic(dir, snapshotName(base), encodeSnapshot(ps, t, start)); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	keep := snapshotName(base)
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".snapshot") && n != keep {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	return nil
}

// readSnapshot loads the snapshot for base; ok is false when there is none or it is
// unusable (the caller then rebuilds from every segment).
func readSnapshot(dir string, base int64) (producers, *txnState, bool) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotName(base)))
	if err != nil {
		return nil, nil, false
	}
	ps, t, err := decodeSnapshot(b)
	if err != nil {
		return nil, nil, false
	}
	return ps, t, true
}
