package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustMarker(t *testing.T, l *Log, m TxnMarker) AppendResult {
	t.Helper()
	r, err := l.WriteTxnMarker(m)
	if err != nil {
		t.Fatalf("marker %+v: %v", m, err)
	}
	return r
}

func committedValues(t *testing.T, l *Log, from int64) []string {
	t.Helper()
	recs, _, err := l.ReadCommitted(from, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	return out
}

// TestTxnLSOAndAbortedIndex: transactional batches hold the LSO at their first offset
// until their marker; aborts enter the index; read_committed readers stop at the LSO
// and skip aborted records and markers; all of it survives a reopen, from the
// snapshot and without it.
func TestTxnLSOAndAbortedIndex(t *testing.T) {
	for _, mode := range []string{"reopen", "snapshot", "rescan"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, nil)
			l := mustCreate(t, s, "txn", ChannelConfig{SegmentBytes: 1 << 20})
			if l.txn.Load() != nil {
				t.Fatal("txn state on a fresh channel")
			}
			mustAppend(t, l, kbatch(t, batchOpt{}, "plain0"))                                      // 0
			mustAppend(t, l, kbatch(t, batchOpt{pid: 1, epoch: 0, seq: 0, txn: true}, "a1", "a2")) // 1-2
			mustAppend(t, l, kbatch(t, batchOpt{}, "plain3"))                                      // 3
			if got := l.LastStable(); got != 1 {
				t.Fatalf("LSO %d, want 1", got)
			}
			if got := committedValues(t, l, 0); !reflect.DeepEqual(got, []string{"plain0"}) {
				t.Fatalf("committed %v", got)
			}
			raw, err := l.ReadRawUpTo(0, 1<<20, l.LastStable(), nil)
			if err != nil || FramesEnd(raw) != 1 {
				t.Fatalf("raw up to LSO ends at %d (%v)", FramesEnd(raw), err)
			}
			mustAppend(t, l, kbatch(t, batchOpt{pid: 2, epoch: 0, seq: 0, txn: true}, "c5")) // 4
			if r := mustMarker(t, l, TxnMarker{ProducerID: 1, ProducerEpoch: 0, CoordinatorEpoch: 1}); r.Duplicate || r.BaseOffset != 5 {
				t.Fatalf("abort marker %+v", r)
			}
			if got := l.LastStable(); got != 4 {
				t.Fatalf("LSO %d, want 4 (pid 2 still open)", got)
			}
			if r := mustMarker(t, l, TxnMarker{ProducerID: 2, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 1}); r.BaseOffset != 6 {
				t.Fatalf("commit marker %+v", r)
			}
			// A retried marker writes nothing.
			if r := mustMarker(t, l, TxnMarker{ProducerID: 2, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 1}); !r.Duplicate || l.HighWatermark() != 7 {
				t.Fatalf("retried marker %+v, hw %d", r, l.HighWatermark())
			}
			mustAppend(t, l, kbatch(t, batchOpt{pid: 3, epoch: 0, seq: 0, txn: true}, "open7")) // 7

			check := func(l *Log) {
				t.Helper()
				if got := l.LastStable(); got != 7 {
					t.Fatalf("LSO %d, want 7", got)
				}
				if got, want := l.AbortedTxns(0, 8), []AbortedTxn{{ProducerID: 1, FirstOffset: 1}}; !reflect.DeepEqual(got, want) {
					t.Fatalf("aborted %v, want %v", got, want)
				}
				if got := l.AbortedTxns(6, 8); len(got) != 0 {
					t.Fatalf("aborted after the marker: %v", got)
				}
				if got, want := committedValues(t, l, 0), []string{"plain0", "plain3", "c5"}; !reflect.DeepEqual(got, want) {
					t.Fatalf("committed %v, want %v", got, want)
				}
				var unc []string
				for _, r := range readAll(t, l, 0) {
					unc = append(unc, string(r.Value))
				}
				if want := []string{"plain0", "a1", "a2", "plain3", "c5", "open7"}; !reflect.DeepEqual(unc, want) {
					t.Fatalf("uncommitted %v, want %v (no markers)", unc, want)
				}
				ps := l.Producers()
				if len(ps) != 3 || ps[0].CoordinatorEpoch != 1 || ps[0].TxnFirstOffset != -1 || ps[2].TxnFirstOffset != 7 || ps[2].CoordinatorEpoch != -1 {
					t.Fatalf("producers %+v", ps)
				}
			}
			check(l)
			ldir := l.dir
			if mode != "reopen" {
				// Roll: the snapshot then carries the transaction state.
				l.mu.Lock()
				if err := l.rollLocked(s.nowMs()); err != nil {
					t.Fatal(err)
				}
				l.mu.Unlock()
			}
			_ = s.Close()
			if mode == "rescan" {
				matches, _ := filepath.Glob(filepath.Join(ldir, "*.snapshot"))
				for _, m := range matches {
					_ = os.Remove(m)
				}
			}
			s = openStore(t, dir, nil)
			defer s.Close()
			l, _ = s.Get("txn")
			check(l)
			mustMarker(t, l, TxnMarker{ProducerID: 3, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 1})
			if got := l.LastStable(); got != l.HighWatermark() {
				t.Fatalf("LSO %d, hw %d", got, l.HighWatermark())
			}
		})
	}
}

