package server

import (
	"context"
	"sync"
)

// budget bounds the bytes of request frames held in memory by all connections at once
// (Kafka's queued.max.request.bytes). A reader waits for room before allocating a frame;
// a frame larger than the whole budget is admitted when nothing else is held, so every
// frame up to the frame limit can be served.
type budget struct {
	max int64

	mu   sync.Mutex
	used int64
	wake chan struct{}
}

func newBudget(max int64) *budget { return &budget{max: max, wake: make(chan struct{})} }

// acquire reserves n bytes, waiting until they fit or ctx ends. A nil budget (frames
// read before SASL authentication) reserves nothing.
func (b *budget) acquire(ctx context.Context, n int64) error {
	if b == nil {
		return nil
	}
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns n bytes and wakes waiting readers (nothing for a nil budget).
func (b *budget) release(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
