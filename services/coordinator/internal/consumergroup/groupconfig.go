package consumergroup

// Kafka group configs (ConfigResource type GROUP): the share group ones of KIP-932's
// GroupConfig, those storage-core's share partitions use and the members' session
// timeout and heartbeat interval. Values are checked as Kafka's GroupConfig checks
// them, with the broker's default bounds (group.share.min/max.record.lock.duration.ms
// 15000/60000, group.share.min/max.delivery.count.limit 2/10,
// group.share.min/max.session.timeout.ms 45000/60000,
// group.share.min/max.heartbeat.interval.ms 5000/15000).

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
)

// Group config names (Kafka GroupConfig).
const (
	ConfigShareAutoOffsetReset    = "share.auto.offset.reset"
	ConfigShareIsolationLevel     = "share.isolation.level"
	ConfigShareRecordLockDuration = "share.record.lock.duration.ms"
	ConfigShareDeliveryCountLimit = "share.delivery.count.limit"
	ConfigShareSessionTimeout     = "share.session.timeout.ms"
	ConfigShareHeartbeatInterval  = "share.heartbeat.interval.ms"
)

// groupConfigDef is one known group config: its default, type and check.
type groupConfigDef struct {
	name, def, doc string
	typ            coordinatorv1.ConfigType
	// check returns Kafka's message for a bad value, "" for a good one.
	check func(v string) string
}

var groupConfigDefs = []groupConfigDef{
	{ConfigShareAutoOffsetReset, "latest", "The strategy to initialize the share-partition start offset: earliest, latest or by_duration:<ISO-8601 duration>.",
		coordinatorv1.ConfigType_CONFIG_TYPE_STRING, checkAutoOffsetReset},
	{ConfigShareDeliveryCountLimit, "5", "The maximum number of delivery attempts for a record delivered to a share group.",
		coordinatorv1.ConfigType_CONFIG_TYPE_INT, intBetween(ConfigShareDeliveryCountLimit, 2, 10)},
	{ConfigShareIsolationLevel, "read_uncommitted", "Controls how to read records written transactionally: read_committed or read_uncommitted.",
		coordinatorv1.ConfigType_CONFIG_TYPE_STRING, func(v string) string {
			if v != "read_committed" && v != "read_uncommitted" {
				return fmt.Sprintf("Invalid value %s for configuration %s: String must be one of: read_committed, read_uncommitted", v, ConfigShareIsolationLevel)
			}
			return ""
		}},
	{ConfigShareHeartbeatInterval, "5000", "The heartbeat interval given to the members, in milliseconds.",
		coordinatorv1.ConfigType_CONFIG_TYPE_INT, intBetween(ConfigShareHeartbeatInterval, 5000, 15000)},
	{ConfigShareSessionTimeout, "45000", "The timeout to detect client failures when using the share group protocol, in milliseconds.",
		coordinatorv1.ConfigType_CONFIG_TYPE_INT, intBetween(ConfigShareSessionTimeout, 45000, 60000)},
	{ConfigShareRecordLockDuration, "30000", "The record acquisition lock duration in milliseconds for share groups.",
		coordinatorv1.ConfigType_CONFIG_TYPE_INT, intBetween(ConfigShareRecordLockDuration, 15000, 60000)},
}

func groupConfigDefFor(name string) (groupConfigDef, bool) {
	i := slices.IndexFunc(groupConfigDefs, func(d groupConfigDef) bool { return d.name == name })
	if i < 0 {
		return groupConfigDef{}, false
	}
	return groupConfigDefs[i], true
}

func intBetween(name string, lo, hi int) func(string) string {
	return func(v string) string {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
			return fmt.Sprintf("Invalid value %s for configuration %s: Not a number of type INT", v, name)
		case n < lo:
			return fmt.Sprintf("%s must be greater than or equal to %d", name, lo)
		case n > hi:
			return fmt.Sprintf("%s must be less than or equal to %d", name, hi)
		}
		return ""
	}
}

// checkAutoOffsetReset accepts Kafka's ShareGroupAutoOffsetResetStrategy values:
// earliest, latest (any case) and by_duration:<ISO-8601 duration, not negative>.
func checkAutoOffsetReset(v string) string {
	l := strings.ToLower(v)
	if l == "earliest" || l == "latest" {
		return ""
	}
	if d, ok := strings.CutPrefix(l, "by_duration:"); ok {
		if _, err := parseISODuration(d); err != nil {
			return fmt.Sprintf("Invalid value %s for configuration %s: %v", v, ConfigShareAutoOffsetReset, err)
		}
		return ""
	}
	return fmt.Sprintf("Invalid value %s for configuration %s: Invalid value `%s` for configuration %s. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.",
		v, ConfigShareAutoOffsetReset, v, ConfigShareAutoOffsetReset)
}

// isoDuration is java.time.Duration.parse's format without signs (Kafka refuses a
// negative by_duration): PnDTnHnMn.nS, case-insensitive.
var isoDuration = regexp.MustCompile(`^(?i)p(?:([0-9]+)d)?(?:t(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)(?:[.,]([0-9]{0,9}))?s)?)?$`)

// parseISODuration parses an ISO-8601 duration as Java's Duration.parse does (days,
// hours, minutes, seconds with a fraction), not negative.
func parseISODuration(v string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(v)
	if m == nil || strings.EqualFold(v, "p") || strings.HasSuffix(strings.ToLower(v), "t") {
		return 0, errors.New("text cannot be parsed to a Duration")
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil || n > int64(1<<62)/int64(unit) {
			return 0, errors.New("duration out of range")
		}
		d += time.Duration(n) * unit
	}
	if f := m[5]; f != "" {
		f += strings.Repeat("0", 9-len(f))
		ns, _ := strconv.Atoi(f)
		d += time.Duration(ns)
	}
	return d, nil
}

