package server

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/protobuf/proto"
)

// txnBatch is kafkaBatch with the transactional attribute set.
func txnBatch(t testing.TB, pid int64, epoch int16, seq int32, values ...string) []byte {
	b := kafkaBatch(t, pid, epoch, seq, values...)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|0x10)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func appendRaw(t *testing.T, c storagev1.StorageServiceClient, ch string, b []byte) *storagev1.ChannelAppendResult {
	t.Helper()
	r, err := c.AppendBatches(context.Background(), &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: ch, Batches: b}}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Results[0]
}

func fetchIso(t *testing.T, c storagev1.StorageServiceClient, ch string, from int64, iso storagev1.IsolationLevel) *storagev1.FetchChannelResult {
	t.Helper()
	r, err := c.Fetch(context.Background(), &storagev1.FetchRequest{IsolationLevel: iso,
		Channels: []*storagev1.FetchChannel{{Channel: ch, FromSequence: from, MaxBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Results[0]
}

// batchBases lists the base offsets of the frames in b.
func batchBases(b []byte) []int64 {
	var out []int64
	for len(b) >= 61 {
		out = append(out, int64(binary.BigEndian.Uint64(b)))
		b = b[12+int(binary.BigEndian.Uint32(b[8:])):]
	}
	return out
}

func readValues(t *testing.T, c storagev1.StorageServiceClient, ch string, iso storagev1.IsolationLevel) []string {
	t.Helper()
	r, err := c.Read(context.Background(), &storagev1.ReadRequest{Channel: ch, IsolationLevel: iso})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rec := range r.Records {
		if rec.Control {
			t.Fatalf("control record %d returned to a native reader", rec.Sequence)
		}
		out = append(out, string(rec.Value))
	}
	return out
}

// TestTxnMarkersAndIsolation: through gRPC, transactional appends hold the last
// stable sequence, WriteTxnMarkers ends them (per-marker Kafka codes, idempotent
// retries), read_committed Fetch stops at the LSO and lists aborted transactions while
// read_uncommitted never does, native Read/Subscribe/LookupSequence honour the
// isolation level, DescribeProducers shows open transactions, and a restart keeps it.
func TestTxnMarkersAndIsolation(t *testing.T) {
	const ch = "kafka.txn"
	const ru, rc = storagev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED, storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	dir := t.TempDir()
	ctx := context.Background()
	c, stop := startServer(t, dir)
	defer func() { stop() }()
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
		t.Fatal(err)
	}
	appendRaw(t, c, ch, kafkaBatch(t, -1, -1, -1, "p0"))                    // seq 1
	appendRaw(t, c, ch, txnBatch(t, 7, 0, 0, "a1", "a2"))                   // 2-3
	appendRaw(t, c, ch, kafkaBatch(t, -1, -1, -1, "p3"))                    // 4
	appendRaw(t, c, ch, txnBatch(t, 8, 0, 0, "c4"))                         // 5
	if r := appendRaw(t, c, ch, txnBatch(t, 10, 5, 0, "x")); r.Error != 0 { // 6
		t.Fatal(r)
	}

	f := fetchIso(t, c, ch, 1, rc)
	if f.HighWatermark != 6 || f.LastStableSequence != 1 || !reflect.DeepEqual(batchBases(f.Batches), []int64{0}) || len(f.AbortedTransactions) != 0 {
		t.Fatalf("read_committed before markers: hw %d lss %d bases %v aborted %v", f.HighWatermark, f.LastStableSequence, batchBases(f.Batches), f.AbortedTransactions)
	}
	if f := fetchIso(t, c, ch, 3, rc); len(f.Batches) != 0 || f.Error != 0 {
		t.Fatalf("read_committed at the LSO: %d bytes, error %v", len(f.Batches), f.Error)
	}

	mr, err := c.WriteTxnMarkers(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{
		{Channel: ch, ProducerId: 7, ProducerEpoch: 0, Commit: false, CoordinatorEpoch: 3},
		{Channel: ch, ProducerId: 8, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 3},
		{Channel: ch, ProducerId: 9, ProducerEpoch: 0, Commit: true},  // no open transaction
		{Channel: "kafka.none", ProducerId: 7, ProducerEpoch: 0},      // no channel
		{Channel: ch, ProducerId: 10, ProducerEpoch: 4, Commit: true}, // fenced epoch
		{Channel: "_sys", ProducerId: 7},                              // reserved
		{Channel: ch, ProducerId: 7, ProducerEpoch: 1 << 16},          // bad epoch
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int64
	for _, r := range mr.Results {
		got = append(got, [2]int64{int64(r.ErrorCode), r.MarkerSequence})
	}
	if want := [][2]int64{{0, 7}, {0, 8}, {0, 0}, {3, 0}, {47, 0}, {29, 0}, {42, 0}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("marker results %v, want %v", got, want)
	}
	// The retry of a written marker writes nothing.
	mr, err = c.WriteTxnMarkers(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{{Channel: ch, ProducerId: 7, CoordinatorEpoch: 3}}})
	if err != nil || mr.Results[0].ErrorCode != 0 || mr.Results[0].MarkerSequence != 0 {
		t.Fatalf("retried marker: %v %v", mr, err)
	}
	if _, err := c.WriteTxnMarkers(ctx, &storagev1.WriteTxnMarkersRequest{}); err == nil {
		t.Fatal("empty WriteTxnMarkers accepted")
	}

	check := func() {
		t.Helper()
		f := fetchIso(t, c, ch, 1, rc)
		wantAborted := []*storagev1.AbortedTransaction{{ProducerId: 7, FirstSequence: 2}}
		if f.HighWatermark != 8 || f.LastStableSequence != 5 || !reflect.DeepEqual(batchBases(f.Batches), []int64{0, 1, 3, 4}) ||
			len(f.AbortedTransactions) != 1 || !proto.Equal(f.AbortedTransactions[0], wantAborted[0]) {
			t.Fatalf("read_committed: hw %d lss %d bases %v aborted %v", f.HighWatermark, f.LastStableSequence, batchBases(f.Batches), f.AbortedTransactions)
		}
		if f := fetchIso(t, c, ch, 1, ru); len(f.AbortedTransactions) != 0 || f.LastStableSequence != 5 || len(batchBases(f.Batches)) != 7 {
			t.Fatalf("read_uncommitted: lss %d aborted %v bases %v", f.LastStableSequence, f.AbortedTransactions, batchBases(f.Batches))
		}
		if f := fetchIso(t, c, ch, 8, rc); len(f.AbortedTransactions) != 0 {
			t.Fatalf("aborted transactions of a range after them: %v", f.AbortedTransactions)
		}
		if got := readValues(t, c, ch, rc); !reflect.DeepEqual(got, []string{"p0", "p3", "c4"}) {
			t.Fatalf("Read read_committed %v", got)
		}
		if got := readValues(t, c, ch, ru); !reflect.DeepEqual(got, []string{"p0", "a1", "a2", "p3", "c4", "x"}) {
			t.Fatalf("Read read_uncommitted %v", got)
		}
		for iso, want := range map[storagev1.IsolationLevel]int64{rc: 6, ru: 9} {
			l, err := c.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: ch, TimestampMs: -1, IsolationLevel: iso})
			if err != nil || l.Sequence != want {
				t.Fatalf("LookupSequence(-1, %v): %v %v, want %d", iso, l, err, want)
			}
		}
		if l, err := c.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: ch, TimestampMs: 1000, IsolationLevel: rc}); err != nil || !l.Found || l.Sequence != 1 {
			t.Fatalf("LookupSequence(1000, rc): %v %v", l, err)
		}
		g, err := c.GetChannel(ctx, &storagev1.GetChannelRequest{Name: ch})
		if err != nil || g.Channel.LastStableSequence != 5 || g.Channel.HighWatermark != 8 {
			t.Fatalf("GetChannel %v %v", g, err)
		}
		dp, err := c.DescribeProducers(ctx, &storagev1.DescribeProducersRequest{Channels: []string{ch, "kafka.none"}})
		if err != nil || len(dp.Results) != 2 || dp.Results[1].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
			t.Fatalf("DescribeProducers %v %v", dp, err)
		}
		var ps [][4]int64
		for _, p := range dp.Results[0].Producers {
			ps = append(ps, [4]int64{p.ProducerId, int64(p.ProducerEpoch), int64(p.CoordinatorEpoch), p.CurrentTxnStartSequence})
		}
		if want := [][4]int64{{7, 0, 3, -1}, {8, 0, 3, -1}, {10, 5, -1, 6}}; !reflect.DeepEqual(ps, want) {
			t.Fatalf("producers %v, want %v", ps, want)
		}
	}
	check()
	stop()
	c, stop = startServer(t, dir)
	check()

	// A read_committed subscriber gets the open transaction's record once committed.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sub, err := c.Subscribe(sctx, &storagev1.SubscribeRequest{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}, IsolationLevel: rc})
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for len(vals) < 3 {
		m, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.Records {
			vals = append(vals, string(r.Value))
		}
	}
	if _, err := c.WriteTxnMarkers(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{{Channel: ch, ProducerId: 10, ProducerEpoch: 5, Commit: true}}}); err != nil {
		t.Fatal(err)
	}
	for len(vals) < 4 {
		m, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.Records {
			vals = append(vals, string(r.Value))
		}
	}
	if !reflect.DeepEqual(vals, []string{"p0", "p3", "c4", "x"}) {
		t.Fatalf("subscribed %v", vals)
	}
}
