package server

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tributary/tributary/libs/natsx"
)

// TestLeaseSweepAnnounces: the coordinator holding the Pub/Sub ack-deadline sweep lock
// calls SweepLeases every 250 ms and announces each queue it names on that queue's
// queues.changed subject, with no payload; the lock is apart from the group lock.
func TestLeaseSweepAnnounces(t *testing.T) {
	e := newEnv(t)
	e.storage.queues.mu.Lock()
	e.storage.queues.sweepChanged = []string{"gcp.sub.a", "gcp.sub.b.c"}
	e.storage.queues.mu.Unlock()
	got := make(chan *nats.Msg, 64)
	sub, err := e.nc.ChanSubscribe(natsx.QueueChangedPrefix(e.cfg.ClusterID)+"*", got)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := start(t, e.cfg, true)
	waitFor(t, "the lease sweep lock is held", func() error {
		if !r.srv.groups.HoldsLock("pubsub-acks") {
			return errors.New("not held")
		}
		return nil
	})
	want := map[string]bool{
		natsx.QueueChangedSubject(e.cfg.ClusterID, "gcp.sub.a"):   true,
		natsx.QueueChangedSubject(e.cfg.ClusterID, "gcp.sub.b.c"): true,
	}
	seen := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < len(want) {
		select {
		case m := <-got:
			if !want[m.Subject] || len(m.Data) != 0 {
				t.Fatalf("announcement %q with %d payload bytes", m.Subject, len(m.Data))
			}
			seen[m.Subject] = true
		case <-deadline:
			t.Fatalf("announced %v, want %v", seen, want)
		}
	}
	// Every 250 ms: about eight sweeps in two seconds.
	e.storage.queues.mu.Lock()
	before := e.storage.queues.swept
	e.storage.queues.mu.Unlock()
	time.Sleep(2 * time.Second) // counting ticks over a span, not waiting for readiness
	e.storage.queues.mu.Lock()
	n := e.storage.queues.swept - before
	e.storage.queues.mu.Unlock()
	if n < 5 || n > 10 {
		t.Fatalf("%d sweeps in 2 s, want about 8", n)
	}
}
