package txn

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// busyRunners makes every finish runner busy (an EndTxn each, its markers held at the
// returned gate), so that the finishes queued next (waitQueued) go in one batch once
// the gate opens.
func busyRunners(t *testing.T, e *env) chan struct{} {
	t.Helper()
	ctx := context.Background()
	gate := make(chan struct{})
	e.markers.gate = gate
	for i := 0; i < maxFinishRunners; i++ {
		tid := fmt.Sprintf("tx-busy-%d", i)
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
			close(gate)
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
		if code, _, _, err := e.c.EndTxn(ctx, tid, pid, epoch, true, false); err != nil || code != 0 {
			close(gate)
			t.Fatalf("EndTxn(%s) = %d, %v", tid, code, err)
		}
	}
	return gate
}

// waitQueued waits until n finishes are queued (closing gate when they are not).
func waitQueued(t *testing.T, e *env, gate chan struct{}, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		e.c.fmu.Lock()
		q := len(e.c.fqueue)
		e.c.fmu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("%d finishes queued, want %d", q, n)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// TestDecisionBatchWithBadIDDecidesTheOthers: an EndTxn whose transactional id
// Postgres cannot take (a NUL byte: any client can send one) shares a decision batch
// with other producers' EndTxns. Only it may fail: the others are decided, answered
// NONE and committed, not failed with it (each would answer
// COORDINATOR_NOT_AVAILABLE, and a client sending such ids could keep every batch
// failing).
func TestDecisionBatchWithBadIDDecidesTheOthers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	type prod struct {
		tid   string
		pid   int64
		epoch int32
	}
	var ps []prod
	for i := 0; i < 3; i++ {
		tid := fmt.Sprintf("tx-good-%d", i)
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
		ps = append(ps, prod{tid, pid, epoch})
	}
	gate := busyRunners(t, e)
	type answer struct {
		tid  string
		code int16
		err  error
	}
	ended := make(chan answer, len(ps)+1)
	for _, p := range ps[:1] {
		go func() {
			code, _, _, err := e.c.EndTxn(ctx, p.tid, p.pid, p.epoch, true, false)
			ended <- answer{p.tid, code, err}
		}()
	}
	waitQueued(t, e, gate, 1)
	go func() {
		code, _, _, err := e.c.EndTxn(ctx, "bad\x00id", 1, 0, true, false)
		ended <- answer{"bad", code, err}
	}()
	waitQueued(t, e, gate, 2)
	for _, p := range ps[1:] {
		go func() {
			code, _, _, err := e.c.EndTxn(ctx, p.tid, p.pid, p.epoch, true, true)
			ended <- answer{p.tid, code, err}
		}()
	}
	waitQueued(t, e, gate, len(ps)+1)
	close(gate)
	for range len(ps) + 1 {
		select {
		case a := <-ended:
			if a.tid == "bad" {
				continue // an error or a code: its own business
			}
			if a.err != nil || a.code != 0 {
				t.Errorf("EndTxn(%s) sharing a batch with a bad id = %d, %v; want 0", a.tid, a.code, a.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an EndTxn did not answer")
		}
	}
	for _, p := range ps {
		if st := e.state(p.tid); st.State != StateCompleteCommit {
			t.Errorf("%s: %s, want CompleteCommit", p.tid, st.State)
		}
	}
}
