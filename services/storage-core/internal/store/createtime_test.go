package store

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
	"testing"
)

// TestCreateTimeHeaderRewritten: on a CreateTime channel the batch header's timestamp
// type and max timestamp are the log's, not the producer's (Kafka LogValidator sets
// both in place: CREATE_TIME and the largest record timestamp). A producer's
// LogAppendTime bit does not replace its records' timestamps, and a max timestamp far
// past its records does not reach the time index or LookupMaxTime.
func TestCreateTimeHeaderRewritten(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	l := mustCreate(t, s, "ts", ChannelConfig{TimestampType: TimestampCreateTime})
	reseal := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
		return b
	}
	// Records at 1_000_000 and 1_000_001; the header says LogAppendTime at 5.
	lat := bytes.Clone(kbatch(t, batchOpt{}, "a", "b"))
	binary.BigEndian.PutUint16(lat[offAttributes:], attrTimestampType)
	binary.BigEndian.PutUint64(lat[offMaxTS:], 5)
	mustAppend(t, l, reseal(lat))
	// Records at 2_000_000 and 2_000_001; the header says MaxInt64.
	far := bytes.Clone(kbatch(t, batchOpt{ts: 2_000_000}, "c", "d"))
	binary.BigEndian.PutUint64(far[offMaxTS:], math.MaxInt64)
	mustAppend(t, l, reseal(far))

	recs := readAll(t, l, 0)
	want := []int64{1_000_000, 1_000_001, 2_000_000, 2_000_001}
	if len(recs) != len(want) {
		t.Fatalf("read %d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if r.Timestamp != want[i] {
			t.Errorf("record %d timestamp %d, want %d (its create time)", i, r.Timestamp, want[i])
		}
	}
	if _, _, found, err := l.LookupTime(2_000_002); err != nil || found {
		t.Errorf("LookupTime after every record: found %v err %v, want not found", found, err)
	}
	if off, ts, found, err := l.LookupMaxTime(); err != nil || !found || off != 3 || ts != 2_000_001 {
		t.Errorf("LookupMaxTime: offset %d ts %d found %v err %v, want 3 2000001 true", off, ts, found, err)
	}
	raw, err := l.ReadRaw(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if a := binary.BigEndian.Uint16(raw[offAttributes:]); a&attrTimestampType != 0 {
		t.Errorf("stored batch attributes %#x keep the producer's LogAppendTime bit", a)
	}
	if _, err := DecodeBatch(raw); err != nil {
		t.Errorf("stored batch: %v", err)
	}
	// The rewritten frames pass recovery's checks when the store opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, nil)
	defer s.Close()
	if l, err = s.Get("ts"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, 0); len(got) != len(want) || got[3].Timestamp != want[3] {
		t.Errorf("after reopening: %d records, want %d with the same timestamps", len(got), len(want))
	}
	if off, ts, found, err := l.LookupMaxTime(); err != nil || !found || off != 3 || ts != 2_000_001 {
		t.Errorf("LookupMaxTime after reopening: offset %d ts %d found %v err %v, want 3 2000001 true", off, ts, found, err)
	}
}
