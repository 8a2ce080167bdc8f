package queue

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
)

// TestStateDBHold: ops queued one after another under a hold, with work between
// them, share one commit once the hold is released; a hold never released delays a
// commit by at most about maxHold, so a holder waiting for its own op (or anyone
// else's) is never stuck.
func TestStateDBHold(t *testing.T) {
	m := NewMetrics(nil)
	d, err := openStateDB(filepath.Join(t.TempDir(), "queues.db"), m)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	noop := func(*bolt.Tx) error { return nil }
	// An attempt whose release came maxHold or more after the first op was queued
	// (this goroutine descheduled under load) rightly committed it alone and says
	// nothing about the hold: it is repeated. One released in time must share a
	// commit.
	for attempt := 0; ; attempt++ {
		if attempt == 50 {
			t.Fatalf("no attempt released its hold within %v of queueing", maxHold)
		}
		before := testutil.ToFloat64(m.StateCommits)
		start := time.Now()
		release := d.hold()
		first := d.enqueue(noop)
		time.Sleep(maxHold / 3) // the committer would have started on first alone
		second := d.enqueue(noop)
		release()
		inTime := time.Since(start) < maxHold
		release() // a second call does nothing
		if err := first.wait(); err != nil {
			t.Fatal(err)
		}
		if err := second.wait(); err != nil {
			t.Fatal(err)
		}
		n := testutil.ToFloat64(m.StateCommits) - before
		if !inTime {
			continue
		}
		if n != 1 {
			t.Fatalf("%v commits for two ops queued under one hold, want 1", n)
		}
		break
	}

	_ = d.hold() // never released
	start := time.Now()
	if err := d.enqueue(noop).wait(); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < maxHold/2 || waited > time.Second {
		t.Fatalf("an op under an unreleased hold committed after %v, want about %v", waited, maxHold)
	}
}
