package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Config defaults, from the ChannelConfig comments in storage.proto (Kafka's defaults).
const (
	DefaultRetentionMs     = 7 * 24 * 3600 * 1000
	DefaultRetentionBytes  = -1
	DefaultMaxMessageBytes = 1048588
	DefaultSegmentBytes    = 1 << 30
	DefaultSegmentMs       = 7 * 24 * 3600 * 1000
	// DefaultMinCleanableDirtyRatio and DefaultDeleteRetentionMs are Kafka's
	// min.cleanable.dirty.ratio and delete.retention.ms defaults.
	DefaultMinCleanableDirtyRatio = 0.5
	DefaultDeleteRetentionMs      = 24 * 3600 * 1000
	// MinSegmentBytes is the lower bound for segment_bytes: 1 MiB, Kafka 4.0's
	// segment.bytes minimum (KIP-1030). Every segment keeps a file descriptor open, so
	// tiny segments would let one channel exhaust the process's descriptors.
	MinSegmentBytes = 1 << 20
)

// Cleanup policies and timestamp types, numerically equal to the proto enums.
const (
	CleanupDelete        = 1
	CleanupCompact       = 2
	CleanupCompactDelete = 3

	TimestampCreateTime    = 1
	TimestampLogAppendTime = 2
)

// ChannelConfig is a channel's configuration as stored: zero means "default" (see
// Effective). Values mirror storagev1.ChannelConfig.
type ChannelConfig struct {
	RetentionMs     int64 `json:"retention_ms,omitempty"`
	RetentionBytes  int64 `json:"retention_bytes,omitempty"`
	MaxMessageBytes int32 `json:"max_message_bytes,omitempty"`
	SegmentBytes    int64 `json:"segment_bytes,omitempty"`
	CleanupPolicy   int32 `json:"cleanup_policy,omitempty"`
	TimestampType   int32 `json:"timestamp_type,omitempty"`
	SegmentMs       int64 `json:"segment_ms,omitempty"`
	// TimestampBeforeMaxMs and TimestampAfterMaxMs bound how far (ms) a record
	// timestamp of a CreateTime channel may lie before or after the append time (Kafka
	// message.timestamp.before/after.max.ms); 0 = no limit.
	TimestampBeforeMaxMs int64 `json:"timestamp_before_max_ms,omitempty"`
	TimestampAfterMaxMs  int64 `json:"timestamp_after_max_ms,omitempty"`
	// Compaction settings (cleaner.go), used only by compacted channels. Zero means the
	// default; MinCleanableDirtyRatio and DeleteRetentionMs take a negative value for
	// 0. MinCompactionLagMs 0 = none, MaxCompactionLagMs 0 = no limit.
	MinCleanableDirtyRatio float64 `json:"min_cleanable_dirty_ratio,omitempty"`
	MinCompactionLagMs     int64   `json:"min_compaction_lag_ms,omitempty"`
	MaxCompactionLagMs     int64   `json:"max_compaction_lag_ms,omitempty"`
	DeleteRetentionMs      int64   `json:"delete_retention_ms,omitempty"`
}

// MergeConfig returns base with the fields mask names (their JSON names: retention_ms,
// retention_bytes, max_message_bytes, segment_bytes, cleanup_policy, timestamp_type,
// segment_ms, timestamp_before_max_ms, timestamp_after_max_ms,
// min_cleanable_dirty_ratio, min_compaction_lag_ms, max_compaction_lag_ms,
// delete_retention_ms) taken from in; an empty mask returns in. Errors:
// ErrInvalidArgument (an unknown field).
func MergeConfig(base, in ChannelConfig, mask []string) (ChannelConfig, error) {
	if len(mask) == 0 {
		return in, nil
	}
	c := base
	for _, f := range mask {
		switch f {
		case "retention_ms":
			c.RetentionMs = in.RetentionMs
		case "retention_bytes":
			c.RetentionBytes = in.RetentionBytes
		case "max_message_bytes":
			c.MaxMessageBytes = in.MaxMessageBytes
		case "segment_bytes":
			c.SegmentBytes = in.SegmentBytes
		case "cleanup_policy":
			c.CleanupPolicy = in.CleanupPolicy
		case "timestamp_type":
			c.TimestampType = in.TimestampType
		case "segment_ms":
			c.SegmentMs = in.SegmentMs
		case "timestamp_before_max_ms":
			c.TimestampBeforeMaxMs = in.TimestampBeforeMaxMs
		case "timestamp_after_max_ms":
			c.TimestampAfterMaxMs = in.TimestampAfterMaxMs
		case "min_cleanable_dirty_ratio":
			c.MinCleanableDirtyRatio = in.MinCleanableDirtyRatio
		case "min_compaction_lag_ms":
			c.MinCompactionLagMs = in.MinCompactionLagMs
		case "max_compaction_lag_ms":
			c.MaxCompactionLagMs = in.MaxCompactionLagMs
		case "delete_retention_ms":
			c.DeleteRetentionMs = in.DeleteRetentionMs
		default:
			return ChannelConfig{}, fmt.Errorf("%w: update_mask: unknown field %q", ErrInvalidArgument, f)
		}
	}
	return c, nil
}

// Compacted reports whether the channel's cleanup policy includes compaction.
func (c ChannelConfig) Compacted() bool {
	return c.CleanupPolicy == CleanupCompact || c.CleanupPolicy == CleanupCompactDelete
}

// Validate reports a value outside its range (wrapping ErrInvalidArgument);
// segment_bytes must be 0 (default) or in [MinSegmentBytes, MaxInt32].
func (c ChannelConfig) Validate() error { return c.validate(MinSegmentBytes) }

// validate is Validate with a lower segment_bytes bound (tests: Options.minSegmentBytes).
func (c ChannelConfig) validate(minSegmentBytes int64) error {
	switch {
	case c.RetentionMs < -1:
		return fmt.Errorf("%w: retention_ms %d < -1", ErrInvalidArgument, c.RetentionMs)
	case c.RetentionBytes < -1:
		return fmt.Errorf("%w: retention_bytes %d < -1", ErrInvalidArgument, c.RetentionBytes)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: max_message_bytes %d < 0", ErrInvalidArgument, c.MaxMessageBytes)
	case c.SegmentBytes != 0 && (c.SegmentBytes < minSegmentBytes || c.SegmentBytes > math.MaxInt32):
		return fmt.Errorf("%w: segment_bytes %d outside [%d, %d]", ErrInvalidArgument, c.SegmentBytes, minSegmentBytes, math.MaxInt32)
	case c.SegmentMs < 0:
		return fmt.Errorf("%w: segment_ms %d < 0", ErrInvalidArgument, c.SegmentMs)
	case c.CleanupPolicy < 0 || c.CleanupPolicy > CleanupCompactDelete:
		return fmt.Errorf("%w: cleanup_policy %d", ErrInvalidArgument, c.CleanupPolicy)
	case c.TimestampType < 0 || c.TimestampType > TimestampLogAppendTime:
		return fmt.Errorf("%w: timestamp_type %d", ErrInvalidArgument, c.TimestampType)
	case c.TimestampBeforeMaxMs < 0 || c.TimestampAfterMaxMs < 0:
		return fmt.Errorf("%w: timestamp_before_max_ms %d and timestamp_after_max_ms %d must not be negative", ErrInvalidArgument, c.TimestampBeforeMaxMs, c.TimestampAfterMaxMs)
	case math.IsNaN(c.MinCleanableDirtyRatio) || c.MinCleanableDirtyRatio > 1:
		return fmt.Errorf("%w: min_cleanable_dirty_ratio %v > 1", ErrInvalidArgument, c.MinCleanableDirtyRatio)
	case c.MinCompactionLagMs < 0 || c.MaxCompactionLagMs < 0:
		return fmt.Errorf("%w: min_compaction_lag_ms %d and max_compaction_lag_ms %d must not be negative", ErrInvalidArgument, c.MinCompactionLagMs, c.MaxCompactionLagMs)
	case c.MaxCompactionLagMs > 0 && c.MaxCompactionLagMs < c.MinCompactionLagMs:
		return fmt.Errorf("%w: max_compaction_lag_ms %d < min_compaction_lag_ms %d", ErrInvalidArgument, c.MaxCompactionLagMs, c.MinCompactionLagMs)
	}
	return nil
}

// Effective returns c with every zero replaced by its default.
func (c ChannelConfig) Effective() ChannelConfig {
	if c.RetentionMs == 0 {
		c.RetentionMs = DefaultRetentionMs
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = DefaultRetentionBytes
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.CleanupPolicy == 0 {
		c.CleanupPolicy = CleanupDelete
	}
	if c.TimestampType == 0 {
		c.TimestampType = TimestampCreateTime
	}
	if c.SegmentMs == 0 {
		c.SegmentMs = DefaultSegmentMs
	}
	switch {
	case c.MinCleanableDirtyRatio == 0:
		c.MinCleanableDirtyRatio = DefaultMinCleanableDirtyRatio
	case c.MinCleanableDirtyRatio < 0:
		c.MinCleanableDirtyRatio = 0
	}
	switch {
	case c.DeleteRetentionMs == 0:
		c.DeleteRetentionMs = DefaultDeleteRetentionMs
	case c.DeleteRetentionMs < 0:
		c.DeleteRetentionMs = 0
	}
	return c
}

// Kind is a channel's kind, numerically equal to storagev1.ChannelKind.
type Kind int32

// Channel kinds. A queue's log is written only by its bindings (internal/queue).
const (
	KindLog   Kind = 1
	KindQueue Kind = 2
)

// meta is the small per-channel file "meta.json", replaced atomically.
type meta struct {
	Name string `json:"name"`
	// Kind is 0 (= KindLog, for channels created before kinds existed) or KindQueue.
	Kind           Kind          `json:"kind,omitempty"`
	Config         ChannelConfig `json:"config"`
	CreatedMs      int64         `json:"created_ms"`
	LogStartOffset int64         `json:"log_start_offset"`
	// Group is the channel's group id in the node write-ahead log (WAL mode, issue
	// 16); 0 = none yet. A channel created again under a name gets a new one, so the
	// WAL's entries of the deleted channel never reach it.
	Group uint64 `json:"group,omitempty"`
}

const metaFile = "meta.json"

// hashedSep separates the prefix of a long channel name from its SHA-256 in the
// directory name. '#' is outside the channel grammar (libs/channel.Validate accepts
// only [a-zA-Z0-9._~-]), so a hashed directory name can never be the directory of
// another channel; it is an ordinary byte in Linux and macOS file names.
const hashedSep = "#h#"

// dirName maps a channel name to a directory name. Valid names only hold
// [a-zA-Z0-9._~-] and are never "." or "..", so short names are used as they are;
// names too long for a file name (over 200 bytes) become a prefix, hashedSep and a
// SHA-256 of the whole name (the real name is in meta.json, which is what Open
// reads: directories named by the older "~h~" scheme still open under their name).
func dirName(name string) string {
	if len(name) <= 200 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:100] + hashedSep + hex.EncodeToString(sum[:])
}

// writeFileAtomic writes data to dir/name via a temporary file, fsync, rename and a
// directory fsync, so a crash leaves either the old or the new contents.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeMeta(dir string, m *meta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, metaFile, append(data, '\n'))
}

func readMeta(dir string) (*meta, error) {
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, err
	}
	m := &meta{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", metaFile, err)
	}
	return m, nil
}
