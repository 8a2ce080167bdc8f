package group

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// extraSweep is another component's sweep, run by the holder of the group sweep lock
// (AddSweep). A sweep kind of its own (AddSweepLock) has its own lock instead.
type extraSweep struct {
	name  string
	every time.Duration
	fn    func(ctx context.Context, now time.Time) error
	last  time.Time
}

// AddSweep registers fn to run every interval on the replica holding the sweep lock,
// after the group sweep of the same tick (so at most every SweepInterval), with the
// coordinator's clock. Call it before Start. A failing fn is logged and runs again at
// its next interval.
func (c *Coordinator) AddSweep(name string, every time.Duration, fn func(ctx context.Context, now time.Time) error) {
	c.sweeper.extra = append(c.sweeper.extra, &extraSweep{name: name, every: every, fn: fn})
}

// AddSweepLock registers fn as a sweep kind of its own (DESIGN §4: "each kind is swept
// every 250 ms by exactly one process"): it runs every SweepInterval, with the
// coordinator's clock, on the one replica holding the KV key named key in the sweep-lock
// bucket, in a goroutine of its own, with the TTL and take-over of the group lock. key
// must be a valid KV key (letters, digits, '-', '_', '=', '.', '/') other than
// "groups". Call it before Start. A failing fn runs again at the next tick; the first
// failure of a streak is logged as a warning, the rest at debug level (four ticks a
// second would otherwise flood the log while a backend is down), the recovery once.
func (c *Coordinator) AddSweepLock(key string, fn func(ctx context.Context, now time.Time) error) {
	s := newSweeper(c, key)
	failing := false // only the sweeper's goroutine runs tick
	s.tick = func(ctx context.Context) {
		err := fn(ctx, c.now())
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil && !failing:
			failing = true
			c.log.Warn("sweep failing, retrying every tick", zap.String("lock", key), zap.Error(err))
		case err != nil:
			c.log.Debug("sweep failed", zap.String("lock", key), zap.Error(err))
		case failing:
			failing = false
			c.log.Info("sweep recovered", zap.String("lock", key))
		}
	}
	c.kinds = append(c.kinds, s)
}

// runExtra runs the registered sweeps that are due.
func (s *sweeper) runExtra(ctx context.Context) {
	for _, x := range s.extra {
		now := s.c.now()
		if !x.last.IsZero() && now.Sub(x.last) < x.every && now.After(x.last) {
			continue
		}
		x.last = now
		if err := x.fn(ctx, now); err != nil && ctx.Err() == nil {
			s.c.log.Warn("sweep failed", zap.String("sweep", x.name), zap.Error(err))
		}
	}
}
