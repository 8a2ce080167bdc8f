// Package topicconfig is the table of Kafka topic configs the coordinator knows: their
// types, defaults and validators (as in Apache Kafka's LogConfig / TopicConfig), the
// IncrementalAlterConfigs operations over them (KIP-339), the whole-set replace of the
// older AlterConfigs, and the mapping of the storage-relevant ones onto a storage-core
// ChannelConfig.
//
// Values are stored as strings, trimmed, exactly as a Kafka broker keeps topic
// overrides; defaults are never stored.
package topicconfig

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Def describes one topic config.
type Def struct {
	// Name is the Kafka config name, e.g. "retention.ms".
	Name string
	// Type is the Kafka config type reported by DescribeConfigs.
	Type coordinatorv1.ConfigType
	// Default is the value in force when the topic does not set it.
	Default string
	// Doc is a one-line description (DescribeConfigs documentation).
	Doc string

	check func(string) error
}

// maxLong is Java's Long.MAX_VALUE, the Kafka default of several "no limit" configs.
const maxLong = "9223372036854775807"

// Kafka's accepted values for the enumerated configs.
var (
	compressionTypes = []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}
	timestampTypes   = []string{"CreateTime", "LogAppendTime"}
	cleanupPolicies  = []string{"compact", "delete"}
	throttledReplica = regexp.MustCompile(`^[0-9]+:[0-9]+$`)
)

var defs = []Def{
	{Name: "cleanup.policy", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LIST, Default: "delete",
		Doc:   `"delete" discards old segments by time or size; "compact" keeps the latest record per key; both may be given.`,
		check: listOf(cleanupPolicies)},
	{Name: "compression.type", Type: coordinatorv1.ConfigType_CONFIG_TYPE_STRING, Default: "producer",
		Doc:   `Compression of stored batches; "producer" keeps what the producer sent.`,
		check: oneOf(compressionTypes)},
	{Name: "compression.gzip.level", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "-1",
		Doc:   "gzip level when compression.type is gzip (1..9, or -1 for the codec default).",
		check: func(v string) error { return intIn(v, -1, 9, 0) }},
	{Name: "compression.lz4.level", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "9",
		Doc:   "lz4 level when compression.type is lz4 (1..17).",
		check: func(v string) error { return intIn(v, 1, 17) }},
	{Name: "compression.zstd.level", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "3",
		Doc:   "zstd level when compression.type is zstd (-131072..22).",
		check: func(v string) error { return intIn(v, -131072, 22) }},
	{Name: "delete.retention.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "86400000",
		Doc: "How long delete tombstones are kept on compacted topics, in ms.", check: longAtLeast(0)},
	{Name: "file.delete.delay.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "60000",
		Doc: "Delay before a deleted segment file is removed from disk, in ms.", check: longAtLeast(0)},
	{Name: "flush.messages", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: maxLong,
		Doc: "Accepted for compatibility; storage-core fsyncs every acknowledged append.", check: longAtLeast(1)},
	{Name: "flush.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: maxLong,
		Doc: "Accepted for compatibility; storage-core fsyncs every acknowledged append.", check: longAtLeast(0)},
	{Name: "follower.replication.throttled.replicas", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LIST, Default: "",
		Doc: "Accepted for compatibility (partition:broker pairs or *); there is no replication to throttle.", check: throttledList},
	{Name: "index.interval.bytes", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "4096",
		Doc: "Bytes between sparse offset index entries.", check: func(v string) error { return intIn(v, 0, math.MaxInt32) }},
	{Name: "leader.replication.throttled.replicas", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LIST, Default: "",
		Doc: "Accepted for compatibility (partition:broker pairs or *); there is no replication to throttle.", check: throttledList},
	{Name: "local.retention.bytes", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "-2",
		Doc: "Tiered storage local retention in bytes (-2 = retention.bytes); accepted for compatibility.", check: longAtLeast(-2)},
	{Name: "local.retention.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "-2",
		Doc: "Tiered storage local retention in ms (-2 = retention.ms); accepted for compatibility.", check: longAtLeast(-2)},
	{Name: "max.compaction.lag.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: maxLong,
		Doc: "Longest time a record stays uncompacted, in ms.", check: longAtLeast(1)},
	{Name: "max.message.bytes", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "1048588",
		Doc: "Largest record batch accepted, in bytes.", check: func(v string) error { return intIn(v, 0, math.MaxInt32) }},
	{Name: "message.downconversion.enable", Type: coordinatorv1.ConfigType_CONFIG_TYPE_BOOLEAN, Default: "true",
		Doc: "Accepted for compatibility; batches are always served as stored (magic v2).", check: boolean},
	{Name: "message.timestamp.after.max.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: maxLong,
		Doc: "Largest allowed lead of a CreateTime timestamp over the broker's clock, in ms; a batch past it is refused with INVALID_TIMESTAMP.", check: longAtLeast(0)},
	{Name: "message.timestamp.before.max.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: maxLong,
		Doc: "Largest allowed lag of a CreateTime timestamp behind the broker's clock, in ms; a batch past it is refused with INVALID_TIMESTAMP.", check: longAtLeast(0)},
	{Name: "message.timestamp.difference.max.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: maxLong,
		Doc: "Deprecated Kafka limit on timestamp skew, in ms; accepted for compatibility.", check: longAtLeast(0)},
	{Name: "message.timestamp.type", Type: coordinatorv1.ConfigType_CONFIG_TYPE_STRING, Default: "CreateTime",
		Doc: `"CreateTime" keeps the producer's timestamp; "LogAppendTime" stamps the append time.`, check: oneOf(timestampTypes)},
	{Name: "min.cleanable.dirty.ratio", Type: coordinatorv1.ConfigType_CONFIG_TYPE_DOUBLE, Default: "0.5",
		Doc: "Share of a compacted log that must be dirty before it is cleaned (0..1).", check: ratio},
	{Name: "min.compaction.lag.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "0",
		Doc: "Shortest time a record stays uncompacted, in ms.", check: longAtLeast(0)},
	{Name: "min.insync.replicas", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "1",
		Doc: "Accepted for compatibility; every acknowledged append is durable on storage-core.", check: func(v string) error { return intIn(v, 1, math.MaxInt32) }},
	{Name: "preallocate", Type: coordinatorv1.ConfigType_CONFIG_TYPE_BOOLEAN, Default: "false",
		Doc: "Accepted for compatibility; segment files are not preallocated.", check: boolean},
	{Name: "retention.bytes", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "-1",
		Doc: "Delete the oldest segments while a partition exceeds this size, in bytes (-1 = no limit).", check: longAtLeast(-1)},
	{Name: "retention.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "604800000",
		Doc: "Delete segments older than this, in ms (-1 = keep forever).", check: longAtLeast(-1)},
	{Name: "segment.bytes", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "1073741824",
		Doc: "Segment file size at which a new segment is rolled, in bytes (at least 1 MiB, as Kafka 4.0, KIP-1030).", check: func(v string) error { return intIn(v, 1<<20, math.MaxInt32) }},
	{Name: "segment.index.bytes", Type: coordinatorv1.ConfigType_CONFIG_TYPE_INT, Default: "10485760",
		Doc: "Largest offset index per segment, in bytes.", check: func(v string) error { return intIn(v, 4, math.MaxInt32) }},
	{Name: "segment.jitter.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "0",
		Doc: "Random jitter subtracted from segment.ms, in ms.", check: longAtLeast(0)},
	{Name: "segment.ms", Type: coordinatorv1.ConfigType_CONFIG_TYPE_LONG, Default: "604800000",
		Doc: "Roll a segment once its first record is older than this, in ms.", check: longAtLeast(1)},
	{Name: "unclean.leader.election.enable", Type: coordinatorv1.ConfigType_CONFIG_TYPE_BOOLEAN, Default: "false",
		Doc: "Accepted for compatibility; there are no replicas to elect.", check: boolean},
}