// groupConfigDefault is d's value when the group does not set it: the broker's session
// timeout and heartbeat interval, Kafka's defaults for the others.
func (s *ShareCoordinator) groupConfigDefault(d groupConfigDef) string {
	switch d.name {
	case ConfigShareSessionTimeout:
		return strconv.FormatInt(s.cfg.SessionTimeout.Milliseconds(), 10)
	case ConfigShareHeartbeatInterval:
		return strconv.FormatInt(s.cfg.HeartbeatInterval.Milliseconds(), 10)
	}
	return d.def
}

// DescribeGroupConfigs implements DescribeConfigs for GROUP resources.
func (s *ShareCoordinator) DescribeGroupConfigs(ctx context.Context, req *coordinatorv1.DescribeGroupConfigsRequest) (*coordinatorv1.DescribeGroupConfigsResponse, error) {
	resp := &coordinatorv1.DescribeGroupConfigsResponse{}
	for _, id := range req.GetGroupIds() {
		g := &coordinatorv1.GroupConfigs{GroupId: id}
		resp.Groups = append(resp.Groups, g)
		if id == "" {
			g.ErrorCode, g.ErrorMessage = int32(kerr.InvalidRequest.Code), "Group name can't be empty."
			continue
		}
		set, err := s.c.store.GroupConfigs(ctx, id)
		if err != nil {
			return nil, rpcerr.Status(err)
		}
		for _, d := range groupConfigDefs {
			if len(req.GetConfigNames()) > 0 && !slices.Contains(req.GetConfigNames(), d.name) {
				continue
			}
			e := &coordinatorv1.ConfigEntry{Name: d.name, Value: s.groupConfigDefault(d), Source: coordinatorv1.ConfigSource_CONFIG_SOURCE_DEFAULT, Type: d.typ, Documentation: d.doc}
			if v, ok := set[d.name]; ok {
				e.Value, e.Source = v, coordinatorv1.ConfigSource_CONFIG_SOURCE_GROUP
			}
			g.Entries = append(g.Entries, e)
		}
	}
	return resp, nil
}

// AlterGroupConfigs implements IncrementalAlterConfigs for GROUP resources: SET and
// DELETE of known configs; every change of a group is checked before any is stored.
func (s *ShareCoordinator) AlterGroupConfigs(ctx context.Context, req *coordinatorv1.AlterGroupConfigsRequest) (*coordinatorv1.AlterGroupConfigsResponse, error) {
	resp := &coordinatorv1.AlterGroupConfigsResponse{}
	for _, g := range req.GetGroups() {
		r := &coordinatorv1.GroupConfigResult{GroupId: g.GetGroupId()}
		resp.Results = append(resp.Results, r)
		set, del, code, msg := checkGroupAlterations(g)
		r.ErrorCode, r.ErrorMessage = int32(code), msg
		if code != 0 || req.GetValidateOnly() {
			continue
		}
		if err := s.c.store.AlterGroupConfigs(ctx, g.GetGroupId(), set, del); err != nil {
			return nil, rpcerr.Status(err)
		}
	}
	return resp, nil
}

// checkGroupAlterations returns the values to set and the names to delete, or a Kafka
// error code and message.
func checkGroupAlterations(g *coordinatorv1.GroupAlteration) (map[string]string, []string, int16, string) {
	if g.GetGroupId() == "" {
		return nil, nil, kerr.InvalidRequest.Code, "Group name can't be empty."
	}
	set := map[string]string{}
	var del []string
	for _, a := range g.GetAlterations() {
		d, ok := groupConfigDefFor(a.GetName())
		if !ok {
			return nil, nil, kerr.InvalidConfig.Code, "Unknown group config name: " + a.GetName()
		}
		switch a.GetOp() {
		case coordinatorv1.AlterOp_ALTER_OP_SET:
			if msg := d.check(a.GetValue()); msg != "" {
				return nil, nil, kerr.InvalidConfig.Code, msg
			}
			set[d.name] = a.GetValue()
		case coordinatorv1.AlterOp_ALTER_OP_DELETE:
			del = append(del, d.name)
		case coordinatorv1.AlterOp_ALTER_OP_APPEND, coordinatorv1.AlterOp_ALTER_OP_SUBTRACT:
			return nil, nil, kerr.InvalidConfig.Code, "Config value append is not allowed for config key: " + d.name
		default:
			return nil, nil, kerr.InvalidRequest.Code, "Unknown alter config operation for " + d.name
		}
	}
	return set, del, 0, ""
}

// GetShareGroupConfig returns the share settings set on a group (unset ones zero).
func (s *ShareCoordinator) GetShareGroupConfig(ctx context.Context, req *coordinatorv1.GetShareGroupConfigRequest) (*coordinatorv1.GetShareGroupConfigResponse, error) {
	set, err := s.c.store.GroupConfigs(ctx, req.GetGroupId())
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp := &coordinatorv1.GetShareGroupConfigResponse{
		AutoOffsetReset: strings.ToLower(set[ConfigShareAutoOffsetReset]), IsolationLevel: set[ConfigShareIsolationLevel],
	}
	if v, ok := strings.CutPrefix(resp.AutoOffsetReset, "by_duration:"); ok {
		if d, err := parseISODuration(v); err == nil {
			resp.AutoOffsetResetDurationMs = d.Milliseconds()
		}
	}
	if n, err := strconv.Atoi(strings.TrimSpace(set[ConfigShareRecordLockDuration])); err == nil {
		resp.RecordLockDurationMs = int32(n)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(set[ConfigShareDeliveryCountLimit])); err == nil {
		resp.DeliveryCountLimit = int32(n)
	}
	return resp, nil
}
