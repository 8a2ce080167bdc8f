package handler

import (
	"context"
	"slices"
	"sync"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Ack coalescing. The Go client flushes its acks every 100 ms and splits them into
// batches of 1000 ack ids sent as concurrent Acknowledge RPCs (its receipt modacks
// likewise, one deadline per batch), with the ids in random order. Passed on one for
// one, each batch would cost storage-core its own RPC, turn at the queue's lock and
// state-file write, and the scattered offsets would fragment the queue's acked spans.
// So the handler sends storage-core at most one Ack per queue at a time from this
// replica (and one ModifyAckDeadline per queue and deadline): a call arriving while
// none is in flight goes out at once; calls arriving meanwhile wait and then go out
// together as one storage call, their ids concatenated in arrival order, each caller
// getting back the results of its own ids.
const (
	// maxAckBatch is the most ack ids one coalesced storage call carries; a bigger
	// batch is sent in turns. storage-core sets no bound on Ack and ModifyAckDeadline
	// (GetLeases takes at most queue.MaxLeaseQuery, 10000), but holds the queue's lock
	// for a whole call, so calls stay that size.
	maxAckBatch = 10_000
	// ackCallTimeout bounds one coalesced storage call: the Go client's own timeout for
	// an Acknowledge or ModifyAckDeadline RPC (StreamingPull acks carry no deadline).
	ackCallTimeout = 60 * time.Second
)

// ackCall is one storage call on ack ids (Ack, or ModifyAckDeadline with the deadline
// in its key); it returns one result per id, in order, or fewer (the missing ones
// succeeded).
type ackCall[K comparable] func(ctx context.Context, key K, ids []string) ([]storagev1.AckResult, error)

// coalescer runs ack calls so that at most one per key is in flight, joining the calls
// that arrive meanwhile (see the section comment above).
//
// Errors: when a storage call fails, every caller whose ids it carried gets that error.
// A caller whose ctx ends returns ctx's error at once: while its ids wait they are
// dropped, once sent the call goes on for the others. The storage call therefore does
// not run under any one caller's ctx: it runs under context.WithoutCancel of its first
// caller's (for the values) bounded by ackCallTimeout, and is cancelled as soon as the
// last of its callers stopped waiting, so it never outlives all of them (shutdown
// cancels the callers) and the next batch need not wait for an answer nobody reads.
type coalescer[K comparable] struct {
	call ackCall[K]
	max  int // maxAckBatch (tests lower it)

	mu    sync.Mutex
	lanes map[K]*ackLane // a lane exists while its sender runs
}

// ackLane holds the callers of one key waiting for the call in flight to end.
type ackLane struct {
	pending []*ackWaiter
}

type ackWaiter struct {
	ctx  context.Context
	ids  []string
	done chan struct{} // closed once res and err are set
	res  []storagev1.AckResult
	err  error
	// flight is the storage call carrying ids (nil while they wait; under mu).
	flight *ackFlight
}

// ackFlight is one storage call in flight and how many of its callers still wait.
type ackFlight struct {
	waiting int
	cancel  context.CancelFunc
}

func newCoalescer[K comparable](call ackCall[K]) *coalescer[K] {
	return &coalescer[K]{call: call, max: maxAckBatch, lanes: map[K]*ackLane{}}
}

// do applies the call to ids, joined with the other calls of key that wait, and
// returns one result per id of ids, or the error.
func (c *coalescer[K]) do(ctx context.Context, key K, ids []string) ([]storagev1.AckResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &ackWaiter{ctx: ctx, ids: ids, done: make(chan struct{})}
	c.mu.Lock()
	l, busy := c.lanes[key]
	if !busy {
		l = &ackLane{}
		c.lanes[key] = l
	}
	l.pending = append(l.pending, w)
	c.mu.Unlock()
	if !busy {
		go c.run(key, l)
	}
	select {
	case <-w.done:
		return w.res, w.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-w.done: // answered meanwhile: the call took effect
		return w.res, w.err
	default:
	}
	if w.flight == nil {
		l.pending = slices.DeleteFunc(l.pending, func(x *ackWaiter) bool { return x == w })
	} else if w.flight.waiting--; w.flight.waiting == 0 {
		w.flight.cancel()
	}
	return nil, ctx.Err()
}

// run is key's sender: it sends what waits in l, one storage call at a time, until
// nothing does, then removes the lane.
func (c *coalescer[K]) run(key K, l *ackLane) {
	for {
		c.mu.Lock()
		if len(l.pending) == 0 {
			delete(c.lanes, key)
			c.mu.Unlock()
			return
		}
		n, total := 0, 0
		for n < len(l.pending) && (n == 0 || total+len(l.pending[n].ids) <= c.max) {
			total += len(l.pending[n].ids)
			n++
		}
		batch := slices.Clone(l.pending[:n])
		l.pending = slices.Delete(l.pending, 0, n)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), ackCallTimeout)
		f := &ackFlight{waiting: len(batch), cancel: cancel}
		for _, w := range batch {
			w.flight = f
		}
		c.mu.Unlock()

		ids := make([]string, 0, total)
		for _, w := range batch {
			ids = append(ids, w.ids...)
		}
		res, err := c.send(ctx, key, ids)
		cancel()
		off := 0
		for _, w := range batch {
			if err != nil {
				w.err = err
			} else {
				w.res = res[off : off+len(w.ids) : off+len(w.ids)]
			}
			off += len(w.ids)
			close(w.done)
		}
	}
}

// send calls the storage call on ids in turns of at most c.max and returns exactly
// one result per id (missing ones filled in as success).
func (c *coalescer[K]) send(ctx context.Context, key K, ids []string) ([]storagev1.AckResult, error) {
	out := make([]storagev1.AckResult, 0, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), c.max)
		res, err := c.call(ctx, key, ids[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, res[:min(len(res), n)]...)
		for range n - min(len(res), n) {
			out = append(out, storagev1.AckResult_ACK_RESULT_UNSPECIFIED)
		}
		ids = ids[n:]
	}
	return out, nil
}

// modAckKey is what modacks coalesce by: one queue, one deadline.
type modAckKey struct {
	queue   string
	seconds int32
}

// storageAck is the acks coalescer's storage call.
func (h *Subscriber) storageAck(ctx context.Context, queue string, ids []string) ([]storagev1.AckResult, error) {
	resp, err := h.queues.Ack(ctx, &storagev1.AckRequest{Queue: queue, AckIds: ids})
	if err != nil {
		return nil, err
	}
	return resp.GetResults(), nil
}

// storageModAck is the modacks coalescer's storage call.
func (h *Subscriber) storageModAck(ctx context.Context, key modAckKey, ids []string) ([]storagev1.AckResult, error) {
	resp, err := h.queues.ModifyAckDeadline(ctx, &storagev1.ModifyAckDeadlineRequest{
		Queue: key.queue, AckIds: ids, AckDeadlineMs: key.seconds * 1000,
	})
	if err != nil {
		return nil, err
	}
	return resp.GetResults(), nil
}
