package queue

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
)

// truncateTail cuts n bytes off the first segment of channel name under dir (the
// last batch torn, as a power loss with --fsync=interval may leave it). In WAL mode
// (-tags walmode) the write-ahead log would hold the torn batch and write it again at
// open; the loss modeled here takes it too, so the WAL goes (no WAL directory is a
// WAL without entries).
func truncateTail(t *testing.T, dir, name string, n int64) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, "store", "wal")); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "store", "channels", name, "00000000000000000000.log")
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

// TestDeliveredMarkPastCutLogTail: messages delivered but not acked, then a crash
// cuts the tail of both the source and the queue log, while the binding's last
// checkpoint is older than the cut (so neither the floor, the acked spans, delivery
// records nor the checkpoint reach past the log's end): only the delivered mark does.
// The record the binding copies next takes a cut offset and was never delivered: it
// must come with delivery attempt 1, not 2.
func TestDeliveredMarkPastCutLogTail(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a")
	mustAck(t, q, ackIDs(receive(t, q, 10, 1))...) // the first copy is checkpointed at once
	publish(t, src, "b")                           // the next ones within a second are not
	receive(t, q, 10, 1)
	publish(t, src, "c")
	receive(t, q, 10, 1) // b and c delivered, not acked: the mark is at 3
	crashed := &env{t: t, dir: t.TempDir(), clk: e.clk}
	copyDir(t, e.dir, crashed.dir)
	truncateTail(t, crashed.dir, "gcp.t", 5)     // c is torn in the source
	truncateTail(t, crashed.dir, "gcp.sub.s", 5) // and in the queue log
	crashed.open()
	defer crashed.close()
	q, err := crashed.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, crashed.mustGet("gcp.t"), "d") // takes c's source sequence and queue offset
	got := map[string]int32{}
	for _, d := range receive(t, q, 10, 2) {
		got[string(d.Record.Value)] = d.Attempt
	}
	if got["b"] != 2 || got["d"] != 1 {
		t.Fatalf("attempts after the cut %v, want b 2 (delivered before), d 1 (new)", got)
	}
	crashed.restart()
	q, _ = crashed.m.Get("gcp.sub.s")
	got = map[string]int32{}
	for _, d := range receive(t, q, 10, 2) {
		got[string(d.Record.Value)] = d.Attempt
	}
	if got["b"] != 3 || got["d"] != 2 {
		t.Fatalf("attempts after a restart %v, want b 3, d 2", got)
	}
}

