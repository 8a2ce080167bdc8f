package handler

import (
	"context"
	"sync"
	"testing"
)

func TestTurnsRunInArrivalOrder(t *testing.T) {
	var chain TurnChain
	const n = 50
	turns := make([]*Turn, n)
	for i := range turns {
		turns[i] = chain.Next()
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	// Start them in reverse: each must still run after all earlier ones.
	for i := n - 1; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer turns[i].Finish()
			if err := turns[i].Wait(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v", order)
		}
	}
}

func TestTurnFinishWithoutWaitKeepsOrder(t *testing.T) {
	var chain TurnChain
	a, b, c := chain.Next(), chain.Next(), chain.Next()
	b.Finish() // b never waited, finishes before a
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Wait(ctx); err == nil {
		t.Fatal("c ran before a finished")
	}
	a.Finish()
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Finish()
	var nilTurn *Turn
	if err := nilTurn.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	nilTurn.Finish()
}
