package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// shareFetch acquires from qs for member until want records came (5 s at most).
func shareFetch(t *testing.T, e *env, member string, want int, qs ...*Queue) []ShareRecord {
	t.Helper()
	var out []ShareRecord
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < want && time.Now().Before(deadline) {
		recs, errs, err := e.m.ShareFetch(context.Background(), qs, ShareFetchArgs{Member: member, MaxRecords: want - len(out), LockMs: 30_000, Wait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for i := range qs {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			out = append(out, recs[i]...)
		}
	}
	if len(out) != want {
		t.Fatalf("acquired %d records, want %d", len(out), want)
	}
	return out
}

func shareValues(rs []ShareRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Record.Value)
	}
	return out
}

func ack(off int64, t uint8) ShareAckBatch {
	return ShareAckBatch{First: off, Last: off, Types: []uint8{t}}
}

// TestShareAcknowledgeTypes: ACCEPT and REJECT are final, RELEASE redelivers at once
// with the delivery count 2, an expired lock redelivers, and the delivery limit
// archives; offsets are the source's and the start offset follows.
func TestShareAcknowledgeTypes(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "old")
	q, err := e.m.SharePartition("g", "t", 0, true, ShareReset{Earliest: true}, 2)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, src, "a", "b", "c", "d")
	rs := shareFetch(t, e, "m1", 5, q)
	if v := shareValues(rs); !slices.Equal(v, []string{"old", "a", "b", "c", "d"}) {
		t.Fatalf("acquired %v", v)
	}
	for i, r := range rs {
		if r.Record.Offset != int64(i) || r.DeliveryCount != 1 {
			t.Fatalf("record %d: offset %d count %d", i, r.Record.Offset, r.DeliveryCount)
		}
	}
	// Another member may not acknowledge m1's records; nothing applies.
	if err := q.ShareAck("m2", []ShareAckBatch{ack(0, ShareAccept)}, 0); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("ack by another member: %v", err)
	}
	// 0 accepted, 1 released, 2 rejected, 3..4 kept; one batch with per-offset types.
	if err := q.ShareAck("m1", []ShareAckBatch{{First: 0, Last: 2, Types: []uint8{ShareAccept, ShareRelease, ShareReject}}}, 0); err != nil {
		t.Fatal(err)
	}
	if so, lag, err := q.ShareState(); err != nil || so != 1 || lag != 3 {
		t.Fatalf("start offset %d lag %d %v, want 1 and 3", so, lag, err)
	}
	again := shareFetch(t, e, "m2", 1, q)
	if again[0].Record.Offset != 1 || again[0].DeliveryCount != 2 {
		t.Fatalf("released record back as offset %d count %d", again[0].Record.Offset, again[0].DeliveryCount)
	}
	// Accepting twice, or a rejected offset: not acquired.
	for _, b := range []ShareAckBatch{ack(0, ShareAccept), ack(2, ShareAccept), ack(9, ShareAccept)} {
		if err := q.ShareAck("m1", []ShareAckBatch{b}, 0); !errors.Is(err, ErrInvalidRecordState) {
			t.Fatalf("ack of %d: %v", b.First, err)
		}
	}
	// m2 releases offset 1 at the delivery limit (2): archived, never back.
	if err := q.ShareAck("m2", []ShareAckBatch{ack(1, ShareRelease)}, 0); err != nil {
		t.Fatal(err)
	}
	// m1's lock on 3 and 4 expires: both come back, count 2; RENEW keeps them.
	e.clk.add(30 * time.Second)
	if err := q.ShareAck("m1", []ShareAckBatch{ack(3, ShareAccept)}, 0); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("ack after the lock expired: %v", err)
	}
	rs = shareFetch(t, e, "m3", 2, q)
	if rs[0].Record.Offset != 3 || rs[1].Record.Offset != 4 || rs[0].DeliveryCount != 2 {
		t.Fatalf("after expiry: %+v", rs)
	}
	if err := q.ShareAck("m3", []ShareAckBatch{{First: 3, Last: 4, Types: []uint8{ShareRenew}}}, 60_000); err != nil {
		t.Fatal(err)
	}
	e.clk.add(45 * time.Second)
	if err := q.ShareAck("m3", []ShareAckBatch{{First: 3, Last: 4, Types: []uint8{ShareAccept}}}, 0); err != nil {
		t.Fatalf("accept within the renewed lock: %v", err)
	}
	if so, lag, err := q.ShareState(); err != nil || so != 5 || lag != 0 {
		t.Fatalf("start offset %d lag %d %v, want 5 and 0", so, lag, err)
	}
	recs, _, err := e.m.ShareFetch(context.Background(), []*Queue{q}, ShareFetchArgs{Member: "m1", MaxRecords: 10, LockMs: 30_000})
	if err != nil || len(recs[0]) != 0 {
		t.Fatalf("something redelivered: %v %v", recs, err)
	}
	// The state survives a restart.
	e.restart()
	q, err = e.m.SharePartition("g", "t", 0, false, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if so, _, err := q.ShareState(); err != nil || so != 5 {
		t.Fatalf("start offset after restart %d %v", so, err)
	}
}

