package group

import (
	"fmt"
	"time"
)

// Config is the group coordinator's behaviour. Zero fields take the defaults noted (the
// defaults of Apache Kafka's broker configs of the same meaning).
type Config struct {
	// ClusterID prefixes NATS subjects ("tributary.<cluster-id>.groups...") and names
	// the sweep-lock KV bucket. Required.
	ClusterID string
	// MinSessionTimeout and MaxSessionTimeout bound a member's session timeout
	// (group.min.session.timeout.ms 6 s, group.max.session.timeout.ms 30 min); a join
	// outside them gets INVALID_SESSION_TIMEOUT. Tests lower the minimum.
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// InitialRebalanceDelay is how long the first rebalance of an empty group waits for
	// more members (group.initial.rebalance.delay.ms, 3 s); each new member extends it,
	// up to the rebalance timeout. Negative means no delay.
	InitialRebalanceDelay time.Duration
	// OffsetsRetention is how long the committed offsets of an empty group are kept
	// (offsets.retention.minutes, 7 days), counted from when it became empty (KIP-211).
	OffsetsRetention time.Duration
	// RetentionCheckInterval is how often the sweep-lock holder expires offsets
	// (offsets.retention.check.interval.ms; 1 min here, 10 min in Kafka).
	RetentionCheckInterval time.Duration
	// SweepInterval is how often the sweep-lock holder expires sessions and ends
	// rebalance phases whose deadline passed (250 ms).
	SweepInterval time.Duration
	// SweepLockTTL is the TTL of the sweep lock in NATS JetStream KV (3 s): a replica
	// takes over at most this long after the holder stopped renewing it.
	SweepLockTTL time.Duration
	// MaxMetadataSize bounds committed offset metadata in bytes
	// (offset.metadata.max.bytes, 4096); larger is OFFSET_METADATA_TOO_LARGE.
	MaxMetadataSize int
	// WaitRecheck is the coarse safety re-read of a waiting JoinGroup/SyncGroup in case a
	// NATS wake-up was lost (1 s). Wake-ups normally come from NATS at once.
	WaitRecheck time.Duration
}

func (c *Config) setDefaults() {
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = 6 * time.Second
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = 30 * time.Minute
	}
	if c.InitialRebalanceDelay == 0 {
		c.InitialRebalanceDelay = 3 * time.Second
	}
	if c.InitialRebalanceDelay < 0 {
		c.InitialRebalanceDelay = 0
	}
	if c.OffsetsRetention == 0 {
		c.OffsetsRetention = 7 * 24 * time.Hour
	}
	if c.RetentionCheckInterval == 0 {
		c.RetentionCheckInterval = time.Minute
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 250 * time.Millisecond
	}
	if c.SweepLockTTL == 0 {
		c.SweepLockTTL = 3 * time.Second
	}
	if c.MaxMetadataSize == 0 {
		c.MaxMetadataSize = 4096
	}
	if c.WaitRecheck == 0 {
		c.WaitRecheck = time.Second
	}
}

// Validate checks a config after defaults are applied. Errors wrap ErrInvalidConfig.
func (c *Config) Validate() error {
	switch {
	case c.ClusterID == "":
		return fmt.Errorf("%w: cluster id is empty", ErrInvalidConfig)
	case c.MinSessionTimeout <= 0 || c.MaxSessionTimeout < c.MinSessionTimeout:
		return fmt.Errorf("%w: session timeout bounds %v..%v", ErrInvalidConfig, c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.SweepLockTTL < time.Second:
		return fmt.Errorf("%w: sweep lock ttl %v below 1s", ErrInvalidConfig, c.SweepLockTTL)
	case c.SweepInterval <= 0 || c.SweepInterval >= c.SweepLockTTL:
		return fmt.Errorf("%w: sweep interval %v must be below the lock ttl %v", ErrInvalidConfig, c.SweepInterval, c.SweepLockTTL)
	case c.OffsetsRetention < 0 || c.MaxMetadataSize < 0:
		return fmt.Errorf("%w: negative retention or metadata size", ErrInvalidConfig)
	}
	return nil
}