// TestTxnEndedPruned: markers nobody reads the LSO after are not kept once durable.
func TestTxnEndedPruned(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "pruned", ChannelConfig{})
	for i := int32(0); i < 50; i++ {
		mustAppend(t, l, kbatch(t, batchOpt{pid: 1, epoch: 0, seq: i, txn: true}, "x"))
		mustMarker(t, l, TxnMarker{ProducerID: 1, Commit: true})
	}
	tx := l.txn.Load()
	tx.mu.Lock()
	n := len(tx.ended)
	tx.mu.Unlock()
	if n > 1 {
		t.Fatalf("%d ended transactions kept", n)
	}
}

// TestTxnFencing: old producer epochs are refused on transactional batches and
// markers, a marker's newer epoch becomes the producer's, and an older coordinator
// epoch is fenced.
func TestTxnFencing(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "fence", ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{pid: 4, epoch: 2, seq: 0, txn: true}, "x"))
	if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: 4, ProducerEpoch: 1, Commit: true}); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("old marker epoch: %v", err)
	}
	// KIP-890: the marker bumps the epoch.
	mustMarker(t, l, TxnMarker{ProducerID: 4, ProducerEpoch: 3, Commit: true, CoordinatorEpoch: 5})
	if _, err := l.AppendBatches(kbatch(t, batchOpt{pid: 4, epoch: 2, seq: 1, txn: true}, "zombie")); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("zombie batch: %v", err)
	}
	mustAppend(t, l, kbatch(t, batchOpt{pid: 4, epoch: 3, seq: 0, txn: true}, "y"))
	// A lower coordinator epoch is not fenced (coordinators have no generations): the
	// marker ends the transaction.
	mustMarker(t, l, TxnMarker{ProducerID: 4, ProducerEpoch: 3, Commit: true, CoordinatorEpoch: 4})
	mustAppend(t, l, kbatch(t, batchOpt{pid: 4, epoch: 3, seq: 1, txn: true}, "y2"))
	if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad producer: %v", err)
	}
	if got := l.LastStable(); got != 4 {
		t.Fatalf("LSO %d, want 4", got)
	}
	// Kafka: a producer with an open transaction writes only transactional batches.
	if _, err := l.AppendBatches(kbatch(t, batchOpt{pid: 4, epoch: 3, seq: 2}, "plain")); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("non-transactional batch in a transaction: %v", err)
	}
	mustMarker(t, l, TxnMarker{ProducerID: 4, ProducerEpoch: 3, CoordinatorEpoch: 5})
	if got := fmt.Sprint(l.AbortedTxns(0, 10)); got != "[{4 4}]" {
		t.Fatalf("aborted %s", got)
	}
}

// TestTxnWaitStable: a read_committed long poll waits for the LSO, not the high
// watermark, and wakes when a marker moves it.
func TestTxnWaitStable(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "wait", ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{pid: 1, epoch: 0, seq: 0, txn: true}, "x"))
	if l.HighWatermark() != 1 || l.WaitStable(context.Background(), 0, 0) {
		t.Fatalf("stable data reported with the transaction open (hw %d, LSO %d)", l.HighWatermark(), l.LastStable())
	}
	done := make(chan bool, 1)
	go func() { done <- l.WaitStable(context.Background(), 0, time.Minute) }()
	mustMarker(t, l, TxnMarker{ProducerID: 1, Commit: true})
	if !<-done {
		t.Fatal("WaitStable ended without the LSO passing 0")
	}
}

// TestTxnConcurrent: producers appending transactions and writing markers while
// readers fetch at read_committed (run with -race): readers never see a record at or
// past the LSO or of an aborted transaction, and at the end every committed record
// and no other is readable.
func TestTxnConcurrent(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "conc", ChannelConfig{SegmentBytes: 4096})
	const producers, txns = 4, 40
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, producers+2)
	for p := int64(1); p <= producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := int32(0)
			for i := 0; i < txns; i++ {
				commit := i%3 != 0
				v := fmt.Sprintf("p%d-%d-%v", p, i, commit)
				if _, err := l.AppendBatches(kbatch(t, batchOpt{pid: p, epoch: 0, seq: seq, txn: true}, v, v)); err != nil {
					errs <- err
					return
				}
				seq += 2
				if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: p, Commit: commit}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var rwg sync.WaitGroup
	for r := 0; r < 2; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				lso := l.LastStable()
				recs, _, err := l.ReadCommitted(0, 1<<20, 1<<30)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range recs {
					if strings.HasSuffix(string(r.Value), "false") {
						errs <- fmt.Errorf("aborted record %s at %d read", r.Value, r.Offset)
						return
					}
					if r.Offset >= l.LastStable() || r.Offset < 0 {
						errs <- fmt.Errorf("record %d past the LSO %d", r.Offset, lso)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if l.LastStable() != l.HighWatermark() {
		t.Fatalf("LSO %d, hw %d with every transaction ended", l.LastStable(), l.HighWatermark())
	}
	recs, _, err := l.ReadCommitted(0, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := 0; i < txns; i++ {
		if i%3 != 0 {
			want += 2 * producers
		}
	}
	if len(recs) != want {
		t.Fatalf("%d committed records, want %d", len(recs), want)
	}
	if got := len(l.AbortedTxns(0, l.HighWatermark())); got != producers*((txns+2)/3) {
		t.Fatalf("%d aborted transactions, want %d", got, producers*((txns+2)/3))
	}
}
