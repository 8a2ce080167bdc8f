package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

func TestPurge(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{ExactlyOnce: true}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c")
	d := receive(t, q, 1, 1)[0]
	if err := q.Purge(); err != nil {
		t.Fatal(err)
	}
	receive(t, q, 10, 0)
	if rs := mustAck(t, q, d.AckID); rs[0] != AckExpired {
		t.Fatalf("ack after purge %v", rs)
	}
	if in := q.Info(); in.Backlog != 0 || in.Leased != 0 {
		t.Fatalf("info %+v", in)
	}
	publish(t, src, "d")
	if got := values(receive(t, q, 10, 1)); fmt.Sprint(got) != "[d]" {
		t.Fatalf("after purge %v", got)
	}
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if got := values(receive(t, q, 10, 1)); fmt.Sprint(got) != "[d]" {
		t.Fatalf("after restart %v", got)
	}
}

// TestSeekTimeKeepsAcked: without retain_acked, a seek to a time leaves the acked
// messages after it acked (Pub/Sub Seek restores only retained messages) unless the
// caller asks for a replay (the topic retains them); messages before the time become
// acked either way, and unacked ones after it are delivered again.
func TestSeekTimeKeepsAcked(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	retained := e.queue("gcp.sub.r", Config{RetainAcked: true}, Binding{Source: "gcp.t"})
	for i := 0; i < 6; i++ {
		if _, _, err := src.Append([]store.NewRecord{{Timestamp: int64(1000 * (i + 1)), Value: []byte(strconv.Itoa(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	ds := receive(t, q, 10, 6)
	mustAck(t, q, ds[0].AckID, ds[1].AckID, ds[3].AckID) // unacked (leased): 2, 4, 5
	mustAck(t, retained, ackIDs(receive(t, retained, 10, 6))...)

	// The emulator's case: everything acked, seek back, nothing comes back.
	if err := retained.SeekTime(0, false); err != nil {
		t.Fatal(err)
	}
	if got := values(receive(t, retained, 10, 6)); fmt.Sprint(got) != "[0 1 2 3 4 5]" {
		t.Fatalf("retain_acked queue after a seek back %v", got)
	}

	// Back in time: 2, 4 and 5 lose their leases and come again as new; 3 stays acked.
	if err := q.SeekTime(2000, false); err != nil {
		t.Fatal(err)
	}
	got := receive(t, q, 10, 3)
	if fmt.Sprint(values(got)) != "[2 4 5]" {
		t.Fatalf("after a seek back %v, want [2 4 5]", values(got))
	}
	for _, d := range got {
		if d.Attempt != 1 {
			t.Fatalf("after a seek back %s has attempt %d, want 1", d.Record.Value, d.Attempt)
		}
	}
	// Forward: the unacked 2 and 4 (published before 5500 ms) become acked, 5 stays
	// unacked.
	if err := q.SeekTime(5500, false); err != nil {
		t.Fatal(err)
	}
	d := receive(t, q, 10, 1)[0]
	if string(d.Record.Value) != "5" {
		t.Fatalf("after a seek forward %s, want 5", d.Record.Value)
	}
	mustAck(t, q, d.AckID)
	// The state is durable.
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if err := q.SeekTime(0, false); err != nil {
		t.Fatal(err)
	}
	receive(t, q, 10, 0)
	if in := q.Info(); in.Backlog != 0 {
		t.Fatalf("backlog %d with everything acked", in.Backlog)
	}
	// A replay (the topic retains acked messages) unacks everything after the time.
	if err := q.SeekTime(3000, true); err != nil {
		t.Fatal(err)
	}
	if got := values(receive(t, q, 10, 4)); fmt.Sprint(got) != "[2 3 4 5]" {
		t.Fatalf("after a replay %v, want [2 3 4 5]", got)
	}
}

// TestSeekTimeKeepsAckedAhead: acks above a window that has not loaded them since a
// restart (acked ahead) stay acked through a seek back too.
func TestSeekTimeKeepsAckedAhead(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "0", "1", "2", "3", "4", "5")
	ds := receive(t, q, 10, 6)
	mustAck(t, q, ds[0].AckID, ds[1].AckID, ds[3].AckID, ds[4].AckID) // unacked: 2, 5
	e.opts.MaxLoaded = 1
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if err := q.SeekTime(0, false); err != nil {
		t.Fatal(err)
	}
	if in := q.Info(); in.Backlog != 2 {
		t.Fatalf("backlog %d after a seek back, want 2", in.Backlog)
	}
	var got []string
	for i := 0; i < 2; i++ {
		d := receive(t, q, 10, 1)[0]
		mustAck(t, q, d.AckID)
		got = append(got, string(d.Record.Value))
	}
	receive(t, q, 10, 0)
	if fmt.Sprint(got) != "[2 5]" {
		t.Fatalf("after a restart and a seek back %v, want [2 5]", got)
	}
}

func TestSeekTimeAndSnapshot(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{RetainAcked: true}, Binding{Source: "gcp.t"})
	for i := 0; i < 6; i++ {
		if _, _, err := src.Append([]store.NewRecord{{Timestamp: int64(1000 * (i + 1)), Value: []byte(strconv.Itoa(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	ds := receive(t, q, 10, 6)
	mustAck(t, q, ds[0].AckID, ds[1].AckID, ds[3].AckID) // unacked: 2, 4, 5
	if _, err := q.CreateSnapshot("snap"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.CreateSnapshot("snap"); !errors.Is(err, ErrSnapshotExists) {
		t.Fatalf("dup snapshot: %v", err)
	}
	if _, err := q.CreateSnapshot(""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty name: %v", err)
	}
	mustAck(t, q, ackIDs(ds)...)
	receive(t, q, 10, 0)

	// Back in time: published at or after 3000 ms (values 2..5) are unacked again.
	if err := q.SeekTime(3000, false); err != nil { // retain_acked replays them
		t.Fatal(err)
	}
	if got := values(receive(t, q, 10, 4)); fmt.Sprint(got) != "[2 3 4 5]" {
		t.Fatalf("seek time %v", got)
	}
	// Forward past everything: all acked.
	if err := q.SeekTime(1<<50, false); err != nil {
		t.Fatal(err)
	}
	receive(t, q, 10, 0)
	if q.Info().Backlog != 0 {
		t.Fatal("backlog after seek to the future")
	}
	// To the snapshot: 2, 4, 5 and what came after it.
	if _, _, err := src.Append([]store.NewRecord{{Timestamp: 7000, Value: []byte("6")}}); err != nil {
		t.Fatal(err)
	}
	receive(t, q, 10, 1)
	if err := q.SeekSnapshot("snap"); err != nil {
		t.Fatal(err)
	}
	if got := values(receive(t, q, 10, 4)); fmt.Sprint(got) != "[2 4 5 6]" {
		t.Fatalf("seek snapshot %v", got)
	}
	// Survives a restart (the state, not the leases).
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if got := values(receive(t, q, 10, 4)); fmt.Sprint(got) != "[2 4 5 6]" {
		t.Fatalf("after restart %v", got)
	}
	if err := q.SeekSnapshot("nope"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("missing snapshot: %v", err)
	}
	// Another queue of the same source seeks by source sequences: its messages for
	// source records 3, 5, 6 and 7 (unacked in the snapshot, or after it) are unacked.
	other := e.queue("gcp.sub.other", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	receive(t, other, 10, 7)
	if err := other.SeekSnapshot("snap"); err != nil {
		t.Fatalf("other queue's snapshot: %v", err)
	}
	if got := values(receive(t, other, 10, 4)); fmt.Sprint(got) != "[2 4 5 6]" {
		t.Fatalf("other queue after seek %v", got)
	}
	e.log("gcp.u")
	unrelated := e.queue("gcp.sub.u", Config{}, Binding{Source: "gcp.u"})
	if err := unrelated.SeekSnapshot("snap"); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("unrelated queue's snapshot: %v", err)
	}
	if err := e.m.DeleteSnapshot("snap"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.DeleteSnapshot("snap"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	// A snapshot outlives its queue and still restores the source's other queues
	// (Pub/Sub: a snapshot of a deleted subscription); one describing no source goes
	// with its queue.
	if _, err := other.CreateSnapshot("o"); err != nil {
		t.Fatal(err)
	}
	unbound := e.queue("gcp.sub.unbound", Config{})
	if _, err := unbound.CreateSnapshot("u"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete("gcp.sub.other", false); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete("gcp.sub.unbound", false); err != nil {
		t.Fatal(err)
	}
	if err := e.m.DeleteSnapshot("u"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("snapshot of a deleted queue without bindings: %v", err)
	}
	if err := q.Purge(); err != nil {
		t.Fatal(err)
	}
	if err := q.SeekSnapshot("o"); err != nil {
		t.Fatalf("seek to the snapshot of a deleted queue: %v", err)
	}
	if got := values(receive(t, q, 10, 4)); fmt.Sprint(got) != "[2 4 5 6]" {
		t.Fatalf("after seeking to the deleted queue's snapshot %v", got)
	}
	// A source deleted and created again under its name is another source.
	if err := e.m.Delete("gcp.sub.s", false); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Delete("gcp.t", false); err != nil {
		t.Fatal(err)
	}
	e.clk.add(time.Second) // the new log's creation time differs
	e.log("gcp.t")
	fresh := e.queue("gcp.sub.fresh", Config{}, Binding{Source: "gcp.t"})
	if err := fresh.SeekSnapshot("o"); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("seek to a snapshot of the deleted source: %v", err)
	}
}

func TestDetach(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a")
	d := receive(t, q, 1, 1)[0]
	if err := e.m.Detach("gcp.sub.s"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Detach("gcp.sub.s"); err != nil {
		t.Fatalf("detach twice: %v", err)
	}
	if _, err := q.Receive(context.Background(), 1, 0, 0, 0); !errors.Is(err, ErrDetached) {
		t.Fatalf("receive: %v", err)
	}
	if _, err := q.Ack([]string{d.AckID}); !errors.Is(err, ErrDetached) {
		t.Fatalf("ack: %v", err)
	}
	in := q.Info()
	if !in.Detached || len(in.Bindings) != 0 || in.Backlog != 0 {
		t.Fatalf("info %+v", in)
	}
	publish(t, src, "b")
	e.restart()
	q, err := e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	if in := q.Info(); !in.Detached || q.log.HighWatermark() != 1 {
		t.Fatalf("after restart %+v hw %d", in, q.log.HighWatermark())
	}
}

func TestUpdateConfig(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	for _, k := range []string{"x", "x"} {
		publishWith(t, src, k, "ok", k)
	}
	in, err := q.UpdateConfig(Config{OrderingKeyHeader: "ok", AckDeadlineMs: 20000}, []string{"ordering_key_header", "ack_deadline_ms"})
	if err != nil || in.Config.OrderingKeyHeader != "ok" || in.Config.AckDeadlineMs != 20000 {
		t.Fatalf("update %+v %v", in, err)
	}
	d := receive(t, q, 10, 1)[0] // ordered now: one of the two x's
	e.clk.add(15 * time.Second)
	e.m.Sweep()
	receive(t, q, 10, 0) // the 20 s default lease holds
	mustAck(t, q, d.AckID)
	if _, err := q.UpdateConfig(Config{}, []string{"nope"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad mask: %v", err)
	}
	if _, err := q.UpdateConfig(Config{AckDeadlineMs: 1}, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad value: %v", err)
	}
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if c := q.Info().Config; c.OrderingKeyHeader != "ok" || c.AckDeadlineMs != 20000 {
		t.Fatalf("after restart %+v", c)
	}
}

func TestRetention(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{MessageRetentionMs: 60_000}, Binding{Source: "gcp.t"})
	now := e.clk.ms.Load()
	if _, _, err := src.Append([]store.NewRecord{{Timestamp: now - 120_000, Value: []byte("old")}, {Timestamp: now, Value: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	receive(t, q, 10, 2) // loads both
	e.clk.add(11 * time.Second)
	e.m.Sweep()
	e.m.Maintain()
	if got := values(receive(t, q, 10, 1)); fmt.Sprint(got) != "[new]" {
		t.Fatalf("after retention %v", got)
	}
}
