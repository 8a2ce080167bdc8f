package handler

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestCoalescerStress: many callers on a few keys, some cancelled while they wait or
// while their call is in flight, the storage call sometimes short or slow: every
// caller that is not cancelled gets exactly the results of its own ids, every id of a
// caller that returned success was sent, and no lane is left behind (run with -race).
func TestCoalescerStress(t *testing.T) {
	var sent sync.Map // id -> times sent
	var calls atomic.Int64
	c := newCoalescer(func(ctx context.Context, key int, ids []string) ([]storagev1.AckResult, error) {
		calls.Add(1)
		if len(ids) > 7 {
			return nil, fmt.Errorf("batch of %d ids past the bound", len(ids))
		}
		select {
		case <-time.After(time.Duration(len(ids)%3) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out := make([]storagev1.AckResult, 0, len(ids))
		for _, id := range ids {
			n, _ := sent.LoadOrStore(id, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			out = append(out, storagev1.AckResult(len(id)%3))
		}
		if len(ids) > 2 && len(ids)%2 == 0 {
			out = out[:len(out)-1] // a short answer: the last one succeeded
		}
		return out, nil
	})
	c.max = 7
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < 200; i++ {
				ids := make([]string, 1+rnd.Intn(5))
				for j := range ids {
					ids[j] = fmt.Sprintf("%d-%d-%d%s", g, i, j, "xx"[:rnd.Intn(3)])
				}
				ctx, cancel := context.WithCancel(context.Background())
				if rnd.Intn(4) == 0 {
					time.AfterFunc(time.Duration(rnd.Intn(2000))*time.Microsecond, cancel)
				}
				res, err := c.do(ctx, rnd.Intn(3), ids)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("do failed without a cancel: %v", err)
					}
					continue
				}
				if len(res) != len(ids) {
					t.Errorf("%d results for %d ids", len(res), len(ids))
					continue
				}
				for j, id := range ids {
					// A short answer may have cut this id's result (the last of its
					// batch): success then.
					if want := storagev1.AckResult(len(id) % 3); res[j] != want && res[j] != storagev1.AckResult_ACK_RESULT_UNSPECIFIED {
						t.Errorf("id %s: result %v, want %v", id, res[j], want)
					}
					if n, ok := sent.Load(id); !ok || n.(*atomic.Int64).Load() != 1 {
						t.Errorf("id %s answered but sent %v times", id, n)
					}
				}
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; {
		c.mu.Lock()
		n := len(c.lanes)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lanes left", n)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d storage calls", calls.Load())
}