// TestShareReleaseMemberAndAdmin: a member's acquisitions are released at once, the
// start offset is altered and deleted, reset latest starts at the high watermark,
// and acks are checked.
func TestShareReleaseMemberAndAdmin(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t~1")
	publish(t, src, "a", "b", "c")
	if _, err := e.m.SharePartition("g", "t", 1, false, ShareReset{}, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("uninitialized partition: %v", err)
	}
	if _, err := e.m.SharePartition("g", "nope", 0, true, ShareReset{}, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("partition without log: %v", err)
	}
	q, err := e.m.SharePartition("g", "t", 1, true, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, src, "d", "e")
	rs := shareFetch(t, e, "m1", 2, q)
	if v := shareValues(rs); !slices.Equal(v, []string{"d", "e"}) {
		t.Fatalf("latest: %v", v)
	}
	if n, err := q.ShareRelease("m1"); err != nil || n != 2 {
		t.Fatalf("released %d %v", n, err)
	}
	rs = shareFetch(t, e, "m2", 2, q)
	if rs[0].DeliveryCount != 2 {
		t.Fatalf("count after release %d", rs[0].DeliveryCount)
	}
	if got := e.m.ShareList("g"); !slices.Equal(got, []SharePartitionID{{"t", 1}}) {
		t.Fatalf("list %v", got)
	}
	if off, err := e.m.ShareAlter("g", "t", 1, 1); err != nil || off != 1 {
		t.Fatalf("alter %d %v", off, err)
	}
	q, _ = e.m.SharePartition("g", "t", 1, false, ShareReset{}, 0)
	rs = shareFetch(t, e, "m1", 4, q)
	if v := shareValues(rs); !slices.Equal(v, []string{"b", "c", "d", "e"}) || rs[0].DeliveryCount != 1 {
		t.Fatalf("after alter: %v", v)
	}
	if off, err := e.m.ShareAlter("g", "t", 1, 99); err != nil || off != 5 {
		t.Fatalf("alter past the end %d %v", off, err)
	}
	if err := e.m.ShareDelete("g", "t", 1); err != nil {
		t.Fatal(err)
	}
	if err := e.m.ShareDelete("g", "t", 1); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if got := e.m.ShareList("g"); len(got) != 0 {
		t.Fatalf("list after delete %v", got)
	}
	for _, bs := range [][]ShareAckBatch{
		{{First: 3, Last: 2, Types: []uint8{1}}},
		{ack(2, ShareAccept), ack(2, ShareAccept)},
		{{First: 0, Last: 2, Types: []uint8{1, 1}}},
		{ack(0, 9)},
	} {
		if err := CheckShareAcks(bs, true); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("CheckShareAcks(%v): %v", bs, err)
		}
	}
	if err := CheckShareAcks([]ShareAckBatch{ack(0, ShareRenew)}, false); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("renew not allowed: %v", err)
	}
}

// TestShareFetchWaitsOnAnyPartition: a fetch over two partitions waiting for records
// wakes when one of them gets a record.
func TestShareFetchWaitsOnAnyPartition(t *testing.T) {
	e := newEnv(t)
	e.log("kafka.t")
	b := e.log("kafka.t~1")
	qa, err := e.m.SharePartition("g", "t", 0, true, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := e.m.SharePartition("g", "t", 1, true, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan [][]ShareRecord)
	go func() {
		recs, _, err := e.m.ShareFetch(context.Background(), []*Queue{qa, qb}, ShareFetchArgs{Member: "m", MaxRecords: 10, LockMs: 30_000, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- recs
	}()
	publish(t, b, "x")
	recs := <-done
	if len(recs[0]) != 0 || len(recs[1]) != 1 || string(recs[1][0].Record.Value) != "x" {
		t.Fatalf("got %v", recs)
	}
}

// TestShareLongGroupIDs: share groups with ids longer than a hex-named queue can hold
// (Kafka accepts any non-empty id) keep state of their own, each acquiring every
// record, listed, surviving a restart, deleted alone.
func TestShareLongGroupIDs(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "a", "b")
	g1, g2 := strings.Repeat("g", 254)+"1", strings.Repeat("g", 254)+"2"
	for _, g := range []string{g1, g2} {
		q, err := e.m.SharePartition(g, "t", 0, true, ShareReset{Earliest: true}, 0)
		if err != nil {
			t.Fatalf("%d-byte group id: %v", len(g), err)
		}
		if v := shareValues(shareFetch(t, e, "m", 2, q)); !slices.Equal(v, []string{"a", "b"}) {
			t.Fatalf("group %s…%s acquired %v", g[:3], g[len(g)-1:], v)
		}
		if err := q.ShareAck("m", []ShareAckBatch{{First: 0, Last: 1, Types: []uint8{ShareAccept, ShareAccept}}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.restart()
	for _, g := range []string{g1, g2} {
		if got := e.m.ShareList(g); !slices.Equal(got, []SharePartitionID{{"t", 0}}) {
			t.Fatalf("list after restart %v", got)
		}
		q, err := e.m.SharePartition(g, "t", 0, false, ShareReset{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if so, _, err := q.ShareState(); err != nil || so != 2 {
			t.Fatalf("start offset after restart %d %v, want 2", so, err)
		}
	}
	if err := e.m.ShareDelete(g1, "t", 0); err != nil {
		t.Fatal(err)
	}
	if got1, got2 := e.m.ShareList(g1), e.m.ShareList(g2); len(got1) != 0 || len(got2) != 1 {
		t.Fatalf("after deleting one group's state: %v and %v", got1, got2)
	}
}
