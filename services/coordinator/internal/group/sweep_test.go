package group

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestSweepLockKinds: a sweep kind of its own (AddSweepLock) runs on exactly one
// replica at a time, under a lock apart from the group lock, and moves to the other
// replica within the lock's TTL when its holder crashes (NATS connection cut, lock not
// released).
func TestSweepLockKinds(t *testing.T) {
	e := newEnv(t)
	cfg := e.testConfig()
	var runs [2]atomic.Int64
	replica := func(i int) (*Coordinator, func()) {
		c, nc, stop := e.startReplicaWith(cfg, func(c *Coordinator) {
			c.AddSweepLock("test-kind", func(context.Context, time.Time) error {
				runs[i].Add(1)
				return nil
			})
		})
		return c, func() { nc.Close(); stop() }
	}
	c0, crash0 := replica(0)
	c1, crash1 := replica(1)
	eventually(t, 10*time.Second, "a replica holds test-kind", func() error {
		if c0.HoldsLock("test-kind") == c1.HoldsLock("test-kind") {
			return errors.New("held by neither or both")
		}
		return nil
	})
	holder, other := 0, 1
	if c1.HoldsLock("test-kind") {
		holder, other = 1, 0
	}
	// The holder sweeps every SweepInterval (50 ms); the other never does.
	before := runs[holder].Load()
	time.Sleep(10 * cfg.SweepInterval) // counting ticks over a span, not waiting for readiness
	if n := runs[holder].Load() - before; n < 3 {
		t.Fatalf("holder swept %d times in %v", n, 10*cfg.SweepInterval)
	}
	if n := runs[other].Load(); n != 0 {
		t.Fatalf("the replica without the lock swept %d times", n)
	}
	if !c0.HoldsLock("groups") && !c1.HoldsLock("groups") {
		t.Fatal("the group lock is held by no replica")
	}
	if c0.HoldsLock("no-such-lock") {
		t.Fatal("a lock nobody registered is held")
	}

	crashed := time.Now()
	survivor := []*Coordinator{c0, c1}[other]
	[]func(){crash0, crash1}[holder]()
	eventually(t, 10*time.Second, "the survivor takes test-kind over", func() error {
		if !survivor.HoldsLock("test-kind") {
			return errors.New("not yet")
		}
		return nil
	})
	if took := time.Since(crashed); took > cfg.SweepLockTTL+time.Second {
		t.Fatalf("take-over took %v, lock ttl %v", took, cfg.SweepLockTTL)
	}
	base := runs[other].Load()
	eventually(t, 5*time.Second, "the survivor sweeps", func() error {
		if runs[other].Load() < base+3 {
			return errors.New("not yet")
		}
		return nil
	})
}
