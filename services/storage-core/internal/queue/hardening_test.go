package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap/zaptest"
)

// A dead-letter ack (or any state write) of a queue deleted and created again under
// its name while the write was in flight must not land in the new queue's state: it
// would mark the new queue's messages acked (silent loss).
func TestAttackDeadLetterAfterDeleteRecreate(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	e.log("gcp.dead")
	cfg := Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 1}}
	q := e.queue("gcp.sub.s", cfg, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a", "b", "c")
	ds := receive(t, q, 3, 3)
	// lease of c ends: it is to be dead-lettered (state stDeadLettering) ...
	q.mu.Lock()
	m := q.find(ds[2].Record.Offset)
	q.expireLocked(m, e.clk.now().UnixMilli())
	q.mu.Unlock()
	// ... while the queue is deleted and created again under its name.
	if err := e.m.Delete("gcp.sub.s", false); err != nil {
		t.Fatal(err)
	}
	q2 := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	receive(t, q2, 10, 3)
	q.deadLetter([]*msg{m})
	// Any other state write still queued by the old queue lands nowhere either.
	q.mu.Lock()
	op := q.commitAcksLocked([]*msg{q.find(ds[2].Record.Offset)})
	q.mu.Unlock()
	if err := op.wait(); err != nil {
		t.Fatal(err)
	}
	e.restart()
	q2, err := e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, q2, 10, 3); len(got) != 3 {
		t.Fatalf("got %v", values(got))
	}
}

// A dead-letter channel that is the queue itself or another queue can never be
// appended to: refused at create and update.
func TestAttackDeadLetterChannelValidation(t *testing.T) {
	e := newEnv(t)
	e.log("gcp.t")
	e.queue("gcp.sub.other", Config{})
	if _, _, err := e.m.Create("gcp.sub.s", Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.missing", MaxDeliveryAttempts: 5}}, nil, false); err != nil {
		t.Fatal(err) // a missing channel may be created later
	}
	q := e.m.queues["gcp.sub.s"]
	for _, ch := range []string{"gcp.sub.s", "gcp.sub.other"} {
		if _, err := q.UpdateConfig(Config{DeadLetter: &DeadLetterPolicy{Channel: ch, MaxDeliveryAttempts: 5}}, []string{"dead_letter"}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("update dead letter to %q: %v", ch, err)
		}
	}
	if err := e.m.Delete("gcp.sub.s", false); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"gcp.sub.s", "gcp.sub.other", "_sys", ""} {
		_, _, err := e.m.Create("gcp.sub.s", Config{DeadLetter: &DeadLetterPolicy{Channel: ch, MaxDeliveryAttempts: 5}}, []Binding{{Source: "gcp.t"}}, false)
		t.Logf("dead letter %q: %v", ch, err)
		if err == nil {
			_ = e.m.Delete("gcp.sub.s", false)
			t.Errorf("dead letter to %q accepted", ch)
		}
	}
}

func TestAttackFullWindowExpires(t *testing.T) {
	e := newEnv(t)
	e.m.opts.MaxLoaded = 5
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	for i := 0; i < 20; i++ {
		publish(t, src, fmt.Sprint(i))
	}
	receive(t, q, 100, 5)
	ds, _ := q.Receive(context.Background(), 100, 0, 0, 0)
	if len(ds) != 0 {
		t.Fatalf("%d", len(ds))
	}
	e.clk.add(11 * time.Second)
	e.m.Sweep()
	ds = receive(t, q, 100, 5)
	mustAck(t, q, ackIDs(ds)...)
	receive(t, q, 100, 5)
}

