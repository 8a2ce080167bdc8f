package server

import (
	"context"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire(ctx, 40); err != nil {
		t.Fatal(err)
	}
	// Full: a third acquire waits until a release.
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, 50) }()
	select {
	case err := <-got:
		t.Fatalf("acquire over budget returned %v without waiting", err)
	case <-time.After(20 * time.Millisecond):
	}
	b.release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Cancellation ends a wait.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.acquire(cctx, 80); err == nil {
		t.Fatal("acquire with a cancelled context succeeded over budget")
	}
	b.release(40)
	b.release(50)
	// A frame larger than the whole budget passes when nothing else is held.
	if err := b.acquire(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	b.release(1000)
}
