package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// keyedTxn produces recs (keyed, partition 0) in one transaction of cl and commits or
// aborts it.
func keyedTxn(t *testing.T, cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("BeginTransaction: %v", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("transactional produce: %v", err)
	}
	end := kgo.TryAbort
	if commit {
		end = kgo.TryCommit
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatalf("EndTransaction(commit=%v): %v", commit, err)
	}
}

// compactTxnView is one read of a compacted topic: its data records by offset (ticks left
// out) and how many control records (transaction markers) it holds.
type compactTxnView struct {
	data    map[int64]compactKV
	markers int
}

// readCompactTxnView writes a plain tick record (which also rolls the active segment once
// segment.ms has passed, so the cleaner has more to take) and reads the topic from
// the start up to it with kgo at the given isolation, control records kept; an offset
// going back or read twice fails the test.
func readCompactTxnView(t *testing.T, addrs []string, plain *kgo.Client, topic string, committed bool, n *int) compactTxnView {
	t.Helper()
	*n++
	tick := &kgo.Record{Topic: topic, Key: []byte("tick"), Value: fmt.Appendf(nil, "tick-%d", *n)}
	if err := plain.ProduceSync(ctxT(t, 20*time.Second), tick).FirstErr(); err != nil {
		t.Fatalf("produce tick: %v", err)
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := newClient(t, addrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	ctx := ctxT(t, 60*time.Second)
	v := compactTxnView{data: map[int64]compactKV{}}
	last := int64(-1)
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s up to tick %d: deadline passed with %d records", topic, *n, len(v.data))
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last {
				t.Fatalf("offset %d read after %d", r.Offset, last)
			}
			last = r.Offset
			switch {
			case r.Attrs.IsControl():
				v.markers++
			case string(r.Key) == "tick":
				done = done || r.Offset >= tick.Offset
			default:
				v.data[r.Offset] = compactKV{r.Key, r.Value}
			}
		})
		if done {
			return v
		}
	}
}

