package txn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/coordinator/internal/store"
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

// TestDecisionBatchWithBadRowDecidesTheOthers: an EndTxn whose row Postgres refuses
// to update (here a trigger raising for that row, as a constraint would) shares a
// decision batch with other producers' EndTxns. Only it may fail: the others are
// decided, answered NONE and committed, not failed with it (each answered
// COORDINATOR_NOT_AVAILABLE and stayed Ongoing before).
func TestDecisionBatchWithBadRowDecidesTheOthers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	type prod struct {
		tid   string
		pid   int64
		epoch int32
	}
	var ps []prod
	for _, tid := range []string{"tx-good-0", "tx-poison", "tx-good-1", "tx-good-2"} {
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
		ps = append(ps, prod{tid, pid, epoch})
	}
	if _, err := e.st.Pool().Exec(ctx, `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'row refused' USING ERRCODE = 'check_violation'; END $$;
		CREATE TRIGGER refuse_poison BEFORE UPDATE ON transactions FOR EACH ROW
		WHEN (NEW.transactional_id = 'tx-poison' AND NEW.state LIKE 'Prepare%') EXECUTE FUNCTION refuse_poison()`); err != nil {
		t.Fatal(err)
	}
	gate := busyRunners(t, e)
	type answer struct {
		tid  string
		code int16
		err  error
	}
	ended := make(chan answer, len(ps))
	for i, p := range ps {
		go func() {
			code, _, _, err := e.c.EndTxn(ctx, p.tid, p.pid, p.epoch, true, i%2 == 0)
			ended <- answer{p.tid, code, err}
		}()
		waitQueued(t, e, gate, i+1)
	}
	close(gate)
	for range ps {
		select {
		case a := <-ended:
			if a.tid == "tx-poison" {
				if a.err == nil && a.code == 0 {
					t.Errorf("EndTxn(tx-poison) = NONE, but its decision cannot be stored")
				}
				continue
			}
			if a.err != nil || a.code != 0 {
				t.Errorf("EndTxn(%s) sharing a batch with a refused row = %d, %v; want 0", a.tid, a.code, a.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an EndTxn did not answer")
		}
	}
	for _, p := range ps {
		want := StateCompleteCommit
		if p.tid == "tx-poison" {
			want = StateOngoing
		}
		if st := e.state(p.tid); st.State != want {
			t.Errorf("%s: %s, want %s", p.tid, st.State, want)
		}
	}
}

// TestUnstorableIDs: a transactional id or topic Postgres cannot store (a NUL byte)
// names nothing: each call answers its code for that (UNKNOWN_SERVER_ERROR for
// InitProducerId, as for an id too long; INVALID_PRODUCER_ID_MAPPING;
// UNKNOWN_TOPIC_OR_PARTITION) rather than the database's error, retriable
// (COORDINATOR_NOT_AVAILABLE) forever, and such an EndTxn or add never reaches a
// batch, where its statement would fail the other producers'.
func TestUnstorableIDs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tid := range []string{"tx-\x00-nul", "tx-\xff-utf8"} {
		if code, _, _, err := e.c.InitProducerID(ctx, tid, 60000, -1, -1); err != nil || code != codeUnknownServerError {
			t.Errorf("InitProducerID(%q) = %d, %v; want UNKNOWN_SERVER_ERROR", tid, code, err)
		}
		if code, _, _, err := e.c.EndTxn(ctx, tid, 1, 0, true, true); err != nil || code != codeInvalidProducerIDMapping {
			t.Errorf("EndTxn(%q) = %d, %v; want INVALID_PRODUCER_ID_MAPPING", tid, code, err)
		}
		if codes, err := e.c.AddPartitions(ctx, Partitions{TransactionalID: tid, ProducerID: 1, Topics: []store.TxnPartition{tp("out", 0)}}); err != nil || !codesEqual(codes, codeInvalidProducerIDMapping) {
			t.Errorf("AddPartitions(%q) = %v, %v", tid, codes, err)
		}
		if code, err := e.c.AddOffsets(ctx, tid, 1, 0, "g"); err != nil || code != codeInvalidProducerIDMapping {
			t.Errorf("AddOffsets(%q) = %d, %v", tid, code, err)
		}
		if codes, err := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: tid, Group: "g", ProducerID: 1, Generation: -1,
			Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 1}}}); err != nil || !codesEqual(codes, codeInvalidProducerIDMapping) {
			t.Errorf("TxnOffsetCommit(%q) = %v, %v", tid, codes, err)
		}
	}
	pid, epoch := e.init("tx-ok", 60000)
	codes, err := e.c.AddPartitions(ctx, Partitions{TransactionalID: "tx-ok", ProducerID: pid, ProducerEpoch: epoch,
		Topics: []store.TxnPartition{tp("out", 0), tp("o\x00ut", 0)}})
	if err != nil || !codesEqual(codes, codeOperationNotAttempted, codeUnknownTopicOrPartition) {
		t.Errorf("AddPartitions with a NUL topic = %v, %v", codes, err)
	}
	if st := e.state("tx-ok"); st.State != StateEmpty || len(st.Partitions) != 0 {
		t.Errorf("after refused AddPartitions: %+v", st)
	}
}

