package bridge

import (
	"context"
	"testing"
	"time"
)

// Publishes within one deadlineStep share a context; each ends its timeout after its
// publish, rounded up to a step, never before; a later step gets a new one.
func TestDeadlinesShareAStep(t *testing.T) {
	var d deadlines
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	const timeout = 200 * time.Millisecond
	// get is d.get, checking that the deadline is timeout after the call, rounded
	// up by less than a step.
	get := func() (context.Context, time.Time) {
		t.Helper()
		before := time.Now()
		ctx := d.get(parent, timeout)
		after := time.Now()
		dl, ok := ctx.Deadline()
		if !ok || dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout+deadlineStep)) {
			t.Fatalf("deadline %v (%v), want within [%v, %v]", dl, ok, before.Add(timeout), after.Add(timeout+deadlineStep))
		}
		return ctx, dl
	}
	a, da := get()
	b, db := get()
	if db.Equal(da) != (a == b) {
		t.Fatalf("same deadline %v, same context %v", db.Equal(da), a == b)
	}
	time.Sleep(2 * deadlineStep)
	c, dc := get()
	if c == a {
		t.Fatal("a later step shares the earlier context")
	}
	if !dc.After(da) {
		t.Fatalf("later deadline %v not after %v", dc, da)
	}
	select {
	case <-a.Done():
		t.Fatal("context ended before its deadline")
	default:
	}
	time.Sleep(time.Until(da) + 50*time.Millisecond)
	if a.Err() != context.DeadlineExceeded {
		t.Fatalf("after its deadline: %v, want DeadlineExceeded", a.Err())
	}
	// The parent ending ends them, and a new one is made from the ended parent.
	cancel()
	if c.Err() == nil {
		t.Fatal("context outlives its parent")
	}
	if e := d.get(parent, timeout); e.Err() == nil {
		t.Fatal("context of an ended parent not ended")
	}
}
