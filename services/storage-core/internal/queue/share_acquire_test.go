package queue

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
)

// commitsAfter returns how many state commits ran since before, counting the
// queued ones: it commits an op of its own and leaves it out.
func commitsAfter(t *testing.T, e *env, before float64) float64 {
	t.Helper()
	if err := e.m.db.update(func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return testutil.ToFloat64(e.m.opts.Metrics.StateCommits) - before - 1
}

// TestShareFetchWritesNothing: as Kafka's SharePartition.acquire, an acquisition
// changes memory only: a share fetch queues no state commit (so waits for no
// fdatasync), first deliveries and redeliveries alike; the acknowledgement that
// follows is one commit, answered once durable.
func TestShareFetchWritesNothing(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "0", "1", "2", "3")
	q := earliestSharePartition(t, e)
	before := testutil.ToFloat64(e.m.opts.Metrics.StateCommits)
	if rs := shareFetch(t, e, "m", 4, q); rs[3].DeliveryCount != 1 {
		t.Fatalf("first delivery count %d", rs[3].DeliveryCount)
	}
	if n := commitsAfter(t, e, before); n != 0 {
		t.Fatalf("%v state commits for a share fetch, want 0", n)
	}
	before = testutil.ToFloat64(e.m.opts.Metrics.StateCommits)
	if err := q.ShareAck("m", []ShareAckBatch{{First: 0, Last: 3, Types: []uint8{ShareAccept, ShareRelease, ShareRelease, ShareRelease}}}, 0); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(e.m.opts.Metrics.StateCommits) - before; n != 1 {
		t.Fatalf("%v state commits done when ShareAck returned, want 1", n)
	}
	before = testutil.ToFloat64(e.m.opts.Metrics.StateCommits)
	if rs := shareFetch(t, e, "m", 3, q); rs[0].Record.Offset != 1 || rs[0].DeliveryCount != 2 {
		t.Fatalf("redelivered offset %d count %d, want 1 and 2", rs[0].Record.Offset, rs[0].DeliveryCount)
	}
	if n := commitsAfter(t, e, before); n != 0 {
		t.Fatalf("%v state commits for a share fetch of released records, want 0", n)
	}
}

// TestShareCrashAfterAcquisitions: after a crash (the directory as fsynced, no
// close) the records acquired and not acknowledged are available again with the
// delivery count last written, by the partition's last state write (here a
// RELEASE), not the acquisitions' since; never-written first deliveries come back as
// first deliveries, and accepted records never come back. A clean close writes the
// counts.
func TestShareCrashAfterAcquisitions(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "0", "1", "2", "3")
	q := earliestSharePartition(t, e)
	shareFetch(t, e, "m1", 4, q)
	// Written: 0 accepted, 1 released at count 1, 2 and 3 acquired at count 1.
	if err := q.ShareAck("m1", []ShareAckBatch{{First: 0, Last: 1, Types: []uint8{ShareAccept, ShareRelease}}}, 0); err != nil {
		t.Fatal(err)
	}
	// In memory only: 1 acquired again (count 2), 4 and 5 acquired (count 1).
	publish(t, src, "4", "5")
	rs := shareFetch(t, e, "m1", 3, q)
	if got := shareOffsets(rs); !slices.Equal(got, []int64{1, 4, 5}) || rs[0].DeliveryCount != 2 {
		t.Fatalf("acquired %v, offset 1 count %d", got, rs[0].DeliveryCount)
	}

	crashed, q2 := crashCopyShare(t, e)
	if so, lag, err := q2.ShareState(); err != nil || so != 1 || lag != 5 {
		t.Fatalf("after the crash: start offset %d lag %d %v, want 1 and 5", so, lag, err)
	}
	again := shareFetch(t, crashed, "m2", 5, q2)
	if got := shareOffsets(again); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("after the crash acquired %v, want 1..5", got)
	}
	for _, r := range again {
		want := int32(2) // written at 1, and this delivery
		if r.Record.Offset >= 4 {
			want = 1 // never written: a first delivery
		}
		if r.DeliveryCount != want {
			t.Fatalf("after the crash offset %d count %d, want %d", r.Record.Offset, r.DeliveryCount, want)
		}
	}
	recs, _, err := crashed.m.ShareFetch(context.Background(), []*Queue{q2}, ShareFetchArgs{Member: "m2", MaxRecords: 10, LockMs: 30_000, Wait: 10 * time.Millisecond})
	if err != nil || len(recs[0]) != 0 {
		t.Fatalf("more after the crash (the accepted offset 0?): %v %v", recs, err)
	}

	// The uncrashed partition closes cleanly: its counts are written.
	e.restart()
	q, err = e.m.SharePartition("g", "t", 0, false, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs = shareFetch(t, e, "m3", 5, q)
	for _, r := range rs {
		want := int32(2)
		if r.Record.Offset == 1 {
			want = 3
		}
		if r.DeliveryCount != want {
			t.Fatalf("after a clean restart offset %d count %d, want %d", r.Record.Offset, r.DeliveryCount, want)
		}
	}
}

// TestShareLockExpiryWritesCounts: a lock's expiry is a state write, as in Kafka
// (the acquisition lock timeout): it carries the delivery counts, so after a crash
// the expired record, and the one still acquired with it, come back as
// redeliveries.
func TestShareLockExpiryWritesCounts(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "0", "1")
	q := earliestSharePartition(t, e)
	if _, _, err := e.m.ShareFetch(context.Background(), []*Queue{q}, ShareFetchArgs{Member: "m1", MaxRecords: 1, LockMs: 1000}); err != nil {
		t.Fatal(err)
	}
	shareFetch(t, e, "m1", 1, q) // offset 1, locked 30 s
	e.clk.add(2 * time.Second)
	if got := e.m.Sweep(); len(got) != 1 {
		t.Fatalf("sweep changed %v, want the share partition", got)
	}
	// The sweep's write is queued, not waited for: this commit follows it.
	if err := e.m.db.update(func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}

	crashed, q2 := crashCopyShare(t, e)
	for _, r := range shareFetch(t, crashed, "m2", 2, q2) {
		if r.DeliveryCount != 2 {
			t.Fatalf("after the crash offset %d count %d, want 2", r.Record.Offset, r.DeliveryCount)
		}
	}
}
