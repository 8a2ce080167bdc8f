package topicconfig

import (
	"errors"
	"testing"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		err         error
	}{
		{"retention.ms", "-1", nil},
		{"retention.ms", " 60000 ", nil},
		{"retention.ms", "-2", ErrInvalidValue},
		{"retention.ms", "1e3", ErrInvalidValue},
		{"retention.bytes", "0", nil},
		{"max.message.bytes", "2147483648", ErrInvalidValue},
		{"segment.bytes", "13", ErrInvalidValue},
		{"segment.bytes", "1048575", ErrInvalidValue},
		{"segment.bytes", "1048576", nil},
		{"segment.ms", "0", ErrInvalidValue},
		{"cleanup.policy", "compact, delete", nil},
		{"cleanup.policy", "", nil},
		{"cleanup.policy", "archive", ErrInvalidValue},
		{"compression.type", "zstd", nil},
		{"compression.type", "ZSTD", ErrInvalidValue},
		{"compression.gzip.level", "0", ErrInvalidValue},
		{"compression.gzip.level", "-1", nil},
		{"message.timestamp.type", "LogAppendTime", nil},
		{"message.timestamp.type", "logappendtime", ErrInvalidValue},
		{"unclean.leader.election.enable", "TRUE", nil},
		{"preallocate", "1", ErrInvalidValue},
		{"min.cleanable.dirty.ratio", "0.1", nil},
		{"min.cleanable.dirty.ratio", "NaN", ErrInvalidValue},
		{"leader.replication.throttled.replicas", "*", nil},
		{"leader.replication.throttled.replicas", "0:1,1:2", nil},
		{"leader.replication.throttled.replicas", "0-1", ErrInvalidValue},
		{"no.such.config", "1", ErrUnknownConfig},
	} {
		_, err := Validate(tc.name, tc.value)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Validate(%s, %q) = %v, want %v", tc.name, tc.value, err, tc.err)
		}
	}
}

func TestAllDefaultsValid(t *testing.T) {
	for _, d := range All() {
		if _, err := Validate(d.Name, d.Default); err != nil {
			t.Errorf("default of %s does not validate: %v", d.Name, err)
		}
		if d.Type == coordinatorv1.ConfigType_CONFIG_TYPE_UNSPECIFIED || d.Doc == "" {
			t.Errorf("%s lacks a type or doc", d.Name)
		}
	}
}