// TestCompactionTransactions: a kgo transactional producer commits and aborts
// transactions into a compacted topic (keys key-0..key-9 in each, and keys only aborted
// transactions write). Once cleaned, read_uncommitted and read_committed kgo consumers
// both see exactly the newest committed value of each key (the aborted records are gone
// from the log, not only hidden) and no aborted-only key; the markers of transactions
// with no record left go after delete.retention.ms, leaving the one of the last
// committed transaction, whose records remain. A transaction committed afterwards by
// the same producer is read by read_committed (no aborted range without its marker
// left behind). storage-core is killed with SIGKILL twice while the cleaner works on
// the topic (its read counter moving, slowed by its I/O limit): after each restart
// every record read is the one written at its offset, read_committed shows no aborted
// record and every key's newest committed one, and no read, before or after a kill,
// shows a record (aborted or superseded) that an earlier read no longer showed.
func TestCompactionTransactions(t *testing.T) {
	s := stack.StartT(t, stack.Options{StorageFlags: []string{"--cleaner-backoff=200ms", "--cleaner-io-bytes-per-second=40000"}})
	adm := newAdmin(t, s.KafkaAddrs)
	topic := compactTopic(t, adm, "compacttxn", 1000, 3000)
	tx := txnProducer(t, s.KafkaAddrs, topicName("tid"))
	plain := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]string{}
	written := map[int64]compactKV{}
	aborted := map[int64]bool{}
	newest := map[string]int64{}
	const rounds = 10
	for r := range rounds {
		var ab []*kgo.Record
		for k := range 10 {
			ab = append(ab, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "aborted-%d", r)})
		}
		ab = append(ab, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "aborted-only-%d", r), Value: []byte("x")})
		keyedTxn(t, tx, false, ab...)
		var cm []*kgo.Record
		for k := range 10 {
			key, val := fmt.Sprintf("key-%d", k), fmt.Sprintf("committed-%d", r)
			cm = append(cm, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(val)})
			want[key] = val
		}
		keyedTxn(t, tx, true, cm...)
		for _, rec := range ab {
			written[rec.Offset], aborted[rec.Offset] = compactKV{rec.Key, rec.Value}, true
		}
		for _, rec := range cm {
			written[rec.Offset], newest[string(rec.Key)] = compactKV{rec.Key, rec.Value}, rec.Offset
		}
	}
	time.Sleep(1100 * time.Millisecond) // past segment.ms: the next record rolls the segment

	// seen checks a read against what was written and the reads before it at the same
	// isolation: each record is the one written at its offset, none came back after a
	// read without it, read_committed holds no aborted record and every key's newest.
	last := map[bool]map[int64]compactKV{}
	seen := func(what string, v compactTxnView, committed bool) {
		t.Helper()
		for off, kv := range v.data {
			w, ok := written[off]
			if !ok || !bytes.Equal(kv.key, w.key) || !bytes.Equal(kv.value, w.value) {
				t.Fatalf("%s: offset %d holds %s=%s, written %s=%s", what, off, kv.key, kv.value, w.key, w.value)
			}
			if prev, ok := last[committed]; ok {
				if _, was := prev[off]; !was {
					t.Fatalf("%s: offset %d (%s=%s) is back after an earlier read without it", what, off, kv.key, kv.value)
				}
			}
			if committed && aborted[off] {
				t.Fatalf("%s: read_committed returns aborted record %d (%s=%s)", what, off, kv.key, kv.value)
			}
		}
		if committed {
			for key, off := range newest {
				if _, ok := v.data[off]; !ok {
					t.Fatalf("%s: the newest committed record of %s (offset %d) is lost", what, key, off)
				}
			}
		}
		last[committed] = v.data
	}
	n := 0
	for kill := range 2 {
		if err := plain.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Topic: topic, Key: []byte("tick"), Value: []byte("roll")}).FirstErr(); err != nil {
			t.Fatalf("produce tick: %v", err)
		}
		before := cleanerRead(t, s)
		deadline := time.Now().Add(30 * time.Second)
		for cleanerRead(t, s) == before {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: the cleaner did not start within 30 s", kill)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		killedAt := cleanerRead(t, s)
		if err := s.KillStorage(); err != nil {
			t.Fatal(err)
		}
		if err := s.RestartStorage(ctxT(t, 60*time.Second)); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("after kill %d", kill)
		seen(what+", read_uncommitted", readCompactTxnView(t, s.KafkaAddrs, plain, topic, false, &n), false)
		seen(what+", read_committed", readCompactTxnView(t, s.KafkaAddrs, plain, topic, true, &n), true)
		t.Logf("kill %d: after the cleaner read %.0f bytes", kill, killedAt-before)
		time.Sleep(1100 * time.Millisecond) // the reads' ticks roll the segment: more to clean
	}

	match := func(v compactTxnView) string {
		if len(v.data) != len(want) {
			return fmt.Sprintf("%d data records, want %d: %v", len(v.data), len(want), v.data)
		}
		for off, kv := range v.data {
			if want[string(kv.key)] != string(kv.value) {
				return fmt.Sprintf("offset %d: %s=%s, want %s", off, kv.key, kv.value, want[string(kv.key)])
			}
		}
		return ""
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		unc := readCompactTxnView(t, s.KafkaAddrs, plain, topic, false, &n)
		com := readCompactTxnView(t, s.KafkaAddrs, plain, topic, true, &n)
		seen("read_uncommitted", unc, false)
		seen("read_committed", com, true)
		du, dc := match(unc), match(com)
		if du == "" && dc == "" && unc.markers == 1 && com.markers == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not cleaned after 120 s: read_uncommitted: %s (%d markers); read_committed: %s (%d markers)", du, unc.markers, dc, com.markers)
		}
		time.Sleep(1100 * time.Millisecond)
	}
	t.Logf("cleaned after %d reads", n)

	final := &kgo.Record{Topic: topic, Key: []byte("key-0"), Value: []byte("final")}
	keyedTxn(t, tx, true, final)
	want["key-0"] = "final"
	got := readCompactTxnView(t, s.KafkaAddrs, plain, topic, true, &n)
	var finalSeen bool
	for off, kv := range got.data {
		if off == final.Offset && string(kv.value) == "final" {
			finalSeen = true
		}
	}
	if !finalSeen {
		t.Fatalf("read_committed after cleaning lacks the producer's next committed record at %d: %v", final.Offset, got.data)
	}
}
