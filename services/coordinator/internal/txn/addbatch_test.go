package txn

import (
	"context"
	"testing"
	"time"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// TestQuickAddBatch: one batch of adds writes those the one statement takes, never
// waits for a row another transaction holds (that add answers Skipped and nothing of
// it is written), and writes nothing for a fenced epoch (answered neither added nor
// skipped, for the locked path).
func TestQuickAddBatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	type prod struct {
		pid   int64
		epoch int32
	}
	ps := map[string]prod{}
	for _, tid := range []string{"tx-1", "tx-2", "tx-held", "tx-fenced"} {
		pid, epoch := e.init(tid, 60000)
		ps[tid] = prod{pid, epoch}
	}
	holder, err := e.st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM transactions WHERE transactional_id = 'tx-held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	adds := []store.TxnAdd{
		{ID: "tx-1", ProducerID: ps["tx-1"].pid, ProducerEpoch: ps["tx-1"].epoch, Partitions: []store.TxnPartition{tp("out", 0), tp("out", 1)}},
		{ID: "tx-held", ProducerID: ps["tx-held"].pid, ProducerEpoch: ps["tx-held"].epoch, Partitions: []store.TxnPartition{tp("out", 0)}},
		{ID: "tx-fenced", ProducerID: ps["tx-fenced"].pid, ProducerEpoch: ps["tx-fenced"].epoch - 1, Partitions: []store.TxnPartition{tp("out", 0)}},
		{ID: "tx-2", ProducerID: ps["tx-2"].pid, ProducerEpoch: ps["tx-2"].epoch, Partitions: []store.TxnPartition{tp("in", 2)}},
	}
	done := make(chan struct{})
	var got []store.TxnAdded
	go func() {
		defer close(done)
		got, err = e.st.QuickAddTxnPartitionsBatch(ctx, adds, time.UnixMilli(e.now.Load()))
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch waited for a row another transaction holds")
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []store.TxnAdded{{Added: true}, {Skipped: true}, {}, {Added: true}}
	if len(got) != len(want) {
		t.Fatalf("outcomes %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outcomes %+v, want %+v", got, want)
		}
	}
	if st := e.state("tx-1"); st.State != StateOngoing || len(st.Partitions) != 2 {
		t.Fatalf("tx-1: %+v", st)
	}
	if st := e.state("tx-2"); st.State != StateOngoing || len(st.Partitions) != 1 || st.Partitions[0] != tp("in", 2) {
		t.Fatalf("tx-2: %+v", st)
	}
	for _, tid := range []string{"tx-held", "tx-fenced"} {
		st, err := e.st.ReadTxn(ctx, tid) // unlocked: tx-held's row is held
		if err != nil {
			t.Fatal(err)
		}
		if st.State != StateEmpty || len(st.Partitions) != 0 {
			t.Fatalf("%s: %+v, want Empty without partitions", tid, st)
		}
	}
	// Through AddPartitions the skipped add is redone alone, waiting for the lock.
	added := make(chan []int16, 1)
	go func() {
		codes, err := e.c.AddPartitions(ctx, Partitions{TransactionalID: "tx-held", ProducerID: ps["tx-held"].pid,
			ProducerEpoch: ps["tx-held"].epoch, Topics: []store.TxnPartition{tp("out", 1)}})
		if err != nil {
			codes = nil
		}
		added <- codes
	}()
	select {
	case codes := <-added:
		t.Fatalf("AddPartitions answered %v while another transaction holds the row", codes)
	case <-time.After(300 * time.Millisecond):
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case codes := <-added:
		if !codesEqual(codes, 0) {
			t.Fatalf("AddPartitions after the lock = %v, want [0]", codes)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("AddPartitions did not answer once the row lock was free")
	}
	if st := e.state("tx-held"); st.State != StateOngoing || len(st.Partitions) != 1 || st.Partitions[0] != tp("out", 1) {
		t.Fatalf("tx-held: %+v", st)
	}
	if got := e.add("tx-fenced", ps["tx-fenced"].pid, ps["tx-fenced"].epoch-1, tp("out", 0)); !codesEqual(got, codeProducerFenced) {
		t.Fatalf("fenced AddPartitions = %v", got)
	}
}