func TestAttackBadInputs(t *testing.T) {
	e := newEnv(t)
	e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	ctx := context.Background()
	for _, c := range []struct {
		n    int
		b, l int64
		w    time.Duration
	}{{0, 0, 0, 0}, {MaxReceiveMessages + 1, 0, 0, 0}, {-1, 0, 0, 0}, {1, -1, 0, 0}, {1, 0, 9999, 0}, {1, 0, 600001, 0}, {1, 0, -5, 0}, {1, 0, 0, -1}} {
		if _, err := q.Receive(ctx, c.n, c.b, c.l, c.w); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	ids := []string{"", ".", "..", "1.2.3", "ffffffffffffffffffff.0.0", "-1.0.0", "0.-1.0", "0.+1.0", string(make([]byte, 10000)), "\xff\x00.1.1"}
	for _, verb := range []func() ([]AckResult, error){
		func() ([]AckResult, error) { return q.Ack(ids) },
		func() ([]AckResult, error) { return q.ModifyAckDeadline(ids, 10) },
	} {
		rs, err := verb()
		if err != nil || len(rs) != len(ids) {
			t.Fatalf("%v %v", rs, err)
		}
		for i, r := range rs {
			if r != AckInvalid {
				t.Errorf("ack id %q: %v", ids[i], r)
			}
		}
	}
	if _, err := q.ModifyAckDeadline(ids, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Error(err)
	}
	if _, err := q.UpdateConfig(Config{}, []string{"bogus"}); !errors.Is(err, ErrInvalidArgument) {
		t.Error(err)
	}
	for _, n := range []string{"", string(make([]byte, 300))} {
		if _, err := q.CreateSnapshot(n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("snapshot name of %d bytes: %v", len(n), err)
		}
	}
	if err := q.SeekTime(1<<62, false); err != nil {
		t.Error(err)
	}
	if err := q.SeekTime(0, true); err != nil {
		t.Error(err)
	}
	if err := q.SeekSnapshot("nope"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Error(err)
	}
	for i, c := range []struct {
		cfg Config
		b   []Binding
	}{
		{Config{}, []Binding{{Source: "gcp.sub.s"}}},
		{Config{}, []Binding{{Source: "gcp.t", Filter: string(make([]byte, 300))}}},
		{Config{}, []Binding{{Source: "gcp.t", StartSequence: -3}}},
		{Config{}, []Binding{{Source: "gcp.t", StartSequence: 1 << 62}}},
		{Config{}, []Binding{{Source: "gcp.t"}, {Source: "gcp.t"}}},
		{Config{Retry: &RetryPolicy{MinBackoffMs: -1}}, nil},
		{Config{Retry: &RetryPolicy{MinBackoffMs: 10, MaxBackoffMs: 5}}, nil},
		{Config{OrderingKeyHeader: "_tributary_source_seq"}, nil},
		{Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.t", MaxDeliveryAttempts: 0}}, nil},
		{Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.t", MaxDeliveryAttempts: 101}}, nil},
		{Config{MessageRetentionMs: -1}, nil},
	} {
		if _, _, err := e.m.Create("gcp.sub.x", c.cfg, c.b, false); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("create %d: %v", i, err)
		}
	}
	if _, _, err := e.m.Create("_x", Config{}, nil, false); !errors.Is(err, channel.ErrReserved) {
		t.Errorf("reserved name: %v", err)
	}
	if _, _, err := e.m.Create("gcp.sub.x", Config{}, []Binding{{Source: "gcp.none"}}, false); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing source: %v", err)
	}
}

// TestAttackQueueLogTailCut: the queue log's tail is cut at start (torn or corrupt
// last batch) after acks of its records were committed. The records appended next
// must not be taken as acked (lost); the cut records are copied again.
func TestAttackQueueLogTailCut(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a", "b")
	ds := receive(t, q, 10, 2) // copied: c goes in a queue batch of its own
	publish(t, src, "c")
	ds = append(ds, receive(t, q, 10, 1)...)
	mustAck(t, q, ackIDs(ds)...)
	e.close()
	seg := filepath.Join(e.dir, "store", "channels", "gcp.sub.s", "00000000000000000000.log")
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-5); err != nil { // the last batch (c) is torn
		t.Fatal(err)
	}
	e.open()
	src = e.mustGet("gcp.t")
	q, err = e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, src, "d", "e")
	got := receive(t, q, 10, 3)
	if fmt.Sprint(values(got)) != "[c d e]" {
		t.Fatalf("got %v", values(got))
	}
	mustAck(t, q, ackIDs(got)...)
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	publish(t, e.mustGet("gcp.t"), "f")
	if got := receive(t, q, 10, 1); string(got[0].Record.Value) != "f" {
		t.Fatalf("got %v", values(got))
	}
}

