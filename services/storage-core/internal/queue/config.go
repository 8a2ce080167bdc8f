package queue

import (
	"fmt"
	"strings"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// Bounds and defaults from queue.proto (Pub/Sub's where the proto follows them).
const (
	MinAckDeadlineMs     = 10_000
	MaxAckDeadlineMs     = 600_000
	DefaultAckDeadlineMs = 10_000
	DefaultRetentionMs   = 7 * 24 * 3600 * 1000
	MaxDeliveryAttempts  = 100
	MaxBackoffMs         = 600_000
	MaxReceiveMessages   = 10000
	MaxSnapshotNameLen   = 255
	// MaxLeaseQuery bounds the ack ids of one GetLeases.
	MaxLeaseQuery = 10_000
)

// Config is a queue's delivery config as stored: zeros mean the default (see the
// accessors). Values mirror storagev1.QueueConfig.
type Config struct {
	AckDeadlineMs      int32             `json:"ack_deadline_ms,omitempty"`
	MessageRetentionMs int64             `json:"message_retention_ms,omitempty"`
	RetainAcked        bool              `json:"retain_acked,omitempty"`
	OrderingKeyHeader  string            `json:"ordering_key_header,omitempty"`
	DeadLetter         *DeadLetterPolicy `json:"dead_letter,omitempty"`
	Retry              *RetryPolicy      `json:"retry,omitempty"`
	ExactlyOnce        bool              `json:"exactly_once,omitempty"`
	// ArchiveAfter, when > 0, archives a message (acks it, copying it nowhere) once it
	// was delivered this many times and is released or its lease expires again: Kafka
	// share groups' group.share.delivery.count.limit (share.go). Not in
	// storagev1.QueueConfig: only share partitions set it.
	ArchiveAfter int32 `json:"archive_after,omitempty"`
}

// DeadLetterPolicy mirrors storagev1.DeadLetterPolicy.
type DeadLetterPolicy struct {
	Channel               string         `json:"channel"`
	MaxDeliveryAttempts   int32          `json:"max_delivery_attempts"`
	Headers               []store.Header `json:"headers,omitempty"`
	DeliveryCountHeader   string         `json:"delivery_count_header,omitempty"`
	SourceTimestampHeader string         `json:"source_timestamp_header,omitempty"`
	DropHeaders           []string       `json:"drop_headers,omitempty"`
}

// RetryPolicy mirrors storagev1.RetryPolicy. Its values are taken as they are (0 is
// no delay): the caller applies its protocol's defaults (Pub/Sub: 10 s and 600 s).
type RetryPolicy struct {
	MinBackoffMs int64 `json:"min_backoff_ms,omitempty"`
	MaxBackoffMs int64 `json:"max_backoff_ms,omitempty"`
}

// Validate reports a value outside its range, wrapping ErrInvalidArgument.
func (c *Config) Validate() error {
	if c.AckDeadlineMs != 0 && (c.AckDeadlineMs < MinAckDeadlineMs || c.AckDeadlineMs > MaxAckDeadlineMs) {
		return fmt.Errorf("%w: ack_deadline_ms %d outside [%d, %d] (0 = %d)", ErrInvalidArgument, c.AckDeadlineMs, MinAckDeadlineMs, MaxAckDeadlineMs, DefaultAckDeadlineMs)
	}
	if c.MessageRetentionMs < 0 {
		return fmt.Errorf("%w: message_retention_ms %d < 0", ErrInvalidArgument, c.MessageRetentionMs)
	}
	if strings.HasPrefix(c.OrderingKeyHeader, internalHeaderPrefix) {
		return fmt.Errorf("%w: ordering_key_header %q is an internal header", ErrInvalidArgument, c.OrderingKeyHeader)
	}
	if d := c.DeadLetter; d != nil {
		if err := channel.Validate(d.Channel); err != nil {
			return fmt.Errorf("dead_letter.channel: %w", err)
		}
		if d.MaxDeliveryAttempts < 1 || d.MaxDeliveryAttempts > MaxDeliveryAttempts {
			return fmt.Errorf("%w: dead_letter.max_delivery_attempts %d outside [1, %d]", ErrInvalidArgument, d.MaxDeliveryAttempts, MaxDeliveryAttempts)
		}
		for _, h := range d.Headers {
			if h.Key == "" {
				return fmt.Errorf("%w: dead_letter.headers: empty header name", ErrInvalidArgument)
			}
		}
	}
	if c.ArchiveAfter < 0 || c.ArchiveAfter > MaxDeliveryAttempts {
		return fmt.Errorf("%w: archive_after %d outside [0, %d]", ErrInvalidArgument, c.ArchiveAfter, MaxDeliveryAttempts)
	}
	if r := c.Retry; r != nil {
		lo, hi := r.backoff()
		if r.MinBackoffMs < 0 || r.MaxBackoffMs < 0 || lo > MaxBackoffMs || hi > MaxBackoffMs {
			return fmt.Errorf("%w: retry backoff outside [0, %d] ms", ErrInvalidArgument, MaxBackoffMs)
		}
		if lo > hi {
			return fmt.Errorf("%w: retry min_backoff_ms %d > max_backoff_ms %d", ErrInvalidArgument, lo, hi)
		}
	}
	return nil
}

// ackDeadline is the effective default lease, ms.
func (c *Config) ackDeadline() int64 {
	if c.AckDeadlineMs == 0 {
		return DefaultAckDeadlineMs
	}
	return int64(c.AckDeadlineMs)
}

// retention is the effective message retention, ms.
func (c *Config) retention() int64 {
	if c.MessageRetentionMs == 0 {
		return DefaultRetentionMs
	}
	return c.MessageRetentionMs
}

// Effective returns c with the defaults filled in (for display).
func (c Config) Effective() Config {
	c.AckDeadlineMs = int32(c.ackDeadline())
	c.MessageRetentionMs = c.retention()
	return c
}

func (r *RetryPolicy) backoff() (lo, hi int64) { return r.MinBackoffMs, r.MaxBackoffMs }

// backoffMs is the delay before redelivering a message that failed its attempts-th
// delivery: min after the first failure, doubling per attempt, capped at max; 0
// without a retry policy.
func (c *Config) backoffMs(attempts int32) int64 {
	if c.Retry == nil {
		return 0
	}
	lo, hi := c.Retry.backoff()
	d := lo
	for i := int32(1); i < attempts && d > 0 && d < hi; i++ { // d 0: no backoff, whatever the attempts
		d *= 2
	}
	return min(d, hi)
}

// Binding is a source log feeding the queue. Cursor is output only: the next source
// sequence the binding looks at.
type Binding struct {
	Source        string `json:"source"`
	Filter        string `json:"filter,omitempty"`
	StartSequence int64  `json:"start_sequence,omitempty"`
	Cursor        int64  `json:"-"`
	// SourceCreatedMs is the source log's creation time when the binding was made: a
	// log deleted and created again under the same name is another log, which the
	// binding does not follow (Pub/Sub: a subscription outlives its deleted topic but
	// never receives from a new topic of that name).
	SourceCreatedMs int64 `json:"source_created_ms,omitempty"`
	// ReadCommitted copies only records below the source's last stable offset and
	// none of aborted transactions (a Kafka share partition at
	// share.isolation.level=read_committed). Control records are never copied.
	ReadCommitted bool `json:"read_committed,omitempty"`
}
