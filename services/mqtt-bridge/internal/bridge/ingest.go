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
	return b.queueGroups(ctx, groups)()
}

// queueGroups queues the appends of groups (not done, no earlier append in doubt) on
// their channels at once, so that what one caller queues after another is stored after
// it, and returns the wait for all of them (appendGroups' outcome).
func (b *Bridge) queueGroups(ctx context.Context, groups []*target) (wait func() error) {
	reqs := make([]*appendReq, len(groups))
	errs := make([]error, len(groups))
	for i, g := range groups {
		if g.done || g.pending != nil {
			continue
		}
		b.m.mapping(g.route.Cfg.ID).sent.Add(float64(len(g.recs)))
		reqs[i], errs[i] = b.store.enqueue(ctx, g.topic, g.partition, g.recs, g.origin)
	}
	return func() error {
		var wg sync.WaitGroup
		for i, g := range groups {
			switch {
			case g.done:
			case reqs[i] != nil:
				errs[i] = b.finish(g, b.store.await(ctx, reqs[i]))
			case errs[i] != nil:
				errs[i] = b.finish(g, errs[i])
			default:
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = b.afterDoubt(ctx, g)
				}()
			}
		}
		wg.Wait()
		return errors.Join(errs...)
	}
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