// TestStateBeforeDeliveredMark: a state file written before the delivered mark has
// an attempts record for every delivered message and no mark: it is read as it was
// (records give the counts, the others are new), and the mark starts from there.
func TestStateBeforeDeliveredMark(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c", "d")
	for deadline := time.Now().Add(5 * time.Second); e.mustGet("gcp.sub.s").HighWatermark() < 4; {
		if time.Now().After(deadline) {
			t.Fatal("not copied")
		}
		time.Sleep(time.Millisecond)
	}
	e.close()
	// As the old version left it: a delivered once, b three times, c and d never.
	db, err := bolt.Open(filepath.Join(e.dir, "store", "queues.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := stateBucket(tx, "gcp.sub.s")
		if err := b.Delete(keyDelivered); err != nil {
			return err
		}
		at := b.Bucket(bktAttempts)
		if err := at.Put(offKey(0), delivered{attempts: 1}.encode()); err != nil {
			return err
		}
		return at.Put(offKey(1), delivered{attempts: 3}.encode())
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	e.open()
	q, err := e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	attempts := func(ds []Delivery) string {
		out := ""
		for _, d := range ds {
			out += fmt.Sprintf("%s%d ", d.Record.Value, d.Attempt)
		}
		return out
	}
	ds := receive(t, q, 10, 4)
	if got := attempts(ds); got != "a2 b4 c1 d1 " {
		t.Fatalf("first deliveries after the upgrade: %s", got)
	}
	mustAck(t, q, ds[0].AckID, ds[2].AckID)
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	ds = receive(t, q, 10, 2)
	if got := attempts(ds); got != "b5 d2 " {
		t.Fatalf("after a restart: %s", got)
	}
	mustAck(t, q, ackIDs(ds)...)
	if n := e.attemptsRecords("gcp.sub.s"); n != 0 {
		t.Fatalf("%d attempts records with everything acked", n)
	}
}

// TestDeadLetterCountAcrossRestarts: with the delivered mark covering first deliveries,
// max_delivery_attempts still counts every delivery across restarts, with and
// without ordering keys, whether the message is the first of the window or behind
// a held lane.
func TestDeadLetterCountAcrossRestarts(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			e := newEnv(t)
			src := e.log("gcp.t")
			e.log("gcp.dead")
			cfg := Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 3, DeliveryCountHeader: "n"}}
			if ordered {
				cfg.OrderingKeyHeader = "k"
			}
			q := e.queue("gcp.sub.s", cfg, Binding{Source: "gcp.t"})
			// x0 holds lane x, so x1 waits; y is first delivered behind it.
			publishWith(t, src, "x0", "k", "x")
			publishWith(t, src, "x1", "k", "x")
			publishWith(t, src, "y", "k", "")
			n := map[bool]int{false: 3, true: 2}[ordered]
			for round := 1; round <= 3; round++ {
				ds := receive(t, q, 10, n)
				for _, d := range ds {
					if d.Attempt != int32(round) {
						t.Fatalf("round %d: %s attempt %d", round, d.Record.Value, d.Attempt)
					}
				}
				if round < 3 {
					e.restart() // the leases end with it
					q, _ = e.m.Get("gcp.sub.s")
				}
			}
			e.clk.add(11 * time.Second) // the third leases expire: dead-lettered
			e.m.Sweep()
			recs, _, err := e.mustGet("gcp.dead").ReadRecords(0, 10, 1<<20)
			if err != nil || len(recs) != n {
				t.Fatalf("%d dead letters (%v), want %d", len(recs), err, n)
			}
			for _, r := range recs {
				if fmt.Sprint(r.Headers) != "[{k []} {n [51]}]" && fmt.Sprint(r.Headers) != "[{k [120]} {n [51]}]" {
					t.Fatalf("dead letter %s headers %v", r.Value, r.Headers)
				}
			}
			want := map[bool]string{false: "[]", true: "[x1]"}[ordered]
			if got := values(receive(t, q, 10, map[bool]int{false: 0, true: 1}[ordered])); fmt.Sprint(got) != want {
				t.Fatalf("after dead-lettering: %v, want %v", got, want)
			}
		})
	}
}

// TestRetentionWithTombstones: messages past the retention period are dropped around
// acked ones still in the window (tombstones), which are not dropped twice; the
// counts and the next delivery are right, also after a restart.
func TestRetentionWithTombstones(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{MessageRetentionMs: 60_000, AckDeadlineMs: 600_000}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c", "d")
	ds := receive(t, q, 10, 4)
	mustAck(t, q, ds[1].AckID, ds[3].AckID) // b and d: tombstones behind a
	e.clk.add(30 * time.Second)
	publish(t, src, "e")
	receive(t, q, 10, 1) // e leased
	e.clk.add(31 * time.Second)
	e.m.Maintain() // a and c expire; e is 31 s old
	if n := testutil.ToFloat64(e.m.opts.Metrics.Dropped); n != 2 {
		t.Fatalf("%v messages dropped, want 2 (a, c)", n)
	}
	if in := q.Info(); in.Backlog != 1 || in.Leased != 1 {
		t.Fatalf("info %+v, want backlog 1 leased 1 (e)", in)
	}
	q.mu.Lock()
	n, tombs := len(q.pending), q.tombs
	q.mu.Unlock()
	if n-tombs != 1 {
		t.Fatalf("window of %d with %d tombstones", n, tombs)
	}
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if in := q.Info(); in.Backlog != 1 {
		t.Fatalf("after restart: backlog %d", in.Backlog)
	}
	if d := receive(t, q, 10, 1)[0]; string(d.Record.Value) != "e" || d.Attempt != 2 {
		t.Fatalf("after restart: %s attempt %d", d.Record.Value, d.Attempt)
	}
}