var byName = func() map[string]*Def {
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	m := make(map[string]*Def, len(defs))
	for i := range defs {
		m[defs[i].Name] = &defs[i]
	}
	return m
}()

// All returns every known topic config, sorted by name. The slice is shared: do not
// modify it.
func All() []Def { return defs }

// Lookup returns the config named name.
func Lookup(name string) (Def, bool) {
	d, ok := byName[name]
	if !ok {
		return Def{}, false
	}
	return *d, true
}

// Validate checks value for config name and returns it trimmed. Errors wrap
// ErrUnknownConfig or ErrInvalidValue and read like Kafka's.
func Validate(name, value string) (string, error) {
	d, ok := byName[name]
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrUnknownConfig, name)
	}
	v := strings.TrimSpace(value)
	if err := d.check(v); err != nil {
		return "", fmt.Errorf("%w %q for configuration %s: %v", ErrInvalidValue, value, name, err)
	}
	return v, nil
}

// ValidateAll validates every entry of configs (e.g. CreateTopics configs) and returns
// the trimmed copy. The error names the first bad entry in name order.
func ValidateAll(configs map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(configs))
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, err := Validate(n, configs[n])
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	if err := checkTogether(out); err != nil {
		return nil, err
	}
	return out, nil
}

// Value returns the value in force for name: the override in configs, else the default.
func Value(configs map[string]string, name string) string {
	if v, ok := configs[name]; ok {
		return v
	}
	if d, ok := byName[name]; ok {
		return d.Default
	}
	return ""
}

