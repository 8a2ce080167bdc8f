package e2e

import (
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRecordBatchEncoding checks the hand-built batches used by TestBadInput against
// franz-go's decoder, so a rejection there is the server's doing.
func TestRecordBatchEncoding(t *testing.T) {
	raw := recordBatch([]kv{{[]byte("raw-k"), []byte("raw-v")}, {nil, []byte("second")}})
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatalf("kmsg cannot read the batch: %v", err)
	}
	if int(b.Length)+12 != len(raw) || b.Magic != 2 || b.NumRecords != 2 || b.LastOffsetDelta != 1 {
		t.Fatalf("batch header: %+v", b)
	}
	if got := crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(b.CRC) != got {
		t.Fatalf("crc %x, computed %x", uint32(b.CRC), got)
	}
	rest := b.Records
	for i, want := range []string{"raw-v", "second"} {
		var r kmsg.Record
		if err := r.ReadFrom(rest); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if string(r.Value) != want || r.OffsetDelta != int32(i) {
			t.Fatalf("record %d: %+v", i, r)
		}
		n := int(r.Length) + varintLen(int64(r.Length))
		rest = rest[n:]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes after the records", len(rest))
	}
}

func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
