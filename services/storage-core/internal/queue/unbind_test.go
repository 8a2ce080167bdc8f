package queue

import (
	"errors"
	"fmt"
	"testing"
)

// TestUnbind: after Unbind no record of the source enters the queue, also after a
// restart and after the source is deleted and created again; messages already in the
// queue are still delivered, and the other binding keeps pumping.
func TestUnbind(t *testing.T) {
	e := newEnv(t)
	a, b := e.log("gcp.a"), e.log("gcp.b")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.a"}, Binding{Source: "gcp.b"})
	publish(t, a, "a1")
	publish(t, b, "b1")
	d := receive(t, q, 10, 2)
	mustAck(t, q, d[0].AckID, d[1].AckID)
	publish(t, a, "a2") // copied before the unbind (received below)
	receive(t, q, 10, 1)

	removed, err := e.m.Unbind("gcp.sub.s", "gcp.a")
	if err != nil || !removed {
		t.Fatalf("Unbind = %v, %v", removed, err)
	}
	if removed, err := e.m.Unbind("gcp.sub.s", "gcp.a"); err != nil || removed {
		t.Fatalf("second Unbind = %v, %v; want false, nil", removed, err)
	}
	if _, err := e.m.Unbind("gcp.sub.missing", "gcp.a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Unbind of a missing queue: %v", err)
	}
	if in := q.Info(); len(in.Bindings) != 1 || in.Bindings[0].Source != "gcp.b" {
		t.Fatalf("bindings after Unbind: %+v", in.Bindings)
	}
	publish(t, a, "a3")
	publish(t, b, "b2")
	// a2 (leased above, expires after 10 s of fake time) and b2.
	e.clk.ms.Add(11_000)
	if got := values(receive(t, q, 10, 2)); fmt.Sprint(got) != "[a2 b2]" {
		t.Fatalf("after Unbind: %v", got)
	}

	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if in := q.Info(); len(in.Bindings) != 1 || in.Bindings[0].Source != "gcp.b" {
		t.Fatalf("bindings after restart: %+v", in.Bindings)
	}
	a, _ = e.st.Get("gcp.a")
	b, _ = e.st.Get("gcp.b")
	publish(t, a, "a4")
	publish(t, b, "b3")
	e.clk.ms.Add(11_000)
	if got := values(receive(t, q, 10, 3)); fmt.Sprint(got) != "[a2 b2 b3]" {
		t.Fatalf("after restart: %v", got)
	}

	// The source deleted and created again (same fake millisecond, so its creation
	// time does not tell the two apart): still nothing from it.
	if err := e.st.Delete("gcp.a", false); err != nil {
		t.Fatal(err)
	}
	a = e.log("gcp.a")
	publish(t, a, "new1")
	e.clk.ms.Add(11_000)
	if got := values(receive(t, q, 10, 3)); fmt.Sprint(got) != "[a2 b2 b3]" {
		t.Fatalf("after the source was created again: %v", got)
	}
}
