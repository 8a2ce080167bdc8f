package txn

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// logMarkers is a MarkerWriter that keeps, per partition, the log of data and markers
// in the order they happened, so that the test can tell which marker ended which
// transaction's records: a producer's records are ended by the next marker of that
// producer id in the partition. Some calls fail as a whole, some markers are refused.
type logMarkers struct {
	mu      sync.Mutex
	log     map[store.TxnPartition][]logEvent
	rng     *rand.Rand
	failPct int
	calls   atomic.Int64
}

type logEvent struct {
	pid    int64
	epoch  int32
	key    string // data: the transaction it belongs to; "" for a marker
	commit bool
}

// data appends a transactional produce of key's records, refused (false) as
// storage-core refuses it when a marker of a newer epoch of the producer is in the
// partition (the producer was fenced after its add answered).
func (l *logMarkers) data(p store.TxnPartition, pid int64, epoch int32, key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.log[p] {
		if ev.key == "" && ev.pid == pid && ev.epoch > epoch {
			return false
		}
	}
	l.log[p] = append(l.log[p], logEvent{pid: pid, epoch: epoch, key: key})
	return true
}

func (l *logMarkers) WriteMarkers(_ context.Context, ms []Marker) ([]int16, error) {
	l.calls.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rng.IntN(100) < l.failPct {
		return nil, errStorageDown
	}
	codes := make([]int16, len(ms))
	for i, m := range ms {
		if l.rng.IntN(100) < l.failPct {
			codes[i] = 56 // KAFKA_STORAGE_ERROR
			continue
		}
		p := store.TxnPartition{Topic: m.Topic, Partition: m.Partition}
		l.log[p] = append(l.log[p], logEvent{pid: m.ProducerID, epoch: m.ProducerEpoch, commit: m.Commit})
	}
	return codes, nil
}

