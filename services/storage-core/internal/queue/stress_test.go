package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

func fds(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(es)
}

func TestAttackCreateDeleteCycles(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	publish(t, src, "a")
	cycle := func() {
		q := e.queue("gcp.sub.c", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
		receive(t, q, 10, 1)
		done := make(chan error, 1)
		go func() { _, err := q.Receive(context.Background(), 10, 0, 0, time.Minute); done <- err }()
		if err := e.m.Delete("gcp.sub.c", false); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err == nil {
			t.Fatal("long poll survived the delete")
		}
	}
	for i := 0; i < 5; i++ {
		cycle()
	}
	time.Sleep(100 * time.Millisecond)
	f0, g0 := fds(t), runtime.NumGoroutine()
	for i := 0; i < 100; i++ {
		cycle()
	}
	time.Sleep(200 * time.Millisecond)
	f1, g1 := fds(t), runtime.NumGoroutine()
	t.Logf("fds %d -> %d, goroutines %d -> %d", f0, f1, g0, g1)
	if f1 > f0+5 || g1 > g0+10 {
		t.Fatalf("leak: fds %d -> %d, goroutines %d -> %d", f0, f1, g0, g1)
	}
}

// Ordering keys with concurrent receivers, nacks and expiry: never two leased per
// key, per-key order of first deliveries kept, and dead-lettering under load:
// each message either acked or dead-lettered exactly once.
func TestAttackOrderingAndDeadLetterUnderLoad(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	dead := e.log("gcp.dead")
	q := e.queue("gcp.sub.s", Config{ExactlyOnce: true, OrderingKeyHeader: "k", DeadLetter: &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 3}},
		Binding{Source: "gcp.t", StartSequence: 1})
	const keys, per = 10, 60
	for i := 0; i < per; i++ {
		recs := make([]store.NewRecord, keys)
		for k := range recs {
			recs[k] = store.NewRecord{Value: []byte(fmt.Sprintf("%d/%d", k, i)), Headers: []store.Header{{Key: "k", Value: []byte(fmt.Sprint(k))}}}
		}
		if _, _, err := src.Append(recs); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	acked := map[string]int{}
	lastAcked := map[string]int{}
	var bad atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 6; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ds, err := q.Receive(context.Background(), 5, 0, 0, 20*time.Millisecond)
				if err != nil {
					bad.Store(err.Error())
					return
				}
				for _, d := range ds {
					var k, i int
					fmt.Sscanf(string(d.Record.Value), "%d/%d", &k, &i)
					key := fmt.Sprint(k)
					switch (n + r + i) % 4 {
					case 0: // nack
						if _, err := q.ModifyAckDeadline([]string{d.AckID}, 0); err != nil {
							bad.Store(err.Error())
						}
					case 1: // let it expire
						e.clk.add(11 * time.Second)
						e.m.Sweep()
					default:
						rs, err := q.Ack([]string{d.AckID})
						if err != nil {
							bad.Store(err.Error())
						}
						if rs[0] == AckOK {
							mu.Lock()
							if i < lastAcked[key] {
								bad.Store(fmt.Sprintf("key %s: %d acked after %d", key, i, lastAcked[key]))
							}
							acked[string(d.Record.Value)]++
							lastAcked[key] = max(lastAcked[key], i)
							mu.Unlock()
						}
					}
				}
			}
		}(r)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && q.Info().Backlog > 0 {
		time.Sleep(5 * time.Millisecond)
		q.mu.Lock()
		held := map[string]bool{}
		for _, m := range q.pending {
			if m.key != "" && m.state == stLeased {
				if held[m.key] {
					bad.Store("key " + m.key + " leased twice")
				}
				held[m.key] = true
			}
		}
		q.mu.Unlock()
		e.clk.add(11 * time.Second)
		e.m.Sweep()
	}
	close(stop)
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	recs, _, err := dead.ReadRecords(0, 10000, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	dl := map[string]int{}
	for _, r := range recs {
		dl[string(r.Value)]++
	}
	for k := 0; k < keys; k++ {
		for i := 0; i < per; i++ {
			v := fmt.Sprintf("%d/%d", k, i)
			if dl[v] > 1 || dl[v] == 1 && acked[v] > 0 || dl[v]+acked[v] == 0 {
				t.Errorf("%s: dead-lettered %d acked %d", v, dl[v], acked[v])
			}
		}
	}
	t.Logf("dead-lettered %d, backlog %d", len(recs), q.Info().Backlog)
}

