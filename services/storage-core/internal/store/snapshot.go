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
// producer state as of the new segment's base offset is written atomically as
// <base>.snapshot, so a start only scans the active segment's batch headers on top of
// it instead of every retained segment. Format (big endian):
//
//	"TPS2" | count uint32 | count x (pid int64, epoch int16, lastMs int64, n uint8,
//	n x (firstSeq int32, lastSeq int32, baseOffset int64)) | crc32c of all before
var snapshotMagic = []byte("TPS2")

var errBadSnapshot = errors.New("bad producer snapshot")

func snapshotName(base int64) string { return segmentName(base, ".snapshot") }

func encodeSnapshot(ps producers) []byte {
	b := append([]byte(nil), snapshotMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
	for pid, st := range ps {
		b = binary.BigEndian.AppendUint64(b, uint64(pid))
		b = binary.BigEndian.AppendUint16(b, uint16(st.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(st.lastMs))
		b = append(b, byte(st.n))
		for i := 0; i < st.n; i++ {
			pb := st.batches[i]
			b = binary.BigEndian.AppendUint32(b, uint32(pb.firstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(pb.lastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.baseOffset))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeSnapshot(b []byte) (producers, error) {
	if len(b) < 12 || string(b[:4]) != string(snapshotMagic) {
		return nil, errBadSnapshot
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum", errBadSnapshot)
	}
	n := binary.BigEndian.Uint32(body[4:])
	p := body[8:]
	ps := make(producers, n)
	for i := uint32(0); i < n; i++ {
		if len(p) < 19 {
			return nil, fmt.Errorf("%w: short", errBadSnapshot)
		}
		st := &producerState{epoch: int16(binary.BigEndian.Uint16(p[8:])), lastMs: int64(binary.BigEndian.Uint64(p[10:]))}
		pid := int64(binary.BigEndian.Uint64(p))
		cnt := int(p[18])
		p = p[19:]
		if cnt > maxProducerBatches || len(p) < cnt*16 {
			return nil, fmt.Errorf("%w: batches", errBadSnapshot)
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
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: trailing bytes", errBadSnapshot)
	}
	return ps, nil
}

// writeSnapshot writes the snapshot for base and removes older ones.
func writeSnapshot(dir string, base int64, ps producers) error {
	if err := writeFileAtomic(dir, snapshotName(base), encodeSnapshot(ps)); err != nil {
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
func readSnapshot(dir string, base int64) (producers, bool) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotName(base)))
	if err != nil {
		return nil, false
	}
	ps, err := decodeSnapshot(b)
	if err != nil {
		return nil, false
	}
	return ps, true
}
