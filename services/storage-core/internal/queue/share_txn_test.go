package queue

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/tributary/tributary/services/storage-core/internal/store"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// appendTxn appends one transactional batch of values by producer pid (epoch 0, its
// sequences from seq), as a Kafka producer sends it.
func appendTxn(t *testing.T, l *store.Log, pid int64, seq int32, values ...string) {
	t.Helper()
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: 1_000_000, MaxTimestamp: 1_000_000, ProducerID: pid, ProducerEpoch: 0,
		FirstSequence: seq, NumRecords: int32(len(values)), Records: recs,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	if _, err := l.AppendBatches(raw); err != nil {
		t.Fatal(err)
	}
}

func endTxn(t *testing.T, l *store.Log, pid int64, commit bool) {
	t.Helper()
	if _, err := l.WriteTxnMarker(store.TxnMarker{ProducerID: pid, Commit: commit, CoordinatorEpoch: 1}); err != nil {
		t.Fatal(err)
	}
}

func shareOffsets(rs []ShareRecord) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Record.Offset
	}
	return out
}

// TestShareIsolation: at read_committed a share partition acquires only committed
// records below the last stable offset, never an aborted transaction's; at
// read_uncommitted it acquires every data record; at neither a control record.
func TestShareIsolation(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	rc, err := e.m.SharePartition("rc", "t", 0, true, ShareReset{Earliest: true, ReadCommitted: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ru, err := e.m.SharePartition("ru", "t", 0, true, ShareReset{Earliest: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, src, "p0")               // 0
	appendTxn(t, src, 1, 0, "a1", "a2") // 1-2, aborted below
	appendTxn(t, src, 2, 0, "c3")       // 3, committed below
	endTxn(t, src, 1, false)            // 4: ABORT
	endTxn(t, src, 2, true)             // 5: COMMIT
	appendTxn(t, src, 3, 0, "o6")       // 6, open: the LSO
	publish(t, src, "p7")               // 7

	got := shareFetch(t, e, "m", 2, rc)
	if v := shareValues(got); !slices.Equal(v, []string{"p0", "c3"}) || !slices.Equal(shareOffsets(got), []int64{0, 3}) {
		t.Fatalf("read_committed acquired %v at %v, want p0 c3 at 0 3", v, shareOffsets(got))
	}
	// The binding copied everything below the LSO in the read that brought c3, so
	// records past it would be here now.
	recs, errs, err := e.m.ShareFetch(context.Background(), []*Queue{rc}, ShareFetchArgs{Member: "m", MaxRecords: 10, LockMs: 30_000})
	if err != nil || errs[0] != nil || len(recs[0]) != 0 {
		t.Fatalf("read_committed past the LSO: %v %v %v", shareValues(recs[0]), errs, err)
	}
	endTxn(t, src, 3, true) // 8: COMMIT; the LSO moves to 9
	got = shareFetch(t, e, "m", 2, rc)
	if v := shareValues(got); !slices.Equal(v, []string{"o6", "p7"}) || !slices.Equal(shareOffsets(got), []int64{6, 7}) {
		t.Fatalf("read_committed after the commit acquired %v at %v", v, shareOffsets(got))
	}
	if err := rc.ShareAck("m", []ShareAckBatch{{First: 0, Last: 7, Types: []uint8{ShareAccept, ShareGap, ShareGap, ShareAccept, ShareGap, ShareGap, ShareAccept, ShareAccept}}}, 0); err != nil {
		t.Fatalf("accepting the committed records, gaps for the rest: %v", err)
	}

	got = shareFetch(t, e, "m", 6, ru)
	if v := shareValues(got); !slices.Equal(v, []string{"p0", "a1", "a2", "c3", "o6", "p7"}) || !slices.Equal(shareOffsets(got), []int64{0, 1, 2, 3, 6, 7}) {
		t.Fatalf("read_uncommitted acquired %v at %v, want every data record and no marker", v, shareOffsets(got))
	}

	// The level follows the group config: rc read_uncommitted from now on.
	rc.SetShareIsolation(false)
	appendTxn(t, src, 4, 0, "o9") // 9, open
	if got := shareFetch(t, e, "m", 1, rc); shareValues(got)[0] != "o9" {
		t.Fatalf("after switching to read_uncommitted: %v", shareValues(got))
	}
}
