package consumergroup

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func TestGroupConfigChecks(t *testing.T) {
	set := func(name, v string) *coordinatorv1.GroupAlteration {
		return &coordinatorv1.GroupAlteration{GroupId: "g", Alterations: []*coordinatorv1.ConfigAlteration{{Name: name, Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: v}}}
	}
	for _, c := range []struct {
		alt  *coordinatorv1.GroupAlteration
		code int16
	}{
		{set(ConfigShareAutoOffsetReset, "earliest"), 0},
		{set(ConfigShareAutoOffsetReset, "LATEST"), 0},
		{set(ConfigShareAutoOffsetReset, "by_duration:PT1H30M"), 0},
		{set(ConfigShareAutoOffsetReset, "by_duration:P2DT0.5S"), 0},
		{set(ConfigShareAutoOffsetReset, "by_duration:-PT1H"), kerr.InvalidConfig.Code},
		{set(ConfigShareAutoOffsetReset, "by_duration:PT"), kerr.InvalidConfig.Code},
		{set(ConfigShareAutoOffsetReset, "none"), kerr.InvalidConfig.Code},
		{set(ConfigShareIsolationLevel, "read_committed"), 0},
		{set(ConfigShareIsolationLevel, "READ_COMMITTED"), kerr.InvalidConfig.Code},
		{set(ConfigShareRecordLockDuration, "15000"), 0},
		{set(ConfigShareRecordLockDuration, "14999"), kerr.InvalidConfig.Code},
		{set(ConfigShareRecordLockDuration, "60001"), kerr.InvalidConfig.Code},
		{set(ConfigShareRecordLockDuration, "abc"), kerr.InvalidConfig.Code},
		{set(ConfigShareDeliveryCountLimit, "2"), 0},
		{set(ConfigShareDeliveryCountLimit, "11"), kerr.InvalidConfig.Code},
		{set(ConfigShareSessionTimeout, "45000"), 0},
		{set(ConfigShareSessionTimeout, "30000"), kerr.InvalidConfig.Code},
		{set(ConfigShareHeartbeatInterval, "15000"), 0},
		{set(ConfigShareHeartbeatInterval, "1000"), kerr.InvalidConfig.Code},
		{set("share.no.such.config", "1"), kerr.InvalidConfig.Code},
		{&coordinatorv1.GroupAlteration{GroupId: "g", Alterations: []*coordinatorv1.ConfigAlteration{{Name: ConfigShareDeliveryCountLimit, Op: coordinatorv1.AlterOp_ALTER_OP_APPEND, Value: "3"}}}, kerr.InvalidConfig.Code},
		{&coordinatorv1.GroupAlteration{GroupId: "g", Alterations: []*coordinatorv1.ConfigAlteration{{Name: ConfigShareDeliveryCountLimit, Op: coordinatorv1.AlterOp_ALTER_OP_DELETE}}}, 0},
		{&coordinatorv1.GroupAlteration{Alterations: []*coordinatorv1.ConfigAlteration{{Name: ConfigShareDeliveryCountLimit, Op: coordinatorv1.AlterOp_ALTER_OP_DELETE}}}, kerr.InvalidRequest.Code},
	} {
		if _, _, code, msg := checkGroupAlterations(c.alt); code != c.code {
			t.Errorf("%v: code %d (%s), want %d", c.alt.GetAlterations(), code, msg, c.code)
		}
	}
	for in, want := range map[string]time.Duration{"PT1H30M": 90 * time.Minute, "P1D": 24 * time.Hour, "pt0.25s": 250 * time.Millisecond, "PT10S": 10 * time.Second} {
		if got, err := parseISODuration(in); err != nil || got != want {
			t.Errorf("parse %s: %v %v, want %v", in, got, err, want)
		}
	}
}