// TestFailedDecisionsStillFinishTheBatch: a batch whose decision statement fails
// (one refused row) also carries a finish of a transaction already decided (an
// EndTxn whose decision took the locked path). That finish must still be done, not
// dropped with the decisions: its EndTxn has answered NONE and its producer's next
// call would meet PrepareCommit (CONCURRENT_TRANSACTIONS) until a sweep.
func TestFailedDecisionsStillFinishTheBatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tid := range []string{"tx-decided", "tx-poison"} {
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
	}
	if _, err := e.st.Pool().Exec(ctx, `UPDATE transactions SET state = 'PrepareCommit' WHERE transactional_id = 'tx-decided'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Pool().Exec(ctx, `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'row refused' USING ERRCODE = 'check_violation'; END $$;
		CREATE TRIGGER refuse_poison BEFORE UPDATE ON transactions FOR EACH ROW
		WHEN (NEW.transactional_id = 'tx-poison') EXECUTE FUNCTION refuse_poison()`); err != nil {
		t.Fatal(err)
	}
	poison := e.state("tx-poison")
	d := store.Decision{ID: "tx-poison", ProducerID: poison.ProducerID, ProducerEpoch: poison.ProducerEpoch, Prepare: StatePrepareCommit}
	dr := &finishReq{tid: d.ID, decide: &d, decided: make(chan struct{}), locked: make(chan struct{}), done: make(chan struct{})}
	fr := &finishReq{tid: "tx-decided", locked: make(chan struct{}), done: make(chan struct{})}
	e.c.finishBatch(ctx, []*finishReq{dr, fr})
	select {
	case <-fr.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the finish did not end")
	}
	if st := e.state("tx-decided"); st.State != StateCompleteCommit {
		t.Errorf("tx-decided after its batch: %s, want CompleteCommit", st.State)
	}
	if ms := e.written(); len(ms) != 1 || !ms[0].Commit {
		t.Errorf("markers %+v, want tx-decided's COMMIT", ms)
	}
}

// TestRetriedEndTxnWhileItsBatchRuns: a v5 EndTxn is decided and its finish batch is
// writing the markers (held) when its retry (the answer was lost) arrives, on this
// replica and on another on the same database. Neither retry may answer before the
// markers are written, nor as a new end (PRODUCER_FENCED, another bump): both answer
// NONE with the epoch of the first answer, and the markers are written once.
func TestRetriedEndTxnWhileItsBatchRuns(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-retry", 60000)
	if got := e.add("tx-retry", pid, epoch, tp("out", 0), tp("out", 1)); !codesEqual(got, 0, 0) {
		t.Fatalf("AddPartitions = %v", got)
	}
	gate := make(chan struct{})
	e.markers.gate = gate
	code, np, ne, err := e.c.EndTxn(ctx, "tx-retry", pid, epoch, true, true)
	if err != nil || code != 0 || np != pid || ne != epoch+1 {
		close(gate)
		t.Fatalf("EndTxn = %d, %d/%d, %v; want 0, %d/%d", code, np, ne, err, pid, epoch+1)
	}
	other := New(Config{}, Deps{Store: e.st, Markers: e.markers, Log: e.c.log,
		NextProducerID: e.c.nextPID, Now: e.c.now})
	defer other.Close()
	type answer struct {
		who       string
		code      int16
		pid       int64
		epoch     int32
		err       error
		afterGate bool
	}
	opened := make(chan struct{})
	answers := make(chan answer, 2)
	for _, r := range []struct {
		who string
		c   *Coordinator
	}{{"same replica", e.c}, {"other replica", other}} {
		go func() {
			code, p, ep, err := r.c.EndTxn(ctx, "tx-retry", pid, epoch, true, true)
			after := false
			select {
			case <-opened:
				after = true
			default:
			}
			answers <- answer{r.who, code, p, ep, err, after}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	close(opened)
	close(gate)
	for range 2 {
		select {
		case a := <-answers:
			if a.err != nil || a.code != 0 || a.pid != pid || a.epoch != epoch+1 {
				t.Errorf("retry on the %s = %d, %d/%d, %v; want 0, %d/%d", a.who, a.code, a.pid, a.epoch, a.err, pid, epoch+1)
			}
			if !a.afterGate {
				t.Errorf("retry on the %s answered while the first end's markers were held", a.who)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a retry did not answer")
		}
	}
	other.Close()
	ms := e.written()
	if len(ms) != 2 {
		t.Errorf("markers %+v, want 2 (one per partition)", ms)
	}
	for _, m := range ms {
		if !m.Commit || m.ProducerEpoch != epoch+1 {
			t.Errorf("marker %+v, want COMMIT at epoch %d", m, epoch+1)
		}
	}
	if st := e.state("tx-retry"); st.State != StateCompleteCommit || st.ProducerEpoch != epoch+1 {
		t.Errorf("state %s epoch %d, want CompleteCommit at %d", st.State, st.ProducerEpoch, epoch+1)
	}
}

// TestRoutedBatchUnreachablePartitionHoldsOnlyItsTransaction: in raft mode markers go
// one per call; a partition whose calls stay UNAVAILABLE (its leader unreachable) must
// leave only the transaction with a marker there Prepare*, not every transaction of
// its finish batch (whose markers were written, and whose producers would meet
// CONCURRENT_TRANSACTIONS until a sweep).
func TestRoutedBatchUnreachablePartitionHoldsOnlyItsTransaction(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	f := &markerStorage{calls: map[string]int{}, script: map[string][]int32{
		channel.KafkaPartition("out", 1): {-100, -100, -100, -100, -100, -100, -100, -100},
	}}
	c := New(Config{}, Deps{Store: e.st, Markers: StorageMarkers(f, true), Log: e.c.log, NextProducerID: e.c.nextPID, Now: e.c.now})
	defer c.Close()
	for tid, p := range map[string]int32{"tx-reachable": 0, "tx-unreachable": 1} {
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", p), tp("in", 0)); !codesEqual(got, 0, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
	}
	if _, err := e.st.Pool().Exec(ctx, `UPDATE transactions SET state = 'PrepareCommit'`); err != nil {
		t.Fatal(err)
	}
	var reqs []*finishReq
	for _, tid := range []string{"tx-reachable", "tx-unreachable"} {
		reqs = append(reqs, &finishReq{tid: tid, locked: make(chan struct{}), done: make(chan struct{})})
	}
	c.finishBatch(ctx, reqs)
	for _, r := range reqs {
		<-r.done
	}
	if st := e.state("tx-reachable"); st.State != StateCompleteCommit {
		t.Errorf("tx-reachable: %s, want CompleteCommit (its markers were written)", st.State)
	}
	if st := e.state("tx-unreachable"); st.State != StatePrepareCommit || len(st.Partitions) != 2 {
		t.Errorf("tx-unreachable: %+v, want PrepareCommit with its partitions", st)
	}
}

// TestFinishBatchRefusedCompletionHoldsOnlyItsRow: one row of a finish batch cannot
// be completed (a trigger refuses it, as a constraint would), which fails the batch's
// one Postgres transaction after every marker was written. The other rows must still
// be completed (on their own), not left Prepare* for their producers' next calls to
// meet CONCURRENT_TRANSACTIONS.
func TestFinishBatchRefusedCompletionHoldsOnlyItsRow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tids := []string{"tx-a", "tx-poison", "tx-b"}
	for _, tid := range tids {
		pid, epoch := e.init(tid, 60000)
		if got := e.add(tid, pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
			t.Fatalf("AddPartitions(%s) = %v", tid, got)
		}
	}
	if _, err := e.st.Pool().Exec(ctx, `UPDATE transactions SET state = 'PrepareCommit'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Pool().Exec(ctx, `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'row refused' USING ERRCODE = 'check_violation'; END $$;
		CREATE TRIGGER refuse_poison BEFORE UPDATE ON transactions FOR EACH ROW
		WHEN (NEW.transactional_id = 'tx-poison' AND NEW.state LIKE 'Complete%') EXECUTE FUNCTION refuse_poison()`); err != nil {
		t.Fatal(err)
	}
	var reqs []*finishReq
	for _, tid := range tids {
		reqs = append(reqs, &finishReq{tid: tid, locked: make(chan struct{}), done: make(chan struct{})})
	}
	e.c.finishBatch(ctx, reqs)
	for _, r := range reqs {
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s's finish did not end", r.tid)
		}
	}
	for _, tid := range tids {
		want := StateCompleteCommit
		if tid == "tx-poison" {
			want = StatePrepareCommit
		}
		if st := e.state(tid); st.State != want {
			t.Errorf("%s: %s, want %s", tid, st.State, want)
		}
	}
}
