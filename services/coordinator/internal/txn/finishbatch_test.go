package txn

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestConcurrentEndTxnsFinishTogether: EndTxns that arrive while every finisher is
// busy are finished together, in one WriteMarkers call (and one Postgres
// transaction), each transaction's markers written and each completed; their answers
// wait for the batch's row locks, never for another transaction's markers they do not
// share.
func TestConcurrentEndTxnsFinishTogether(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const busy, queued = maxFinishRunners, 6
	type prod struct {
		tid   string
		pid   int64
		epoch int32
	}
	var ps []prod
	for i := 0; i < busy+queued; i++ {
		tid := fmt.Sprintf("tx-group-%02d", i)
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0), tp("out", 1)); !codesEqual(got, 0, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
		ps = append(ps, prod{tid, pid, epoch})
	}
	gate := make(chan struct{})
	e.markers.gate = gate
	end := func(p prod, out chan<- error) {
		code, _, _, err := e.c.EndTxn(ctx, p.tid, p.pid, p.epoch, true, false)
		if err == nil && code != 0 {
			err = fmt.Errorf("EndTxn(%s) = %d", p.tid, code)
		}
		out <- err
	}
	// Every runner busy: each holds one transaction, its markers held at the gate.
	for _, p := range ps[:busy] {
		ended := make(chan error, 1)
		go end(p, ended)
		select {
		case err := <-ended:
			if err != nil {
				close(gate)
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			close(gate)
			t.Fatalf("EndTxn(%s) did not answer while its markers were being written", p.tid)
		}
	}
	ended := make(chan error, queued)
	for _, p := range ps[busy:] {
		go end(p, ended)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		e.c.fmu.Lock()
		n := len(e.c.fqueue)
		e.c.fmu.Unlock()
		if n == queued {
			break
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("%d finishes queued, want %d", n, queued)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	close(gate)
	for range ps[busy:] {
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
	}
	ms := e.written()
	if len(ms) != 2*len(ps) {
		t.Fatalf("%d markers written, want %d", len(ms), 2*len(ps))
	}
	e.markers.mu.Lock()
	calls := append([]int(nil), e.markers.calls...)
	e.markers.mu.Unlock()
	if len(calls) != busy+1 || calls[len(calls)-1] != 2*queued {
		t.Fatalf("WriteMarkers calls of %v markers, want %d of 2 then one of %d", calls, busy, 2*queued)
	}
	seen := map[int64]int{}
	for _, m := range ms {
		if !m.Commit {
			t.Fatalf("marker %+v, want COMMIT", m)
		}
		seen[m.ProducerID]++
	}
	for _, p := range ps {
		if seen[p.pid] != 2 {
			t.Fatalf("%s: %d markers, want 2", p.tid, seen[p.pid])
		}
		if st := e.state(p.tid); st.State != StateCompleteCommit || len(st.Partitions) != 0 {
			t.Fatalf("%s after the batch: %+v", p.tid, st)
		}
	}
}

// TestFinishBatchSkipsLockedRowAndFailedMarkers: a batch never waits for a row another
// holder has locked (that one is finished on its own once the lock is free), and a
// transaction whose marker is refused stays PrepareCommit while the others of its
// batch complete.
func TestFinishBatchSkipsLockedRowAndFailedMarkers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pids := map[string]int64{}
	for _, tid := range []string{"tx-a", "tx-b", "tx-c"} {
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
		pids[tid] = pid
	}
	if _, err := e.st.Pool().Exec(ctx, `UPDATE transactions SET state = 'PrepareCommit'`); err != nil {
		t.Fatal(err)
	}
	e.markers.code = func(m Marker) int16 {
		if m.ProducerID == pids["tx-c"] {
			return 56 // KAFKA_STORAGE_ERROR
		}
		return 0
	}
	holder, err := e.st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM transactions WHERE transactional_id = 'tx-a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var reqs []*finishReq
	for _, tid := range []string{"tx-a", "tx-b", "tx-c"} {
		r := &finishReq{tid: tid, locked: make(chan struct{}), done: make(chan struct{})}
		reqs = append(reqs, r)
	}
	batchDone := make(chan struct{})
	go func() {
		defer close(batchDone)
		e.c.finishBatch(ctx, reqs)
	}()
	select {
	case <-batchDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch waited for a row another transaction holds")
	}
	<-reqs[1].done
	<-reqs[2].done
	if st := e.state("tx-b"); st.State != StateCompleteCommit {
		t.Fatalf("tx-b: %s, want CompleteCommit", st.State)
	}
	if st := e.state("tx-c"); st.State != StatePrepareCommit || len(st.Partitions) != 1 {
		t.Fatalf("tx-c with a refused marker: %+v, want PrepareCommit with its partition", st)
	}
	select {
	case <-reqs[0].locked:
		t.Fatal("tx-a's finish reported its lock while another transaction holds it")
	case <-time.After(100 * time.Millisecond):
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reqs[0].done:
	case <-time.After(20 * time.Second):
		t.Fatal("tx-a was not finished once its row lock was free")
	}
	if st := e.state("tx-a"); st.State != StateCompleteCommit {
		t.Fatalf("tx-a: %s, want CompleteCommit", st.State)
	}
	got := map[int64]int{}
	for _, m := range e.written() {
		got[m.ProducerID]++
	}
	if got[pids["tx-a"]] != 1 || got[pids["tx-b"]] != 1 || got[pids["tx-c"]] != 0 {
		t.Fatalf("markers written per producer %v (a=%d b=%d c=%d)", got, pids["tx-a"], pids["tx-b"], pids["tx-c"])
	}
}

// TestEndTxnOnRowLockedElsewhere: an EndTxn whose row another holder has locked is not
// decided by the batch (which never waits for a lock) but by the locked path, once
// the lock is free: it answers then, not before, and its markers are written.
func TestEndTxnOnRowLockedElsewhere(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-held", 60000)
	if got := e.add("tx-held", pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
		t.Fatalf("AddPartitions = %v", got)
	}
	holder, err := e.st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM transactions WHERE transactional_id = 'tx-held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	ended := make(chan int16, 1)
	go func() {
		code, _, _, err := e.c.EndTxn(ctx, "tx-held", pid, epoch, true, false)
		if err != nil {
			code = -100
		}
		ended <- code
	}()
	select {
	case code := <-ended:
		t.Fatalf("EndTxn answered %d while another transaction holds its row", code)
	case <-time.After(300 * time.Millisecond):
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-ended:
		if code != 0 {
			t.Fatalf("EndTxn = %d, want 0", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("EndTxn did not answer once the row lock was free")
	}
	if ms := e.written(); len(ms) != 1 || !ms[0].Commit {
		t.Fatalf("markers %+v, want one COMMIT", ms)
	}
	if st := e.state("tx-held"); st.State != StateCompleteCommit {
		t.Fatalf("state %s, want CompleteCommit", st.State)
	}
}

// TestSweepLeavesARunningFinish: the sweep does not take the row lock of a Prepare*
// transaction whose finish runs in this process (it would only hold that finish and
// the producer's next call up); the finish writes the markers once.
func TestSweepLeavesARunningFinish(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-sweep", 60000)
	if got := e.add("tx-sweep", pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
		t.Fatalf("AddPartitions = %v", got)
	}
	gate := make(chan struct{})
	e.markers.gate = gate
	if code, _, _, err := e.c.EndTxn(ctx, "tx-sweep", pid, epoch, true, false); err != nil || code != 0 {
		close(gate)
		t.Fatalf("EndTxn = %d, %v", code, err)
	}
	swept := make(chan error, 1)
	go func() { swept <- e.c.Sweep(ctx, time.UnixMilli(e.now.Load())) }()
	select {
	case err := <-swept:
		if err != nil {
			close(gate)
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("the sweep waited for the running finish's row lock")
	}
	close(gate)
	if ms := e.written(); len(ms) != 1 || !ms[0].Commit {
		t.Fatalf("markers %+v, want one COMMIT", ms)
	}
	if st := e.state("tx-sweep"); st.State != StateCompleteCommit {
		t.Fatalf("state %s, want CompleteCommit", st.State)
	}
}
