package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// A source record larger than the queue log's batch limit (a source configured with
// a large max_message_bytes) must not wedge the binding: every later record would
// never reach the queue.
func TestAttackHugeSourceRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("65 MiB record")
	}
	e := newEnv(t)
	src, _, err := e.st.Create("kafka.big", store.ChannelConfig{MaxMessageBytes: 80 << 20}, false)
	if err != nil {
		t.Fatal(err)
	}
	q := e.queue("q.big", Config{}, Binding{Source: "kafka.big", StartSequence: 1})
	if _, _, err := src.Append([]store.NewRecord{{Value: make([]byte, 65<<20)}}); err != nil {
		t.Fatal(err)
	}
	publish(t, src, "after")
	var got []Delivery
	for deadline := time.Now().Add(60 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		ds, err := q.Receive(context.Background(), 10, 0, 0, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
		mustAck(t, q, ackIDs(ds)...) // the big one fills the 64 MiB window alone
	}
	if len(got) != 2 || len(got[0].Record.Value) != 65<<20 || string(got[1].Record.Value) != "after" {
		t.Fatalf("got %d messages", len(got))
	}
}

// Queue logs created with the former 64 MiB batch bound are raised at open.
func TestQueueLogBatchLimitRaisedAtOpen(t *testing.T) {
	e := newEnv(t)
	q := e.queue("q.old", Config{})
	c := q.log.Config()
	c.MaxMessageBytes = 64 << 20
	if err := q.log.UpdateConfig(c); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if got := e.mustGet("q.old").Config().MaxMessageBytes; got != queueLogMaxBatch {
		t.Fatalf("max_message_bytes %d", got)
	}
}

// A zero min backoff stays zero for any delivery count (it once looped once per
// attempt under the queue lock: a message redelivered a billion times stalled it).
func TestBackoffZeroMinAnyAttempts(t *testing.T) {
	c := Config{Retry: &RetryPolicy{MinBackoffMs: 0, MaxBackoffMs: MaxBackoffMs}}
	if d := c.backoffMs(1 << 30); d != 0 {
		t.Fatalf("backoff %d", d)
	}
	c.Retry.MinBackoffMs = 10
	if d := c.backoffMs(1 << 30); d != MaxBackoffMs {
		t.Fatalf("backoff %d", d)
	}
}

// Thousands of leases expiring at once on a dead-lettering queue: each message is
// dead-lettered exactly once, in batches, with its own headers.
func TestDeadLetterMany(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	dead := e.log("gcp.dead")
	q := e.queue("gcp.sub.s", Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 1, DeliveryCountHeader: "n"}},
		Binding{Source: "gcp.t", StartSequence: 1})
	const n = 2500
	for i := 0; i < n; i += 500 {
		vals := make([]string, 500)
		for j := range vals {
			vals[j] = fmt.Sprint(i + j)
		}
		publish(t, src, vals...)
	}
	got := 0
	for got < n {
		got += len(receive(t, q, 1000, min(1000, n-got)))
	}
	e.clk.add(11 * time.Second)
	e.m.Sweep()
	if in := q.Info(); in.Backlog != 0 {
		t.Fatalf("backlog %d", in.Backlog)
	}
	recs, _, err := dead.ReadRecords(0, 10000, 64<<20)
	if err != nil || len(recs) != n {
		t.Fatalf("%d dead letters, %v", len(recs), err)
	}
	for i, r := range recs {
		if string(r.Value) != fmt.Sprint(i) || fmt.Sprint(r.Headers) != fmt.Sprintf("[{v %v} {n [49]}]", []byte(fmt.Sprint(i))) {
			t.Fatalf("dead letter %d: %s %v", i, r.Value, r.Headers)
		}
	}
}

// A crash between a delete's two steps (state removed, log not yet) leaves a queue
// log without state; DeleteQueue of that name removes it, so the name can be created
// again.
func TestAttackDeleteCutByCrash(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a")
	receive(t, q, 1, 1)
	q.stopPumps()
	if err := e.m.dropState("gcp.sub.s"); err != nil { // the delete's first step
		t.Fatal(err)
	}
	e.restart() // the log is kept: it holds records
	if _, _, err := e.m.Create("gcp.sub.s", Config{}, nil, false); !errors.Is(err, ErrExists) {
		t.Fatalf("create over the left-over log: %v", err)
	}
	if err := e.m.Delete("gcp.sub.s", false); err != nil {
		t.Fatal(err)
	}
	q = e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	receive(t, q, 10, 1)
}