// TestTwoReplicasProducersFencersAndSweep: producers spread over two coordinator
// replicas on one database (each its own pool of 16 connections) run transactions
// (calls to either replica at random, v4 and v5 EndTxn, offsets in some), while a
// fencer calls InitProducerId on random ids, markers fail now and then (whole calls
// and single markers) and both replicas sweep. Every transaction's records must be
// ended by exactly the outcome its producer was told: COMMIT after EndTxn(commit)
// answered NONE, ABORT after an abort or a fence, never a commit of a fenced
// transaction; the group's committed offset is the last committed transaction's.
func TestTwoReplicasProducersFencersAndSweep(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	lm := &logMarkers{log: map[store.TxnPartition][]logEvent{}, rng: rand.New(rand.NewPCG(1, 2)), failPct: 3}
	st2, err := store.Open(e.st.Pool().Config().ConnString(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	var nextPID atomic.Int64
	nextPID.Store(5000)
	var timeouts atomic.Int64
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel),
		zap.Hooks(func(en zapcore.Entry) error {
			if en.Message == "transaction timed out, aborting" {
				timeouts.Add(1)
			}
			return nil
		}))
	mk := func(st *store.Store) *Coordinator {
		return New(Config{}, Deps{Store: st, Markers: lm, Log: log,
			NextProducerID: func(context.Context) (int64, error) { return nextPID.Add(1), nil },
			Now:            func() time.Time { return time.UnixMilli(e.now.Load()) }})
	}
	reps := []*Coordinator{mk(e.st), mk(st2)}
	defer func() {
		for _, c := range reps {
			c.Close()
		}
	}()
	const producers, txns = 64, 12
	type outcome struct {
		key    string
		commit bool // the outcome the producer was told (fenced: abort)
		known  bool // false: the answer was an error, either outcome is right
		bump   bool // EndTxn v5: its markers carry the epoch after the records'
		group  string
		offset int64
	}
	var (
		omu      sync.Mutex
		outcomes = map[string]*outcome{}
		lastOff  = map[string]int64{}
		failures atomic.Int64
	)
	stop := make(chan struct{})
	var bgWG sync.WaitGroup
	// Both replicas sweep (in production only the lock holder does; two at once is
	// harsher and must stay correct), and the clock runs fast: a transaction open
	// for more than about 30 ms of the test's time times out (45 s) and is aborted
	// by a sweep, racing its producer's adds and end.
	for i, c := range reps {
		bgWG.Add(1)
		go func() {
			defer bgWG.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if i == 0 {
					e.advance(30 * time.Second)
				}
				_ = c.Sweep(ctx, time.UnixMilli(e.now.Load()))
			}
		}()
	}
	// The fencer: InitProducerId on a random id, on a random replica.
	bgWG.Add(1)
	var fences atomic.Int64
	go func() {
		defer bgWG.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			tid := fmt.Sprintf("tx-r-%02d", rng.IntN(producers))
			if code, _, _, err := reps[rng.IntN(2)].InitProducerID(ctx, tid, 60000, -1, -1); err == nil && code == 0 {
				fences.Add(1)
			}
		}
	}()
	parts := []store.TxnPartition{tp("out", 0), tp("out", 1), tp("in", 0), tp("in", 1), tp("in", 2)}
	var wg sync.WaitGroup
	for i := 0; i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			tid := fmt.Sprintf("tx-r-%02d", i)
			group := "g-" + tid
			rep := func() *Coordinator { return reps[rng.IntN(2)] }
			var pid int64
			var epoch int32
			init := func() bool {
				for try := 0; try < 200; try++ {
					code, p, ep, err := rep().InitProducerID(ctx, tid, 45000, -1, -1)
					if err == nil && code == 0 {
						pid, epoch = p, ep
						return true
					}
					time.Sleep(2 * time.Millisecond)
				}
				failures.Add(1)
				return false
			}
			if !init() {
				return
			}
			for n := 0; n < txns; n++ {
				key := fmt.Sprintf("%s/%d", tid, n)
				o := &outcome{key: key, known: true}
				var used []store.TxnPartition
				fenced := false
				for _, p := range parts {
					if rng.IntN(2) == 0 {
						continue
					}
					var codes []int16
					for try := 0; try < 200; try++ {
						var err error
						codes, err = rep().AddPartitions(ctx, Partitions{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch, Topics: []store.TxnPartition{p}})
						if err != nil {
							codes = []int16{-100}
						}
						if codes[0] != codeConcurrentTransactions && codes[0] != -100 {
							break
						}
						time.Sleep(2 * time.Millisecond)
					}
					if codes[0] != 0 {
						fenced = true
						break
					}
					// The produce, after the add answered.
					if !lm.data(p, pid, epoch, key) {
						fenced = true
						break
					}
					used = append(used, p)
				}
				if !fenced && rng.IntN(3) == 0 {
					code, err := rep().AddOffsets(ctx, tid, pid, epoch, group)
					if err == nil && code == 0 {
						off := int64(n*10 + 1)
						codes, err := rep().TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: tid, Group: group, ProducerID: pid,
							ProducerEpoch: epoch, Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: off, LeaderEpoch: -1}}})
						if err == nil && len(codes) == 1 && codes[0] == 0 {
							o.group, o.offset = group, off
						} else {
							fenced = true
						}
					} else {
						fenced = true
					}
				}
				if len(used) == 0 && o.group == "" {
					if fenced && !init() {
						return
					}
					continue
				}
				if fenced {
					o.commit = false
					omu.Lock()
					outcomes[key] = o
					omu.Unlock()
					if !init() {
						return
					}
					continue
				}
				commit := rng.IntN(4) != 0
				bump := rng.IntN(2) == 0
				var code int16
				var np int64
				var ne int32
				var err error
				// Now and then a new instance of the producer races the end
				// (InitProducerId on another replica): either order is right, but
				// a fenced end never commits.
				var race chan struct{}
				if rng.IntN(5) == 0 {
					race = make(chan struct{})
					other := rep()
					go func() {
						defer close(race)
						for try := 0; try < 200; try++ {
							if code, _, _, err := other.InitProducerID(ctx, tid, 60000, -1, -1); err == nil && code == 0 {
								return
							}
							time.Sleep(time.Millisecond)
						}
					}()
				}
				for try := 0; try < 200; try++ {
					code, np, ne, err = rep().EndTxn(ctx, tid, pid, epoch, commit, bump)
					if err == nil && code != codeConcurrentTransactions {
						break
					}
					time.Sleep(2 * time.Millisecond)
				}
				switch {
				case err != nil:
					o.known = false
				case code == 0:
					o.commit = commit
				default:
					o.commit = false // fenced (or the timeout's abort)
				}
				omu.Lock()
				outcomes[key] = o
				if o.known && o.commit && o.group != "" {
					lastOff[group] = o.offset
				}
				omu.Unlock()
				o.bump = bump
				if race != nil {
					<-race
					code = -1 // fenced by the new instance either way
				}
				if err == nil && code == 0 {
					pid, epoch = np, ne
				} else if !init() {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bgWG.Wait()
	for _, c := range reps {
		c.Close()
	}
	// Finish what failed markers left behind (failures off).
	lm.mu.Lock()
	lm.failPct = 0
	lm.mu.Unlock()
	for i := 0; i < 5; i++ {
		if err := reps[0].Sweep(ctx, time.UnixMilli(e.now.Load())); err != nil {
			t.Fatalf("final sweep: %v", err)
		}
	}
	if n := failures.Load(); n > 0 {
		t.Errorf("%d producers could not get a producer id", n)
	}
	var open int
	if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM transactions WHERE state NOT IN ('Empty', 'CompleteCommit', 'CompleteAbort', 'Ongoing')`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Errorf("%d transactions still Prepare* after the final sweeps", open)
	}
	// Replay each partition's log: a record is ended by the next marker of its
	// producer id.
	lm.mu.Lock()
	defer lm.mu.Unlock()
	ended := map[string]map[bool]int{} // key -> outcome -> partitions ended so
	checked := 0
	dataEpoch := map[store.TxnPartition]map[string]int32{}
	for p, evs := range lm.log {
		openKey := map[int64]string{}
		for _, ev := range evs {
			if ev.key != "" {
				if dataEpoch[p] == nil {
					dataEpoch[p] = map[string]int32{}
				}
				dataEpoch[p][ev.key] = ev.epoch
				if k, ok := openKey[ev.pid]; ok && k != ev.key {
					t.Errorf("%v: records of %s while %s of the same producer id %d is still open", p, ev.key, k, ev.pid)
				}
				openKey[ev.pid] = ev.key
				continue
			}
			k, ok := openKey[ev.pid]
			if !ok {
				continue // a marker written again (markers are idempotent)
			}
			delete(openKey, ev.pid)
			if ended[k] == nil {
				ended[k] = map[bool]int{}
			}
			ended[k][ev.commit]++
			o := outcomes[k]
			if o == nil {
				t.Errorf("%v: records of %s ended by a marker but the producer never ended it", p, k)
				continue
			}
			checked++
			if o.known && o.commit != ev.commit {
				t.Errorf("%v: %s ended by commit=%v, the producer was told commit=%v", p, k, ev.commit, o.commit)
			}
			if want := dataEpoch[p][k] + btoi(o.bump); ev.commit && ev.epoch != want {
				t.Errorf("%v: %s committed at epoch %d, its records at %d (bump %v): a fenced producer's commit",
					p, k, ev.epoch, dataEpoch[p][k], o.bump)
			}
		}
		for pid, k := range openKey {
			// The last transaction of a producer fenced at its very end stays
			// Ongoing until it times out; anything the producer was told ended
			// must be ended in the log.
			if o := outcomes[k]; o != nil && o.known && o.commit {
				t.Errorf("%v: committed %s (producer id %d) has no marker", p, k, pid)
			}
		}
	}
	var ncommit int
	for _, o := range outcomes {
		if o.known && o.commit {
			ncommit++
		}
	}
	for group, want := range lastOff {
		var got int64 = -1
		_ = e.st.Pool().QueryRow(ctx, `SELECT committed_offset FROM consumer_group_offsets WHERE group_id = $1`, group).Scan(&got)
		// A later transaction with offsets whose outcome is unknown may have
		// committed: only a lower offset than the last committed one is wrong.
		if got < want {
			t.Errorf("%s: committed offset %d, want at least %d (last committed transaction)", group, got, want)
		}
		for _, o := range outcomes {
			if o.group == group && o.offset == got && o.known && !o.commit {
				t.Errorf("%s: committed offset %d is of aborted %s", group, got, o.key)
			}
		}
	}
	t.Logf("%d transactions (%d committed), %d partition endings checked, %d fences, %d timeouts, %d WriteMarkers calls",
		len(outcomes), ncommit, checked, fences.Load(), timeouts.Load(), lm.calls.Load())
}

func btoi(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
