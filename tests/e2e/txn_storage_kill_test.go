package e2e

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
)

// kafkaTxnBatch encodes values as one uncompressed RecordBatch v2 with kmsg, as a
// Kafka producer sends it: transactional when pid >= 0 (pid -1: a plain batch), and
// for marker a control batch (an ABORT marker) as storage-core writes them.
func kafkaTxnBatch(pid int64, seq int32, marker bool, values ...[]byte) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: v}
		if marker {
			r.Key = []byte{0, 0, 0, 0} // version 0, type ABORT
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	var attrs int16
	epoch := int16(0)
	switch {
	case pid < 0:
		epoch, seq = -1, -1
	case marker:
		attrs, seq = 0x30, -1
	default:
		attrs = 0x10
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: pid, ProducerEpoch: epoch,
		FirstSequence: seq, NumRecords: int32(len(values)), Records: recs,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// committedView is what a read_committed Kafka consumer makes of a channel: the
// values (up to a "|") of committed records in order (aborted transactions dropped with the
// aborted list, as clients do; control batches skipped), the aborted transactions
// reported, and the last stable sequence.
type committedView struct {
	values  []string
	aborted [][2]int64 // producer id, first sequence
	lss, hw int64
}

// fetchCommitted reads the whole channel with read_committed Fetches, applying each
// answer's aborted transactions as franz-go does (a producer's batches from an
// aborted transaction's first offset on are dropped until its abort marker).
func fetchCommitted(t *testing.T, st storagev1.StorageServiceClient, ch string) committedView {
	t.Helper()
	var v committedView
	seen := map[[2]int64]bool{}
	abortedFrom := map[int64][]int64{} // pid -> pending first sequences
	from := int64(1)
	for {
		r, err := st.Fetch(ctxT(t, 20*time.Second), &storagev1.FetchRequest{
			IsolationLevel: storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED,
			Channels:       []*storagev1.FetchChannel{{Channel: ch, FromSequence: from, MaxBytes: 256 << 10}}})
		if err != nil {
			t.Fatal(err)
		}
		res := r.Results[0]
		if res.Error != 0 {
			t.Fatalf("fetch from %d: %v", from, res.Error)
		}
		v.lss, v.hw = res.LastStableSequence, res.HighWatermark
		for _, a := range res.AbortedTransactions {
			k := [2]int64{a.ProducerId, a.FirstSequence}
			if !seen[k] {
				seen[k] = true
				v.aborted = append(v.aborted, k)
				abortedFrom[a.ProducerId] = append(abortedFrom[a.ProducerId], a.FirstSequence)
			}
		}
		if len(res.Batches) == 0 {
			return v
		}
		for b := res.Batches; len(b) > 0; {
			var rb kmsg.RecordBatch
			n := 12 + int(binary.BigEndian.Uint32(b[8:]))
			if err := rb.ReadFrom(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
			seq := rb.FirstOffset + 1
			from = seq + int64(rb.LastOffsetDelta) + 1
			if seq+int64(rb.LastOffsetDelta) >= res.LastStableSequence+1 {
				t.Fatalf("read_committed fetch returned sequence %d past the last stable sequence %d", seq, res.LastStableSequence)
			}
			if rb.Attributes&0x20 != 0 { // a marker ends the producer's aborted transaction
				if p := abortedFrom[rb.ProducerID]; len(p) > 0 && p[0] <= seq {
					abortedFrom[rb.ProducerID] = p[1:]
				}
				continue
			}
			if p := abortedFrom[rb.ProducerID]; rb.Attributes&0x10 != 0 && len(p) > 0 && p[0] <= seq {
				continue
			}
			for recs := rb.Records; len(recs) > 0; {
				l, k := binary.Varint(recs)
				var rec kmsg.Record
				if err := rec.ReadFrom(recs[:k+int(l)]); err != nil {
					t.Fatal(err)
				}
				recs = recs[k+int(l):]
				v.values = append(v.values, strings.SplitN(string(rec.Value), "|", 2)[0])
			}
		}
	}
}

// TestKillStorageWithOpenTransactions: transactional batches of four producers are
// appended natively (AppendBatches, kmsg-built batches) over several segments,
// interleaved with plain batches; markers end most transactions (some commit, some
// abort), but in the last round only half of them, and the last thing on disk is a
// half-written marker. storage-core is killed with SIGKILL and started again: the last
// stable sequence, the aborted transactions (through read_committed Fetch) and every
// committed record are exactly those before the kill, the open transactions show in
// DescribeProducers, and ending them afterwards makes everything stable.
func TestKillStorageWithOpenTransactions(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	st := storageClient(t, s.StorageAddr)
	ch := "kafka.txnkill" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := st.CreateChannel(ctxT(t, 20*time.Second), &storagev1.CreateChannelRequest{Name: ch,
		Config: &storagev1.ChannelConfig{SegmentBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	appendBatch := func(b []byte) int64 {
		t.Helper()
		r, err := st.AppendBatches(ctxT(t, 20*time.Second), &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: ch, Batches: b}}})
		if err != nil || r.Results[0].Error != 0 {
			t.Fatalf("append: %v %v", r, err)
		}
		return r.Results[0].FirstSequence
	}
	marker := func(pid int64, commit bool) int64 {
		t.Helper()
		r, err := st.WriteTxnMarkers(ctxT(t, 20*time.Second), &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{
			{Channel: ch, ProducerId: pid, Commit: commit, CoordinatorEpoch: 1}}})
		if err != nil || r.Results[0].ErrorCode != 0 || r.Results[0].MarkerSequence == 0 {
			t.Fatalf("marker pid %d: %v %v", pid, r, err)
		}
		return r.Results[0].MarkerSequence
	}

	// The model: every data batch in log order with its fate.
	type entry struct {
		pid    int64 // -1 plain
		first  int64
		values []string
		fate   string // "commit", "abort", "open" (transactional), "" (plain)
	}
	var (
		entries []*entry
		open    = map[int64]*entry{}
		aborted [][2]int64
		seqs    = map[int64]int32{}
	)
	pad := strings.Repeat("x", 2000)
	const rounds, producers = 24, 4
	for r := 0; r < rounds; r++ {
		for p := int64(1); p <= producers; p++ {
			e := &entry{pid: p, fate: "open"}
			var vals [][]byte
			for i := 0; i < 12; i++ {
				e.values = append(e.values, fmt.Sprintf("r%d-p%d-%d", r, p, i))
				vals = append(vals, []byte(e.values[i]+"|"+pad))
			}
			e.first = appendBatch(kafkaTxnBatch(p, seqs[p], false, vals...))
			seqs[p] += int32(len(vals))
			entries = append(entries, e)
			open[p] = e
		}
		plain := &entry{pid: -1, values: []string{fmt.Sprintf("plain-%d", r)}}
		plain.first = appendBatch(kafkaTxnBatch(-1, -1, false, []byte(plain.values[0]+"|")))
		entries = append(entries, plain)
		for p := int64(1); p <= producers; p++ {
			if r == rounds-1 && p > producers/2 {
				continue // left open over the kill
			}
			e := open[p]
			e.fate = "commit"
			if (r+int(p))%3 == 0 {
				e.fate = "abort"
				aborted = append(aborted, [2]int64{p, e.first})
			}
			marker(p, e.fate == "commit")
			delete(open, p)
		}
	}
	wantLSS := int64(-1)
	for _, e := range open {
		if wantLSS < 0 || e.first-1 < wantLSS {
			wantLSS = e.first - 1
		}
	}
	var wantValues []string
	for _, e := range entries {
		if e.first <= wantLSS && (e.fate == "" || e.fate == "commit") {
			wantValues = append(wantValues, e.values...)
		}
	}
	check := func(when string, lss int64, values []string, aborted [][2]int64) {
		t.Helper()
		v := fetchCommitted(t, st, ch)
		if v.lss != lss || !reflect.DeepEqual(v.aborted, aborted) || !reflect.DeepEqual(v.values, values) {
			t.Fatalf("%s: last stable %d (want %d, hw %d), aborted %v (want %v), %d committed values (want %d; first difference %s)",
				when, v.lss, lss, v.hw, v.aborted, aborted, len(v.values), len(values), firstDiff(v.values, values))
		}
		rd, err := st.Read(ctxT(t, 20*time.Second), &storagev1.ReadRequest{Channel: ch, MaxRecords: 10000, MaxBytes: 64 << 20,
			IsolationLevel: storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED})
		if err != nil {
			t.Fatal(err)
		}
		var native []string
		for _, r := range rd.Records {
			native = append(native, strings.SplitN(string(r.Value), "|", 2)[0])
		}
		if rd.LastStableSequence != lss || !reflect.DeepEqual(native, values) {
			t.Fatalf("%s: native read_committed: last stable %d (want %d), %d values (want %d; first difference %s)",
				when, rd.LastStableSequence, lss, len(native), len(values), firstDiff(native, values))
		}
	}
	check("before the kill", wantLSS, wantValues, aborted)
	g, err := st.GetChannel(ctxT(t, 20*time.Second), &storagev1.GetChannelRequest{Name: ch})
	if err != nil || g.Channel.SegmentCount < 3 {
		t.Fatalf("want several segments (snapshots in play): %v %v", g, err)
	}
	hw := g.Channel.HighWatermark

	if err := s.KillStorage(); err != nil {
		t.Fatal(err)
	}
	// A half-written marker at the end of the active segment, as a crash in the
	// middle of its write leaves it.
	segs, err := filepath.Glob(filepath.Join(s.DataDir, "channels", ch, "*.log"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v %v", segs, err)
	}
	sort.Strings(segs)
	half := kafkaTxnBatch(3, -1, true, []byte{0, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint64(half, uint64(hw)) // its offset would have been the next
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(half[:len(half)/2]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartStorage(ctxT(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	st = storageClient(t, s.StorageAddr)
	check("after kill -9 and restart", wantLSS, wantValues, aborted)
	g, err = st.GetChannel(ctxT(t, 20*time.Second), &storagev1.GetChannelRequest{Name: ch})
	if err != nil || g.Channel.HighWatermark != hw || g.Channel.LastStableSequence != wantLSS {
		t.Fatalf("after restart: %v %v (hw %d, last stable %d before)", g, err, hw, wantLSS)
	}
	dp, err := st.DescribeProducers(ctxT(t, 20*time.Second), &storagev1.DescribeProducersRequest{Channels: []string{ch}})
	if err != nil {
		t.Fatal(err)
	}
	gotOpen := map[int64]int64{}
	for _, p := range dp.Results[0].Producers {
		if p.CurrentTxnStartSequence >= 0 {
			gotOpen[p.ProducerId] = p.CurrentTxnStartSequence
		}
	}
	wantOpen := map[int64]int64{}
	for p, e := range open {
		wantOpen[p] = e.first
	}
	if !reflect.DeepEqual(gotOpen, wantOpen) {
		t.Fatalf("open transactions after restart %v, want %v", gotOpen, wantOpen)
	}

	// The coordinator's retries end the open transactions: one commit, one abort.
	marker(3, true)
	open[3].fate = "commit"
	marker(4, false)
	open[4].fate = "abort"
	aborted = append(aborted, [2]int64{4, open[4].first})
	g, err = st.GetChannel(ctxT(t, 20*time.Second), &storagev1.GetChannelRequest{Name: ch})
	if err != nil {
		t.Fatal(err)
	}
	wantValues = nil
	for _, e := range entries {
		if e.fate == "" || e.fate == "commit" {
			wantValues = append(wantValues, e.values...)
		}
	}
	check("after the open transactions ended", g.Channel.HighWatermark, wantValues, aborted)
}

// firstDiff describes where two value lists first differ.
func firstDiff(got, want []string) string {
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: %q, want %q", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}