// A message the dead-letter log refuses (over its max_message_bytes) does not hold
// back the others dead-lettered with it.
func TestDeadLetterOneTooLarge(t *testing.T) {
	e := newEnv(t)
	src, _, err := e.st.Create("gcp.t", store.ChannelConfig{MaxMessageBytes: 4 << 20}, false)
	if err != nil {
		t.Fatal(err)
	}
	dead := e.log("gcp.dead") // 1 MiB batches
	q := e.queue("gcp.sub.s", Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 1}}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a")
	publishWith(t, src, string(make([]byte, 2<<20)))
	publish(t, src, "c")
	receive(t, q, 10, 3)
	e.clk.add(11 * time.Second)
	e.m.Sweep()
	recs, _, err := dead.ReadRecords(0, 10, 1<<20)
	if err != nil || len(recs) != 2 || string(recs[0].Value) != "a" || string(recs[1].Value) != "c" {
		t.Fatalf("dead letters %d %v", len(recs), err)
	}
	if in := q.Info(); in.Backlog != 1 {
		t.Fatalf("backlog %d", in.Backlog)
	}
}

// max_bytes is never exceeded but by a lone first message: a large message after a
// small one waits for the next Receive (a response past the caller's bound can exceed
// its clients' receive limit, and then every redelivery fails the same way).
func TestReceiveMaxBytesNotExceeded(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publishWith(t, src, "small")
	publishWith(t, src, string(make([]byte, 1000)))
	publishWith(t, src, "tail")
	for deadline := time.Now().Add(5 * time.Second); q.Info().Backlog < 3; { // all three copied
		if time.Now().After(deadline) {
			t.Fatal("not copied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var got []Delivery
	for deadline := time.Now().Add(5 * time.Second); len(got) < 3 && time.Now().Before(deadline); {
		ds, err := q.Receive(context.Background(), 10, 100, 0, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for _, d := range ds {
			n += len(d.Record.Value)
		}
		if len(ds) > 1 && n > 100 {
			t.Fatalf("%d messages, %d bytes > max_bytes 100", len(ds), n)
		}
		got = append(got, ds...)
	}
	if len(got) != 3 || len(got[1].Record.Value) != 1000 {
		t.Fatalf("got %d", len(got))
	}
}

// With ExactBytes, max_bytes binds the first message too: a message larger than the
// caller's room is not leased (it stays available to other callers), and the call
// answers at once with its size instead of waiting out its long poll.
func TestReceiveExactBytes(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publishWith(t, src, "small")
	publishWith(t, src, string(make([]byte, 1000)), "h", "vv")
	publishWith(t, src, "tail")
	for deadline := time.Now().Add(5 * time.Second); q.Info().Backlog < 3; { // all three copied
		if time.Now().After(deadline) {
			t.Fatal("not copied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	exact := ReceiveArgs{MaxMsgs: 10, MaxBytes: 100, Wait: 5 * time.Second, ExactBytes: true}
	ds, tooBig, err := q.ReceiveWith(context.Background(), exact)
	if err != nil || len(ds) != 1 || string(ds[0].Record.Value) != "small" || tooBig != 0 {
		t.Fatalf("first exact receive: %d messages, tooBig %d, %v; want only \"small\"", len(ds), tooBig, err)
	}
	start := time.Now()
	ds, tooBig, err = q.ReceiveWith(context.Background(), exact)
	if err != nil || len(ds) != 0 || tooBig != 1000+1+2 {
		t.Fatalf("exact receive before the large message: %d messages, tooBig %d, %v; want none and 1003", len(ds), tooBig, err)
	}
	if waited := time.Since(start); waited >= exact.Wait {
		t.Fatalf("exact receive waited %v for a message that cannot fit", waited)
	}
	// Not leased: a caller without the bound takes it alone, then the tail follows.
	ds, err = q.Receive(context.Background(), 10, 100, 0, time.Second)
	if err != nil || len(ds) != 1 || len(ds[0].Record.Value) != 1000 {
		t.Fatalf("receive without ExactBytes: %d messages, %v; want the large one alone", len(ds), err)
	}
	ds, tooBig, err = q.ReceiveWith(context.Background(), exact)
	if err != nil || len(ds) != 1 || string(ds[0].Record.Value) != "tail" || tooBig != 0 {
		t.Fatalf("last exact receive: %d messages, tooBig %d, %v; want \"tail\"", len(ds), tooBig, err)
	}
}