func TestAlter(t *testing.T) {
	set := func(n, v string) Alteration {
		return Alteration{Name: n, Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: v}
	}
	op := func(o coordinatorv1.AlterOp, n, v string) Alteration { return Alteration{Name: n, Op: o, Value: v} }
	cur := map[string]string{"retention.ms": "1000"}
	got, err := Alter(cur, []Alteration{
		set("retention.bytes", "10"),
		op(coordinatorv1.AlterOp_ALTER_OP_DELETE, "retention.ms", ""),
		op(coordinatorv1.AlterOp_ALTER_OP_APPEND, "cleanup.policy", "compact,delete"),
		op(coordinatorv1.AlterOp_ALTER_OP_DELETE, "segment.ms", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	if cur["retention.ms"] != "1000" {
		t.Fatal("Alter modified its input")
	}
	if len(got) != 2 || got["retention.bytes"] != "10" || got["cleanup.policy"] != "delete,compact" {
		t.Fatalf("Alter = %v", got)
	}
	got, err = Alter(got, []Alteration{op(coordinatorv1.AlterOp_ALTER_OP_SUBTRACT, "cleanup.policy", "delete,compact")})
	if err != nil || got["cleanup.policy"] != "" {
		t.Fatalf("subtract all = %v, %v", got, err)
	}
	for _, tc := range []struct {
		alts []Alteration
		err  error
	}{
		{[]Alteration{op(coordinatorv1.AlterOp_ALTER_OP_APPEND, "retention.ms", "1")}, ErrNotList},
		{[]Alteration{op(coordinatorv1.AlterOp_ALTER_OP_UNSPECIFIED, "retention.ms", "1")}, ErrInvalidRequest},
		{[]Alteration{set("retention.ms", "1"), op(coordinatorv1.AlterOp_ALTER_OP_DELETE, "retention.ms", "")}, ErrInvalidRequest},
		{[]Alteration{set("nope", "1")}, ErrUnknownConfig},
		{[]Alteration{op(coordinatorv1.AlterOp_ALTER_OP_DELETE, "nope", "")}, ErrUnknownConfig},
		{[]Alteration{op(coordinatorv1.AlterOp_ALTER_OP_APPEND, "cleanup.policy", "shred")}, ErrInvalidValue},
	} {
		if _, err := Alter(nil, tc.alts); !errors.Is(err, tc.err) {
			t.Errorf("Alter(%v) = %v, want %v", tc.alts, err, tc.err)
		}
	}
}

// TestReplace: the SET entries become the whole set, validated as Alter validates; any
// other op, a repeated name, an unknown name or a bad value is refused.
func TestReplace(t *testing.T) {
	set := func(n, v string) Alteration {
		return Alteration{Name: n, Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: v}
	}
	got, err := Replace([]Alteration{set("retention.bytes", " 10 "), set("cleanup.policy", "compact")})
	if err != nil || len(got) != 2 || got["retention.bytes"] != "10" || got["cleanup.policy"] != "compact" {
		t.Fatalf("Replace = %v, %v", got, err)
	}
	if got, err := Replace(nil); err != nil || len(got) != 0 {
		t.Fatalf("Replace(nil) = %v, %v; want no overrides", got, err)
	}
	for _, tc := range []struct {
		alts []Alteration
		err  error
	}{
		{[]Alteration{set("retention.ms", "1"), {Name: "segment.ms", Op: coordinatorv1.AlterOp_ALTER_OP_DELETE}}, ErrInvalidRequest},
		{[]Alteration{{Name: "cleanup.policy", Op: coordinatorv1.AlterOp_ALTER_OP_APPEND, Value: "compact"}}, ErrInvalidRequest},
		{[]Alteration{set("retention.ms", "1"), set("retention.ms", "2")}, ErrInvalidRequest},
		{[]Alteration{set("nope", "1")}, ErrUnknownConfig},
		{[]Alteration{set("retention.ms", "-2")}, ErrInvalidValue},
	} {
		if _, err := Replace(tc.alts); !errors.Is(err, tc.err) {
			t.Errorf("Replace(%v) = %v, want %v", tc.alts, err, tc.err)
		}
	}
}

func TestChannelConfig(t *testing.T) {
	def := ChannelConfig(nil)
	if def.GetRetentionMs() != 604800000 || def.GetRetentionBytes() != -1 || def.GetMaxMessageBytes() != 1048588 ||
		def.GetSegmentBytes() != 1073741824 || def.GetSegmentMs() != 604800000 ||
		def.GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_DELETE || def.GetTimestampType() != storagev1.TimestampType_TIMESTAMP_TYPE_CREATE_TIME {
		t.Fatalf("defaults = %v", def)
	}
	cc := ChannelConfig(map[string]string{"retention.ms": "0", "retention.bytes": "0", "cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"})
	if cc.GetRetentionMs() != 1 || cc.GetRetentionBytes() != 1 || cc.GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT ||
		cc.GetTimestampType() != storagev1.TimestampType_TIMESTAMP_TYPE_LOG_APPEND_TIME {
		t.Fatalf("overrides = %v", cc)
	}
	if def.GetTimestampBeforeMaxMs() != 0 || def.GetTimestampAfterMaxMs() != 0 {
		t.Fatalf("default timestamp limits = %d, %d; want 0 (Long.MAX_VALUE: none)", def.GetTimestampBeforeMaxMs(), def.GetTimestampAfterMaxMs())
	}
	ts := ChannelConfig(map[string]string{"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "0"})
	if ts.GetTimestampBeforeMaxMs() != 60000 || ts.GetTimestampAfterMaxMs() != 1 {
		t.Fatalf("timestamp limits = %d, %d; want 60000 and 1 (Kafka's 0)", ts.GetTimestampBeforeMaxMs(), ts.GetTimestampAfterMaxMs())
	}
}

func TestCompactionConfigs(t *testing.T) {
	def := ChannelConfig(nil)
	if def.GetMinCleanableDirtyRatio() != 0.5 || def.GetMinCompactionLagMs() != 0 || def.GetMaxCompactionLagMs() != 0 || def.GetDeleteRetentionMs() != 86400000 {
		t.Fatalf("compaction defaults = %v", def)
	}
	cc := ChannelConfig(map[string]string{"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0", "min.compaction.lag.ms": "5",
		"max.compaction.lag.ms": "70", "delete.retention.ms": "0"})
	if cc.GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT_DELETE || cc.GetMinCleanableDirtyRatio() != -1 ||
		cc.GetMinCompactionLagMs() != 5 || cc.GetMaxCompactionLagMs() != 70 || cc.GetDeleteRetentionMs() != -1 {
		t.Fatalf("compaction overrides = %v", cc)
	}
	for _, bad := range []map[string]string{
		{"min.cleanable.dirty.ratio": "1.5"},
		{"min.cleanable.dirty.ratio": "-0.1"},
		{"cleanup.policy": "compact,squash"},
		{"delete.retention.ms": "-1"},
		{"max.compaction.lag.ms": "0"},
		{"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "99"},
	} {
		if _, err := ValidateAll(bad); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("ValidateAll(%v) = %v, want ErrInvalidValue", bad, err)
		}
	}
	if _, err := Alter(map[string]string{"min.compaction.lag.ms": "100"}, []Alteration{{Name: "max.compaction.lag.ms", Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: "50"}}); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("Alter max < min = %v, want ErrInvalidValue", err)
	}
}