// Alteration is one IncrementalAlterConfigs entry.
type Alteration struct {
	Name  string
	Op    coordinatorv1.AlterOp
	Value string
}

// Alter applies alterations to a copy of current (the topic's overrides) with Kafka's
// IncrementalAlterConfigs semantics: SET sets, DELETE reverts to the default, APPEND
// adds list items not yet present (to the value in force), SUBTRACT removes list items.
// Errors: ErrInvalidRequest (unknown op, a name given twice), ErrUnknownConfig,
// ErrNotList, ErrInvalidValue.
func Alter(current map[string]string, alts []Alteration) (map[string]string, error) {
	out := make(map[string]string, len(current)+len(alts))
	for k, v := range current {
		out[k] = v
	}
	seen := make(map[string]bool, len(alts))
	for _, a := range alts {
		if seen[a.Name] {
			return nil, fmt.Errorf("%w: config %s is altered more than once", ErrInvalidRequest, a.Name)
		}
		seen[a.Name] = true
		d, ok := byName[a.Name]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnknownConfig, a.Name)
		}
		switch a.Op {
		case coordinatorv1.AlterOp_ALTER_OP_SET:
			v, err := Validate(a.Name, a.Value)
			if err != nil {
				return nil, err
			}
			out[a.Name] = v
		case coordinatorv1.AlterOp_ALTER_OP_DELETE:
			delete(out, a.Name)
		case coordinatorv1.AlterOp_ALTER_OP_APPEND, coordinatorv1.AlterOp_ALTER_OP_SUBTRACT:
			if d.Type != coordinatorv1.ConfigType_CONFIG_TYPE_LIST {
				return nil, fmt.Errorf("%w: %s is not a list, so it cannot be appended to or subtracted from", ErrNotList, a.Name)
			}
			old := splitList(Value(out, a.Name))
			var next []string
			if a.Op == coordinatorv1.AlterOp_ALTER_OP_APPEND {
				next = old
				for _, item := range splitList(a.Value) {
					if !slices.Contains(next, item) {
						next = append(next, item)
					}
				}
			} else {
				drop := splitList(a.Value)
				for _, item := range old {
					if !slices.Contains(drop, item) {
						next = append(next, item)
					}
				}
			}
			v, err := Validate(a.Name, strings.Join(next, ","))
			if err != nil {
				return nil, err
			}
			out[a.Name] = v
		default:
			return nil, fmt.Errorf("%w: unknown op %d for config %s", ErrInvalidRequest, a.Op, a.Name)
		}
	}
	if err := checkTogether(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkTogether applies Kafka's checks across configs (LogConfig.validateValues):
// max.compaction.lag.ms must not be below min.compaction.lag.ms. Errors wrap
// ErrInvalidValue.
func checkTogether(configs map[string]string) error {
	lo, _ := strconv.ParseInt(Value(configs, "min.compaction.lag.ms"), 10, 64)
	hi, _ := strconv.ParseInt(Value(configs, "max.compaction.lag.ms"), 10, 64)
	if hi < lo {
		return fmt.Errorf("%w: conflict topic config setting max.compaction.lag.ms (%d) < min.compaction.lag.ms (%d)", ErrInvalidValue, hi, lo)
	}
	return nil
}

// Replace returns the overrides a topic has after Kafka's non-incremental AlterConfigs
// with alts: exactly the SET entries of alts, each validated as Alter validates it; a
// config not named returns to its default. Errors: ErrInvalidRequest (an op other than
// SET, a name given twice), ErrUnknownConfig, ErrInvalidValue.
func Replace(alts []Alteration) (map[string]string, error) {
	for _, a := range alts {
		if a.Op != coordinatorv1.AlterOp_ALTER_OP_SET {
			return nil, fmt.Errorf("%w: op %d for config %s; a replacing alteration only sets", ErrInvalidRequest, a.Op, a.Name)
		}
	}
	return Alter(nil, alts)
}

// StorageMask lists the ChannelConfig fields ChannelConfig fills (for UpdateChannelConfig).
var StorageMask = []string{"retention_ms", "retention_bytes", "max_message_bytes", "segment_bytes", "segment_ms", "cleanup_policy", "timestamp_type", "timestamp_before_max_ms", "timestamp_after_max_ms",
	"min_cleanable_dirty_ratio", "min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms"}

// ChannelConfig returns the storage-core config in force for a topic with overrides
// configs (which must be valid). Every field is set explicitly. Kafka's 0 for
// retention.ms, retention.bytes and max.message.bytes (keep nothing / accept nothing)
// becomes 1, because 0 means "default" in ChannelConfig; so does a 0 of
// message.timestamp.before/after.max.ms (no skew allowed: 1 ms is), and their
// Long.MAX_VALUE default (no limit) becomes 0.
func ChannelConfig(configs map[string]string) *storagev1.ChannelConfig {
	long := func(name string) int64 {
		n, _ := strconv.ParseInt(Value(configs, name), 10, 64)
		return n
	}
	nonZero := func(n int64) int64 {
		if n == 0 {
			return 1
		}
		return n
	}
	cc := &storagev1.ChannelConfig{
		RetentionMs:     nonZero(long("retention.ms")),
		RetentionBytes:  nonZero(long("retention.bytes")),
		MaxMessageBytes: int32(nonZero(long("max.message.bytes"))),
		SegmentBytes:    long("segment.bytes"),
		SegmentMs:       long("segment.ms"),
		CleanupPolicy:   storagev1.CleanupPolicy_CLEANUP_POLICY_DELETE,
		TimestampType:   storagev1.TimestampType_TIMESTAMP_TYPE_CREATE_TIME,
	}
	skew := func(name string) int64 {
		if n := long(name); n != math.MaxInt64 {
			return nonZero(n)
		}
		return 0
	}
	cc.TimestampBeforeMaxMs = skew("message.timestamp.before.max.ms")
	cc.TimestampAfterMaxMs = skew("message.timestamp.after.max.ms")
	// Compaction: a 0 ratio or delete retention (clean at once, keep no tombstone) is
	// -1, ChannelConfig's "0"; max.compaction.lag.ms's Long.MAX_VALUE (no limit) is 0.
	cc.MinCleanableDirtyRatio, _ = strconv.ParseFloat(Value(configs, "min.cleanable.dirty.ratio"), 64)
	if cc.MinCleanableDirtyRatio == 0 {
		cc.MinCleanableDirtyRatio = -1
	}
	cc.MinCompactionLagMs = long("min.compaction.lag.ms")
	if cc.MaxCompactionLagMs = long("max.compaction.lag.ms"); cc.MaxCompactionLagMs == math.MaxInt64 {
		cc.MaxCompactionLagMs = 0
	}
	if cc.DeleteRetentionMs = long("delete.retention.ms"); cc.DeleteRetentionMs == 0 {
		cc.DeleteRetentionMs = -1
	}
	policy := splitList(Value(configs, "cleanup.policy"))
	compact, del := slices.Contains(policy, "compact"), slices.Contains(policy, "delete")
	switch {
	case compact && del:
		cc.CleanupPolicy = storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT_DELETE
	case compact:
		cc.CleanupPolicy = storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT
	}
	if Value(configs, "message.timestamp.type") == "LogAppendTime" {
		cc.TimestampType = storagev1.TimestampType_TIMESTAMP_TYPE_LOG_APPEND_TIME
	}
	return cc
}

// splitList parses a Kafka LIST value: comma separated, items trimmed, empty value =
// empty list.
func splitList(v string) []string {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

func longAtLeast(minimum int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("not a long")
		}
		if n < minimum {
			return fmt.Errorf("value must be at least %d", minimum)
		}
		return nil
	}
}