// Long polls, acks and nacks racing Purge, Seek (time, snapshot), snapshot churn,
// UpdateConfig, Detach and Delete: no panic, no hang, only the documented errors.
func TestAttackChaos(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{Retry: &RetryPolicy{MinBackoffMs: 1, MaxBackoffMs: 5}}, Binding{Source: "gcp.t", StartSequence: 1})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var unexpected atomic.Value
	okErr := func(err error) bool {
		return err == nil || errorsIs(err, ErrNotFound, ErrDetached, ErrClosed, ErrSnapshotNotFound, ErrSnapshotExists)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			publish(t, src, fmt.Sprint(i))
		}
	}()
	var recvWG sync.WaitGroup
	for r := 0; r < 8; r++ {
		recvWG.Add(1)
		go func(r int) {
			defer recvWG.Done()
			for n := 0; ; n++ {
				ds, err := q.Receive(context.Background(), 1+n%20, int64(n%3), 0, 200*time.Millisecond)
				if err != nil {
					if !okErr(err) {
						unexpected.Store(err.Error())
					}
					return
				}
				if n%2 == 0 {
					_, err = q.Ack(ackIDs(ds))
				} else {
					_, err = q.ModifyAckDeadline(ackIDs(ds), 0)
				}
				if !okErr(err) {
					unexpected.Store(err.Error())
				}
			}
		}(r)
	}
	for i := 0; i < 60; i++ {
		var err error
		switch i % 6 {
		case 0:
			err = q.Purge()
		case 1:
			err = q.SeekTime(0, i%12 == 1)
		case 2:
			_, err = q.CreateSnapshot(fmt.Sprint("snap", i%12))
		case 3:
			err = q.SeekSnapshot(fmt.Sprint("snap", (i-1)%12))
		case 4:
			err = e.m.DeleteSnapshot(fmt.Sprint("snap", (i-2)%12))
		case 5:
			_, err = q.UpdateConfig(Config{OrderingKeyHeader: fmt.Sprint("v", i%2)}, []string{"ordering_key_header"})
		}
		if !okErr(err) {
			t.Fatalf("op %d: %v", i, err)
		}
		e.clk.add(time.Second)
		e.m.Sweep()
		e.m.Maintain()
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.m.Detach("gcp.sub.s"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete("gcp.sub.s", false); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { recvWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("receivers hang after delete")
	}
	close(stop)
	wg.Wait()
	if u := unexpected.Load(); u != nil {
		t.Fatal(u)
	}
}

func errorsIs(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// DeleteChannel racing CreateQueue of the same name never leaves a queue without its
// log.
func TestDeleteChannelRacingCreate(t *testing.T) {
	e := newEnv(t)
	e.log("gcp.t")
	for i := 0; i < 100; i++ {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _, _ = e.m.Create("gcp.sub.r", Config{}, []Binding{{Source: "gcp.t"}}, true)
		}()
		go func() {
			defer wg.Done()
			_ = e.m.DeleteChannel("gcp.sub.r", true)
		}()
		wg.Wait()
		if q, err := e.m.Get("gcp.sub.r"); err == nil {
			if l, err := e.st.Get("gcp.sub.r"); err != nil || l != q.log {
				t.Fatalf("queue without its log: %v", err)
			}
		}
	}
	if err := e.m.DeleteChannel("gcp.t", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Get("gcp.t"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("log after DeleteChannel: %v", err)
	}
}
