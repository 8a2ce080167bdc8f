package handler

import (
	"context"
	"sync"
)

// Turn orders work across the requests of one connection. Kafka answers one request at a
// time per connection, and idempotent producers rely on their batches reaching the log
// in the order they were sent. The gateway handles requests concurrently (so a long-poll
// Fetch does not hold up a Produce), and uses a chain of Turns to keep storage writes of
// one connection's produce requests in arrival order. A produce handler holds its Turn
// only until its batches are submitted to the connection's append stream (storage-core
// applies a stream's requests in order), not until they are durable, so a connection's
// pipelined produce requests share fsyncs.
type Turn struct {
	prev   <-chan struct{}
	done   chan struct{}
	once   sync.Once
	stream *appendStream
}

// TurnChain hands out Turns in arrival order and owns the connection's append stream
// to storage-core (opened on first use with the context of the first produce, which is
// the connection's; it ends with the connection). Not safe for concurrent use: the
// connection's reader goroutine calls Next.
type TurnChain struct {
	last   <-chan struct{}
	stream *appendStream
}

// Next returns the Turn after the previously handed-out one.
func (c *TurnChain) Next() *Turn {
	if c.stream == nil {
		c.stream = &appendStream{}
	}
	t := &Turn{prev: c.last, done: make(chan struct{}), stream: c.stream}
	c.last = t.done
	return t
}

// Wait blocks until every earlier Turn is finished, or ctx ends (then it returns ctx's
// error).
func (t *Turn) Wait(ctx context.Context) error {
	if t == nil || t.prev == nil {
		return nil
	}
	select {
	case <-t.prev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Finish marks the Turn done once every earlier Turn is done. It must be called at least
// once per Turn, whether or not Wait was called (later calls do nothing); it does not
// block.
func (t *Turn) Finish() {
	if t == nil {
		return
	}
	t.once.Do(t.finish)
}

func (t *Turn) finish() {
	if t.prev == nil {
		close(t.done)
		return
	}
	select {
	case <-t.prev:
		close(t.done)
	default:
		go func() {
			<-t.prev
			close(t.done)
		}()
	}
}