// intIn checks a Kafka INT in [lo, hi] and not one of except.
func intIn(v string, lo, hi int64, except ...int64) error {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return fmt.Errorf("not an int")
	}
	if slices.Contains(except, n) {
		return fmt.Errorf("value %d is not allowed", n)
	}
	if n < lo || n > hi {
		return fmt.Errorf("value must be in [%d, %d]", lo, hi)
	}
	return nil
}

func boolean(v string) error {
	if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
		return fmt.Errorf("expected true or false")
	}
	return nil
}

func ratio(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return fmt.Errorf("not a double")
	}
	if !(f >= 0 && f <= 1) {
		return fmt.Errorf("value must be in [0, 1]")
	}
	return nil
}

func oneOf(allowed []string) func(string) error {
	return func(v string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("string must be one of: %s", strings.Join(allowed, ", "))
		}
		return nil
	}
}

func listOf(allowed []string) func(string) error {
	return func(v string) error {
		for _, item := range splitList(v) {
			if !slices.Contains(allowed, item) {
				return fmt.Errorf("invalid value %s; string must be one of: %s", item, strings.Join(allowed, ", "))
			}
		}
		return nil
	}
}

func throttledList(v string) error {
	items := splitList(v)
	if len(items) == 1 && items[0] == "*" {
		return nil
	}
	for _, item := range items {
		if !throttledReplica.MatchString(item) {
			return fmt.Errorf("must be * or a list of partitionId:brokerId pairs")
		}
	}
	return nil
}
