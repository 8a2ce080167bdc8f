package bridge

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/sessions"
)

// target is one (topic, partition) of a batch with the records it gets, in order.
type target struct {
	topic     string
	partition int32
	route     *mapping.Route
	recs      []*storagev1.AppendRecord
	received  []time.Time
	done      bool
	// pending is the outcome of an earlier append of recs that is in doubt: a later
	// appendGroups waits for it instead of appending recs again.
	pending *sessions.Outcome
	// origin, for a listener message of a persistent session, names it to the session
	// store (see internal/sessions).
	origin *sessions.Origin
}

// build maps each message through its routes (routes[i] for msgs[i]; the caller
// chose them) into per-partition groups, in message order. A message too large for a
// route is counted and left out of that route; tooLarge[i] reports it for message i.
func (b *Bridge) build(ctx context.Context, msgs []*mapping.Message, routes [][]*mapping.Route, at []time.Time) (groups []*target, tooLarge []bool, err error) {
	tooLarge = make([]bool, len(msgs))
	var byKey map[groupKey]*target // once there are more than scanGroups
	now := time.Now().UnixMilli()
	for i, m := range msgs {
		for _, r := range routes[i] {
			parts, err := b.store.partitions(ctx, r.Cfg.KafkaTopic, r.Cfg.Partitions)
			if err != nil {
				return nil, nil, err
			}
			rec, err := r.Build(m, parts)
			if errors.Is(err, mapping.ErrTooLarge) {
				tooLarge[i] = true
				b.m.tooLarge.WithLabelValues(r.Cfg.ID).Inc()
				b.log.Warn("message too large for mapping", zap.String("mapping", r.Cfg.ID), zap.String("topic", m.Topic), zap.Int("bytes", rec.Size), zap.Int("max_record_bytes", r.Cfg.MaxRecordBytes))
				continue
			}
			k := groupKey{r, rec.Partition}
			var g *target
			if byKey != nil {
				g = byKey[k]
			} else {
				for _, o := range groups {
					if o.route == r && o.partition == rec.Partition {
						g = o
						break
					}
				}
			}
			if g == nil {
				g = &target{topic: rec.Topic, partition: rec.Partition, route: r}
				groups = append(groups, g)
				switch {
				case byKey != nil:
					byKey[k] = g
				case len(groups) > scanGroups:
					byKey = make(map[groupKey]*target, 2*len(groups))
					for _, o := range groups {
						byKey[groupKey{o.route, o.partition}] = o
					}
				}
			}
			g.recs = append(g.recs, &storagev1.AppendRecord{TimestampMs: now, Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
			g.received = append(g.received, at[i])
		}
	}
	return groups, tooLarge, nil
}

// groupKey names a group of build: a mapping's partition.
type groupKey struct {
	route     *mapping.Route
	partition int32
}

// scanGroups is how many groups build looks through before it indexes them: one
// message (the listener stores each on its own) makes a group per mapping taking it,
// and a map made for every message cost more than the scan.
const scanGroups = 8

// appendGroups appends every group not yet done, concurrently, and marks the ones
// that became durable. A group whose earlier append is in doubt is not appended again:
// its outcome is awaited, and the group appended only if that outcome is not stored.
// It returns the errors joined (an *inDoubtError for a group that is still in doubt
// when ctx ends; the group keeps it in pending).
func (b *Bridge) appendGroups(ctx context.Context, groups []*target) error {
	return b.queueGroups(ctx, groups, nil).wait()
}

// queued is what queueGroups queued; wait for its outcome.
type queued struct {
	b      *Bridge
	ctx    context.Context
	groups []*target
	reqs   []*appendReq
	errs   []error
	// one holds reqs and errs for a single group (a listener message of one mapping),
	// which then cost no allocation of their own.
	one    [1]*appendReq
	oneErr [1]error
	// wakes: wake (queueGroups') is signalled when each append that is not answered
	// yet is, so that ready can be looked at again then (no group waits for an
	// earlier append in doubt).
	wakes bool
}

// queueGroups queues the appends of groups (not done, no earlier append in doubt) on
// their channels at once, so that what one caller queues after another is stored after
// it, and returns them to wait for (appendGroups' outcome). wake, when set, is
// signalled as each append is answered.
func (b *Bridge) queueGroups(ctx context.Context, groups []*target, wake chan struct{}) *queued {
	q := &queued{b: b, ctx: ctx, groups: groups, wakes: wake != nil}
	if len(groups) == 1 {
		q.reqs, q.errs = q.one[:], q.oneErr[:]
	} else {
		q.reqs, q.errs = make([]*appendReq, len(groups)), make([]error, len(groups))
	}
	for i, g := range groups {
		if g.done {
			continue
		}
		if g.pending != nil {
			q.wakes = false
			continue
		}
		b.m.mapping(g.route.Cfg.ID).sent.Add(float64(len(g.recs)))
		q.reqs[i], q.errs[i] = b.store.enqueue(ctx, g.topic, g.partition, g.recs, g.origin, wake)
	}
	return q
}

// ready reports whether wait would return at once: every group is done, failed to
// queue, or its append was answered.
func (q *queued) ready() bool {
	for i, g := range q.groups {
		switch {
		case g.done:
		case q.reqs[i] != nil:
			if len(q.reqs[i].done) == 0 {
				return false
			}
		case q.errs[i] == nil:
			return false // waits for an earlier append in doubt
		}
	}
	return true
}

// wait waits for the appends and returns their errors joined (see appendGroups).
func (q *queued) wait() error {
	b, ctx, errs := q.b, q.ctx, q.errs
	var doubted []int
	for i, g := range q.groups {
		switch {
		case g.done:
		case q.reqs[i] != nil:
			errs[i] = b.finish(g, b.store.await(ctx, q.reqs[i]))
		case errs[i] != nil:
			errs[i] = b.finish(g, errs[i])
		default:
			doubted = append(doubted, i)
		}
	}
	if len(doubted) > 0 {
		q.afterDoubts(doubted)
	}
	return errors.Join(errs...)
}

// afterDoubts runs afterDoubt for the groups at indexes, concurrently, into q.errs.
func (q *queued) afterDoubts(indexes []int) {
	var wg sync.WaitGroup
	for _, i := range indexes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.errs[i] = q.b.afterDoubt(q.ctx, q.groups[i])
		}()
	}
	wg.Wait()
}

