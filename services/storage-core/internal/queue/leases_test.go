package queue

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestLeasesFollowEveryChange: GetLeases reports the current lease of each ack id and
// follows acks, nacks, modacks and expiry, swept or not.
func TestLeasesFollowEveryChange(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c", "d")
	ds := receive(t, q, 4, 4)
	ids := []string{ds[0].AckID, ds[1].AckID, ds[2].AckID, ds[3].AckID, "zz"}
	start := e.clk.now().UnixMilli()
	got, err := q.Leases(ids)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{start + DefaultAckDeadlineMs, start + DefaultAckDeadlineMs, start + DefaultAckDeadlineMs, start + DefaultAckDeadlineMs, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("leases %v, want %v", got, want)
	}
	mustAck(t, q, ds[0].AckID)
	if rs, err := q.ModifyAckDeadline([]string{ds[1].AckID}, 0); err != nil || rs[0] != AckOK {
		t.Fatalf("nack %v %v", rs, err)
	}
	if rs, err := q.ModifyAckDeadline([]string{ds[2].AckID}, 60_000); err != nil || rs[0] != AckOK {
		t.Fatalf("modack %v %v", rs, err)
	}
	got, _ = q.Leases(ids)
	want = []int64{0, 0, start + 60_000, start + DefaultAckDeadlineMs, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("after ack, nack, modack: %v, want %v", got, want)
	}
	// Past d's deadline, with no sweep: over everywhere it is read.
	e.clk.add(DefaultAckDeadlineMs * time.Millisecond)
	got, _ = q.Leases(ids)
	want = []int64{0, 0, start + 60_000, 0, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("after d's deadline: %v, want %v", got, want)
	}
	if n := q.Info().Leased; n != 1 {
		t.Fatalf("GetQueue counts %d leases, want 1 (c's)", n)
	}
	again := receive(t, q, 4, 2) // b (nacked) and d (expired), never swept
	if v := values(again); !slices.Equal(v, []string{"b", "d"}) {
		t.Fatalf("redelivered %v", v)
	}
	if _, err := q.Leases(make([]string, MaxLeaseQuery+1)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("oversized GetLeases: %v", err)
	}
}

// TestSweepNamesChangedQueues: Sweep reports exactly the queues where a lease ended or
// a backoff passed.
func TestSweepNamesChangedQueues(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	qa := e.queue("gcp.sub.a", Config{}, Binding{Source: "gcp.t"})
	qb := e.queue("gcp.sub.b", Config{Retry: &RetryPolicy{MinBackoffMs: 20_000, MaxBackoffMs: 20_000}}, Binding{Source: "gcp.t"})
	e.queue("gcp.sub.idle", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "x")
	receive(t, qa, 1, 1)
	db := receive(t, qb, 1, 1)[0]
	if got := e.m.Sweep(); len(got) != 0 {
		t.Fatalf("sweep before any deadline changed %v", got)
	}
	if rs, err := qb.ModifyAckDeadline([]string{db.AckID}, 0); err != nil || rs[0] != AckOK {
		t.Fatalf("nack %v %v", rs, err)
	}
	e.clk.add(DefaultAckDeadlineMs * time.Millisecond)
	if got := e.m.Sweep(); !slices.Equal(got, []string{"gcp.sub.a"}) {
		t.Fatalf("sweep at a's deadline changed %v, want [gcp.sub.a]", got)
	}
	if got := e.m.Sweep(); len(got) != 0 {
		t.Fatalf("second sweep changed %v", got)
	}
	e.clk.add(10 * time.Second)
	if got := e.m.Sweep(); !slices.Equal(got, []string{"gcp.sub.b"}) {
		t.Fatalf("sweep at b's backoff end changed %v, want [gcp.sub.b]", got)
	}
}

// TestReceiveSkipsOnlyLiveLeases: a Receive skips the leases at the window's front
// (busyTo) only while none of them can have ended: one whose deadline a modack moved
// earlier, one nacked, ones expired unswept, and acked ones between them are
// redelivered or passed over exactly as a scan from the front would.
func TestReceiveSkipsOnlyLiveLeases(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	modack := func(id string, ms int64) {
		t.Helper()
		if rs, err := q.ModifyAckDeadline([]string{id}, ms); err != nil || rs[0] != AckOK {
			t.Fatalf("modack %d: %v %v", ms, rs, err)
		}
	}
	publish(t, src, "a", "b", "c", "d", "e", "f")
	ds := receive(t, q, 4, 4) // a..d: the busy front
	for _, d := range ds {
		modack(d.AckID, 60_000)
	}
	e.clk.add(11 * time.Second)
	de := receive(t, q, 1, 1) // the front is scanned again: its leases end at +21 s (e's) or later
	if de[0].Record.Value[0] != 'e' {
		t.Fatalf("got %v, want [e]", values(de))
	}
	modack(de[0].AckID, 600_000)
	// b's deadline moved earlier than any other of the front's: once it passes, b is
	// redelivered before f, unswept.
	modack(ds[1].AckID, 5_000)
	mustAck(t, q, ds[0].AckID)
	e.clk.add(6 * time.Second)
	if got := values(receive(t, q, 2, 2)); !slices.Equal(got, []string{"b", "f"}) {
		t.Fatalf("after b's shortened lease ended: %v, want [b f]", got)
	}
	// A nack in the front (c) makes c available at once.
	modack(ds[2].AckID, 0)
	if got := values(receive(t, q, 3, 1)); got[0] != "c" {
		t.Fatalf("after a nack: %v, want [c]", got)
	}
	// d's 60 s lease ends, unswept, and so do those of b, c and f (10 s): all
	// redelivered in order; e (600 s) is not.
	e.clk.add(50 * time.Second)
	if got := values(receive(t, q, 5, 4)); !slices.Equal(got, []string{"b", "c", "d", "f"}) {
		t.Fatalf("after the leases ended: %v, want [b c d f]", got)
	}
}

// TestFind: find agrees with a linear search over windows with and without gaps
// (acked messages compacted away, offsets skipped at load).
func TestFind(t *testing.T) {
	for _, offs := range [][]int64{nil, {5}, {0, 1, 2, 3}, {3, 4, 7, 8, 9, 20}, {1, 3, 5, 7, 9, 11}, {10, 11, 12, 40}} {
		q := &Queue{}
		for _, o := range offs {
			q.pending = append(q.pending, &msg{off: o})
		}
		for off := int64(-1); off < 45; off++ {
			var want *msg
			for _, m := range q.pending {
				if m.off == off {
					want = m
				}
			}
			if got := q.find(off); got != want {
				t.Fatalf("window %v: find(%d) = %v, want %v", offs, off, got, want)
			}
		}
	}
}
