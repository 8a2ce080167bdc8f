package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// ReceiveCatchUp delivers every record appended to the sources before the call, also
// with wait 0: each binding has looked at them before it leases. The bound is long
// here, so what is tested is the cursor wait, not luck; a binding whose new records
// are all filtered out moves its cursor without a wake-up and must not hold the call
// until the bound (the poll), which the context's 10 s would show.
func TestReceiveCatchUp(t *testing.T) {
	e := newEnvOpts(t, Options{CatchUpMax: time.Minute})
	src, other := e.log("gcp.t"), e.log("gcp.u")
	q := e.queue("gcp.sub.s", Config{},
		Binding{Source: "gcp.t"},
		Binding{Source: "gcp.u", Filter: `attributes.color = "red"`})
	for i := range 20 {
		want := []string{fmt.Sprint("a", i), fmt.Sprint("b", i)}
		publish(t, src, want[0])
		publish(t, src, want[1])
		publishWith(t, other, fmt.Sprint("x", i), "color", "blue") // filtered out
		if i%2 == 0 {
			want = append(want, fmt.Sprint("r", i))
			publishWith(t, other, want[2], "color", "red")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ds, err := q.ReceiveCatchUp(ctx, 10, 0, 0, 0)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		got := values(ds)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: received %v, want %v", i, got, want)
		}
		mustAck(t, q, ackIDs(ds)...)
	}
	// Only the filtered-out record is new: nothing to deliver, and no wait for it.
	publishWith(t, other, "x", "color", "blue")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ds, err := q.ReceiveCatchUp(ctx, 10, 0, 0, 0); err != nil || len(ds) != 0 {
		t.Fatalf("filtered only: %v %v", values(ds), err)
	}
}

// restartPumps starts q's binding pumps again after a test stopped them (stopPumps).
func restartPumps(q *Queue) {
	q.mu.Lock()
	q.pumpStop = make(chan struct{})
	q.mu.Unlock()
	q.startPumps()
}

// A binding that cannot progress (here its pump is stopped) delays ReceiveCatchUp by
// the bound only: it answers with what is there, not with the context's error.
func TestReceiveCatchUpBounded(t *testing.T) {
	e := newEnvOpts(t, Options{CatchUpMax: 100 * time.Millisecond})
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	q.stopPumps()
	publish(t, src, "a")
	for _, wait := range []time.Duration{0, 20 * time.Millisecond, 300 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		ds, err := q.ReceiveCatchUp(ctx, 10, 0, 0, wait)
		cancel()
		if err != nil || len(ds) != 0 {
			t.Fatalf("wait %v: %v %v", wait, values(ds), err)
		}
		if d := time.Since(start); d > 10*time.Second { // the bound is 100 ms: far below
			t.Fatalf("wait %v: answered after %v", wait, d)
		}
	}
	restartPumps(q)
	receive(t, q, 10, 1)
}

// A binding whose source is gone is not waited for, however long the bound.
func TestReceiveCatchUpSourceGone(t *testing.T) {
	e := newEnvOpts(t, Options{CatchUpMax: time.Hour})
	e.log("gcp.t")
	src := e.log("gcp.u")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"}, Binding{Source: "gcp.u"})
	publish(t, src, "a")
	receive(t, q, 10, 1)
	q.stopPumps()
	publish(t, src, "b") // not copied: would hold the call for the hour
	if err := e.st.Delete("gcp.u", false); err != nil {
		t.Fatal(err)
	}
	e.clk.add(time.Second)
	publish(t, e.log("gcp.u"), "c", "d") // another log of the same name: not the binding's source
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ds, err := q.ReceiveCatchUp(ctx, 10, 0, 0, 0); err != nil || len(ds) != 0 {
		t.Fatalf("receive: %v %v", values(ds), err)
	}
	restartPumps(q)
}

// A window that already holds a full answer is not held up by a binding behind its
// source: ReceiveCatchUp answers at once, however long the bound.
func TestReceiveCatchUpFullWindow(t *testing.T) {
	e := newEnvOpts(t, Options{CatchUpMax: time.Hour})
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c")
	if got := values(receive(t, q, 1, 1)); fmt.Sprint(got) != "[a]" {
		t.Fatalf("first %v", got)
	}
	q.stopPumps()
	publish(t, src, "d") // not copied: would hold the call for the hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := q.ReceiveCatchUp(ctx, 2, 0, 0, 0)
	if err != nil || fmt.Sprint(values(ds)) != "[b c]" {
		t.Fatalf("full window: %v %v, want [b c] at once", values(ds), err)
	}
	restartPumps(q)
}
