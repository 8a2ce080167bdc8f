package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/natsx"
)

// sweepLockKey is the KV key whose holder runs the group sweeps.
const sweepLockKey = "groups"

// sweeper runs one kind of sweep on the one replica holding that kind's sweep lock: a
// key in the cluster's NATS JetStream KV bucket, whose TTL is Config.SweepLockTTL. The
// holder renews it (Update with the last revision) every TTL/3; when the holder dies
// the key ages out and another replica's Create succeeds. A holder that fails to renew
// stops sweeping at once. Each kind has its own key and goroutine, so kinds may be
// held by different replicas and a slow sweep never delays another kind.
type sweeper struct {
	c     *Coordinator
	key   string
	tick  func(ctx context.Context) // one sweep, run every SweepInterval while held
	owner string
	held  atomic.Bool

	kv        jetstream.KeyValue
	rev       uint64
	renewedAt time.Time
	lastRet   time.Time     // group sweeper only: last offset-retention pass
	extra     []*extraSweep // group sweeper only: AddSweep
}

func newSweeper(c *Coordinator, key string) *sweeper {
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return &sweeper{c: c, key: key, owner: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))}
}

// groupTick is the group sweeper's tick: the group sweep, then the AddSweep sweeps.
func (s *sweeper) groupTick(ctx context.Context) {
	if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
		s.c.log.Warn("group sweep failed", zap.Error(err))
	}
	s.runExtra(ctx)
}

func (s *sweeper) run(ctx context.Context) {
	t := time.NewTicker(s.c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.release()
			return
		case <-t.C:
		}
		if !s.hold(ctx) {
			continue
		}
		s.tick(ctx)
	}
}

// hold acquires or renews the sweep lock and reports whether this replica holds it.
func (s *sweeper) hold(ctx context.Context) bool {
	log := s.c.log
	if s.kv == nil {
		js, err := jetstream.New(s.c.nc)
		if err != nil {
			log.Warn("jetstream unavailable for the sweep lock", zap.Error(err))
			return false
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cfg := jetstream.KeyValueConfig{Bucket: natsx.SweepLockBucket(s.c.cfg.ClusterID), TTL: s.c.cfg.SweepLockTTL, History: 1, Storage: jetstream.MemoryStorage}
		kv, err := js.CreateKeyValue(cctx, cfg)
		if err != nil {
			kv, err = js.KeyValue(cctx, cfg.Bucket)
		}
		if err != nil {
			log.Warn("sweep lock bucket unavailable", zap.String("bucket", cfg.Bucket), zap.Error(err))
			return false
		}
		s.kv = kv
	}
	cctx, cancel := context.WithTimeout(ctx, s.c.cfg.SweepLockTTL/3)
	defer cancel()
	now := time.Now()
	if !s.held.Load() {
		rev, err := s.kv.Create(cctx, s.key, []byte(s.owner))
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				log.Debug("sweep lock not acquired", zap.String("lock", s.key), zap.Error(err))
			}
			return false
		}
		s.rev, s.renewedAt = rev, now
		s.setHeld(true)
		log.Info("acquired sweep lock", zap.String("lock", s.key), zap.String("owner", s.owner))
		return true
	}
	if now.Sub(s.renewedAt) < s.c.cfg.SweepLockTTL/3 {
		return true
	}
	rev, err := s.kv.Update(cctx, s.key, []byte(s.owner), s.rev)
	if err != nil {
		s.setHeld(false)
		log.Warn("lost sweep lock", zap.String("lock", s.key), zap.Error(err))
		return false
	}
	s.rev, s.renewedAt = rev, now
	return true
}

// setHeld records whether this replica holds the lock (and its gauge).
func (s *sweeper) setHeld(held bool) {
	s.held.Store(held)
	v := 0.0
	if held {
		v = 1
	}
	s.c.lockHeld.WithLabelValues(s.key).Set(v)
}

// release deletes the lock (if still ours) so another replica takes over at once.
func (s *sweeper) release() {
	if !s.held.Load() || s.kv == nil {
		return
	}
	s.setHeld(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.kv.Delete(ctx, s.key, jetstream.LastRevision(s.rev)); err != nil {
		s.c.log.Warn("release sweep lock", zap.String("lock", s.key), zap.Error(err))
		return
	}
	s.c.log.Info("released sweep lock", zap.String("lock", s.key), zap.String("owner", s.owner))
}

// sweep expires member sessions, ends join phases and sync waits whose deadline passed,
// and, every RetentionCheckInterval, expires the offsets of long-empty groups.
func (s *sweeper) sweep(ctx context.Context) error {
	now := s.c.now()
	ids, err := s.c.store.DueGroups(ctx, now)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := s.c.withGroup(ctx, id, false, func(g *group, now time.Time) error {
			if !g.exists {
				return errSkip
			}
			before, gen := g.State, g.Generation
			g.expire(now, s.c.cfg.InitialRebalanceDelay)
			if g.State != before || g.Generation != gen {
				s.c.log.Info("group state changed by sweep", zap.String("group", id), zap.String("from", string(before)),
					zap.String("to", string(g.State)), zap.Int32("generation", g.Generation))
			}
			if !g.dirty {
				return errSkip
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if now.Sub(s.lastRet) >= s.c.cfg.RetentionCheckInterval {
		s.lastRet = now
		return s.expireOffsets(ctx, now)
	}
	return nil
}

// expireOffsets deletes the committed offsets of groups that have been Empty for longer
// than OffsetsRetention (KIP-211; for groups that never had members, counted from each
// commit), then Empty groups left with no offsets and no members.
func (s *sweeper) expireOffsets(ctx context.Context, now time.Time) error {
	cutoff := now.Add(-s.c.cfg.OffsetsRetention)
	n, err := s.c.store.ExpireGroupOffsets(ctx, cutoff)
	if err != nil {
		return err
	}
	if n > 0 {
		s.c.log.Info("expired committed offsets", zap.Int64("partitions", n))
	}
	ids, err := s.c.store.DeleteEmptyGroups(ctx, now.Add(-s.c.cfg.RetentionCheckInterval))
	for _, id := range ids {
		_ = s.c.notify.publish(id)
	}
	return err
}
