package group

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// extraSweep is another component's sweep, run by the holder of the group sweep lock
// (AddSweep): one lock, one holder, for every coordinator sweep (DESIGN §4).
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