// A damaged state file is refused at open with ErrState naming it, never a panic
// (bbolt panics on broken pages, partly in goroutines of its own).
func TestAttackDamagedStateFile(t *testing.T) {
	for _, how := range []string{"truncate", "zero"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			e.log("gcp.t")
			for i := 0; i < 20; i++ {
				e.queue(fmt.Sprintf("gcp.sub.s%d", i), Config{}, Binding{Source: "gcp.t"})
			}
			e.close()
			path := filepath.Join(e.dir, "store", "queues.db")
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if how == "truncate" {
				err = f.Truncate(fi.Size() / 2)
			} else {
				_, err = f.WriteAt(make([]byte, fi.Size()-2*4096), 2*4096)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(filepath.Join(e.dir, "store"), store.Options{RetentionInterval: -1}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			m, err := Open(st, path, Options{MaintenanceInterval: -1}, zaptest.NewLogger(t))
			if !errors.Is(err, ErrState) {
				if m != nil {
					_ = m.Close()
				}
				t.Fatalf("open damaged state file: %v", err)
			}
			t.Log(err)
		})
	}
}

// Retention trims the queue log up to the ack floor while the binding's last
// checkpoint is older than the trimmed records; a crash then must not copy them again
// (the cursor recovery scans the queue log from the checkpoint on and would find
// none of them).
func TestAttackTrimBeforeCheckpointThenCrash(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "first")
	mustAck(t, q, ackIDs(receive(t, q, 1, 1))...) // first copy: checkpointed at once
	big := make([]string, 20)
	for i := range big {
		big[i] = fmt.Sprintf("%02d%s", i, make([]byte, 900<<10))
	}
	for _, v := range big {
		publishWith(t, src, v) // copied within the checkpoint interval: not checkpointed
	}
	ds := receive(t, q, 100, 20)
	mustAck(t, q, ackIDs(ds)...)
	// Every record acked, >= 16 MiB: the log start moves to its end, once the
	// binding's checkpoint covering the copies is committed (within about a second).
	crashedEarly := &env{t: t, dir: t.TempDir(), clk: e.clk}
	e.m.Maintain()
	copyDir(t, e.dir, crashedEarly.dir) // a crash right after this first trim attempt
	for deadline := time.Now().Add(10 * time.Second); q.log.LogStart() != q.log.HighWatermark(); {
		if time.Now().After(deadline) {
			t.Fatalf("log start %d hw %d", q.log.LogStart(), q.log.HighWatermark())
		}
		time.Sleep(50 * time.Millisecond)
		e.m.Maintain()
	}
	crashedEarly.open()
	q1, err := crashedEarly.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, q1, 100, 0); len(got) != 0 {
		t.Fatalf("after early crash: %d records copied again", len(got))
	}
	crashedEarly.close()
	crashed := &env{t: t, dir: t.TempDir(), clk: e.clk}
	copyDir(t, e.dir, crashed.dir)
	crashed.open()
	defer crashed.close()
	q2, err := crashed.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, q2, 100, 0); len(got) != 0 {
		t.Fatalf("after crash: %d records copied again", len(got))
	}
}

// The source log's tail is cut at start (torn or corrupt last batch, e.g. a power
// loss with --fsync=interval) below the binding's committed cursor: the records
// appended next take the cut sequences and must reach the queue, not be skipped.
func TestAttackSourceLogTailCut(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a", "b")
	publish(t, src, "c")
	mustAck(t, q, ackIDs(receive(t, q, 10, 3))...)
	e.close()
	seg := filepath.Join(e.dir, "store", "channels", "gcp.t", "00000000000000000000.log")
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-5); err != nil { // c is torn
		t.Fatal(err)
	}
	e.open()
	q, err = e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.mustGet("gcp.t"), "d", "e")
	got := receive(t, q, 10, 2)
	if fmt.Sprint(values(got)) != "[d e]" {
		t.Fatalf("got %v", values(got))
	}
	mustAck(t, q, ackIDs(got)...)
	e.restart() // the lowered cursor is what was stored
	q, _ = e.m.Get("gcp.sub.s")
	publish(t, e.mustGet("gcp.t"), "f")
	if got := receive(t, q, 10, 1); string(got[0].Record.Value) != "f" {
		t.Fatalf("got %v", values(got))
	}
}