// afterDoubt waits for the outcome of g's earlier append, which is in doubt, and
// appends g again only if that one was not stored.
func (b *Bridge) afterDoubt(ctx context.Context, g *target) error {
	select {
	case <-g.pending.Done:
	case <-ctx.Done():
		return &inDoubtError{out: g.pending, cause: ctx.Err()}
	}
	stored := g.pending.Stored
	g.pending = nil
	if stored {
		b.m.mapping(g.route.Cfg.ID).deduplicated.Add(float64(len(g.recs)))
		b.stored(g)
		return nil
	}
	b.m.mapping(g.route.Cfg.ID).sent.Add(float64(len(g.recs)))
	return b.finish(g, b.store.append(ctx, g.topic, g.partition, g.recs, g.origin))
}

// finish records the outcome err of g's append and returns it.
func (b *Bridge) finish(g *target, err error) error {
	if err != nil {
		b.m.mapping(g.route.Cfg.ID).failed.Add(float64(len(g.recs)))
		if d := (*inDoubtError)(nil); errors.As(err, &d) {
			g.pending = d.out
		}
		return err
	}
	b.stored(g)
	return nil
}

// stored marks g durable and counts it.
func (b *Bridge) stored(g *target) {
	g.done = true
	mm := b.m.mapping(g.route.Cfg.ID)
	mm.stored.Add(float64(len(g.recs)))
	now := time.Now()
	var sum float64
	for _, t := range g.received {
		sum += now.Sub(t).Seconds()
	}
	mm.storeLatency.Add(sum)
}

// inDoubtGroups reports whether a group of groups has an append in doubt.
func inDoubtGroups(groups []*target) bool {
	for _, g := range groups {
		if g.pending != nil {
			return true
		}
	}
	return false
}

// deadlineStep is how finely deadlines rounds a store-timeout up.
const deadlineStep = 10 * time.Millisecond

// deadlines hands out the contexts of stored listener publishes: each ends its
// store-timeout after now, rounded up to the next deadlineStep, and the publishes of
// one step share it (one context and timer per step instead of one per message;
// the timeout is at most a step longer). A context is never cancelled early: it ends
// at its deadline, or with its parent.
type deadlines struct {
	mu  sync.Mutex
	at  time.Time
	ctx context.Context
}

// get is a context ending timeout (rounded up) from now, or with parent.
func (d *deadlines) get(parent context.Context, timeout time.Duration) context.Context {
	at := time.Now().Add(timeout + deadlineStep - 1).Truncate(deadlineStep)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || !d.at.Equal(at) || d.ctx.Err() != nil {
		// Its cancel is its deadline: the context releases its timer and its place
		// in parent when it ends.
		ctx, cancel := context.WithDeadline(parent, at)
		_ = cancel
		d.at, d.ctx = at, ctx
	}
	return d.ctx
}
