package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/natsx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// running is a coordinator started in-process for a test.
type running struct {
	srv    *Server
	client coordinatorv1.CoordinatorServiceClient
	stop   func()
}

// start runs a coordinator with cfg until the test ends (or stop is called) and waits
// until it is ready when wantReady.
func start(t *testing.T, cfg Config, wantReady bool) *running {
	t.Helper()
	srv, err := New(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial coordinator: %v", err)
	}
	var once sync.Once
	r := &running{srv: srv, client: coordinatorv1.NewCoordinatorServiceClient(cc)}
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			_ = cc.Close()
		})
	}
	t.Cleanup(r.stop)
	if wantReady {
		waitFor(t, "coordinator ready", func() error { return srv.Ready(ctx) })
	}
	return r
}

// waitFor polls cond until it returns nil, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 20s: %v", what, err)
		}
		<-tick.C
	}
}

// env is a test stack: a fresh database, the fake storage-core, NATS.
type env struct {
	cfg     Config
	storage *fakeStorage
	nc      *nats.Conn
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := testDatabase(t)
	natsURL := testNATS(t)
	fs := startFakeStorage(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return &env{
		cfg: Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", PostgresURL: db,
			StorageAddr: fs.addr, NATSURL: natsURL, ClusterID: randomClusterID()},
		storage: fs,
		nc:      nc,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createOne(t *testing.T, c coordinatorv1.CoordinatorServiceClient, name string, partitions int32, configs map[string]string) *coordinatorv1.TopicResult {
	t.Helper()
	resp, err := c.CreateTopics(ctxT(t), &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{{Name: name, Partitions: partitions, Configs: configs}}})
	if err != nil {
		t.Fatalf("CreateTopics %s: %v", name, err)
	}
	if len(resp.GetResults()) != 1 {
		t.Fatalf("CreateTopics %s: %d results", name, len(resp.GetResults()))
	}
	return resp.GetResults()[0]
}

func TestCreateAndGetTopics(t *testing.T) {
	e := newEnv(t)
	sub, err := e.nc.SubscribeSync(natsx.TopicsChangedSubject(e.cfg.ClusterID))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, e.cfg, true)

	res := createOne(t, r.client, "orders", 3, map[string]string{"retention.ms": " 1000 ", "cleanup.policy": "compact,delete"})
	if res.GetErrorCode() != 0 {
		t.Fatalf("create orders: %d %s", res.GetErrorCode(), res.GetErrorMessage())
	}
	if got := res.GetTopic(); got.GetPartitions() != 3 || len(got.GetTopicId()) != 16 || got.GetConfigs()["retention.ms"] != "1000" {
		t.Fatalf("created topic = %v", got)
	}
	if got, want := e.storage.names(), []string{"kafka.orders", "kafka.orders~1", "kafka.orders~2"}; !slices.Equal(got, want) {
		t.Fatalf("channels = %v, want %v", got, want)
	}
	cc := e.storage.config("kafka.orders~2")
	if cc.GetRetentionMs() != 1000 || cc.GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT_DELETE || cc.GetMaxMessageBytes() != 1048588 || cc.GetRetentionBytes() != -1 {
		t.Fatalf("channel config = %v", cc)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil || string(msg.Data) != "orders" {
		t.Fatalf("topics.changed: %v %v", msg, err)
	}

	again := createOne(t, r.client, "orders", 1, nil)
	if again.GetErrorCode() != 36 {
		t.Fatalf("re-create: code %d, want 36 TOPIC_ALREADY_EXISTS", again.GetErrorCode())
	}

	get, err := r.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{Names: []string{"orders", "missing", "bad~name"}})
	if err != nil {
		t.Fatal(err)
	}
	var codes []int32
	for _, tp := range get.GetTopics() {
		codes = append(codes, tp.GetErrorCode())
	}
	if !slices.Equal(codes, []int32{0, 3, 17}) {
		t.Fatalf("GetTopics codes = %v, want [0 3 17]", codes)
	}
	if string(get.GetTopics()[0].GetTopicId()) != string(res.GetTopic().GetTopicId()) {
		t.Fatal("GetTopics returned a different topic id")
	}
	createOne(t, r.client, "another", -1, nil)
	all, err := r.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetTopics()) != 2 || all.GetTopics()[0].GetName() != "another" || all.GetTopics()[0].GetPartitions() != 1 {
		t.Fatalf("GetTopics all = %v", all.GetTopics())
	}
}

func TestCreateTopicsValidation(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	if res := createOne(t, r.client, "a_b", 1, nil); res.GetErrorCode() != 0 {
		t.Fatalf("create a_b: %v", res)
	}
	for _, tc := range []struct {
		name       string
		topic      string
		partitions int32
		configs    map[string]string
		code       int32
	}{
		{"tilde", "bad~name", 1, nil, 17},
		{"empty name", "", 1, nil, 17},
		{"dot", ".", 1, nil, 17},
		{"space", "has space", 1, nil, 17},
		{"collision", "a.b", 1, nil, 17},
		{"zero partitions", "p0", 0, nil, 37},
		{"too many partitions", "p257", 257, nil, 37},
		{"minus two partitions", "pm2", -2, nil, 37},
		{"unknown config", "c1", 1, map[string]string{"no.such.config": "1"}, 40},
		{"bad long", "c2", 1, map[string]string{"retention.ms": "abc"}, 40},
		{"long below minimum", "c3", 1, map[string]string{"retention.ms": "-2"}, 40},
		{"bad policy", "c4", 1, map[string]string{"cleanup.policy": "delete,shred"}, 40},
		{"bad timestamp type", "c5", 1, map[string]string{"message.timestamp.type": "Now"}, 40},
		{"bad compression", "c6", 1, map[string]string{"compression.type": "brotli"}, 40},
		{"bad bool", "c7", 1, map[string]string{"preallocate": "yes"}, 40},
		{"bad ratio", "c8", 1, map[string]string{"min.cleanable.dirty.ratio": "1.5"}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := createOne(t, r.client, tc.topic, tc.partitions, tc.configs)
			if res.GetErrorCode() != tc.code || res.GetErrorMessage() == "" {
				t.Fatalf("code %d (%q), want %d", res.GetErrorCode(), res.GetErrorMessage(), tc.code)
			}
		})
	}

	dup, err := r.client.CreateTopics(ctxT(t), &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{
		{Name: "twice", Partitions: 1}, {Name: "once", Partitions: 2}, {Name: "twice", Partitions: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := []int32{dup.Results[0].ErrorCode, dup.Results[1].ErrorCode, dup.Results[2].ErrorCode}; !slices.Equal(got, []int32{42, 0, 42}) {
		t.Fatalf("duplicate names: codes %v, want [42 0 42]", got)
	}

	vo, err := r.client.CreateTopics(ctxT(t), &coordinatorv1.CreateTopicsRequest{ValidateOnly: true, Topics: []*coordinatorv1.CreatableTopic{
		{Name: "dry", Partitions: 4, Configs: map[string]string{"retention.ms": "5"}}, {Name: "a_b", Partitions: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if vo.Results[0].GetErrorCode() != 0 || vo.Results[0].GetTopic().GetPartitions() != 4 || vo.Results[1].GetErrorCode() != 36 {
		t.Fatalf("validate_only results = %v", vo.Results)
	}
	if slices.ContainsFunc(e.storage.names(), func(n string) bool { return strings.HasPrefix(n, "kafka.dry") }) {
		t.Fatal("validate_only created channels")
	}
	get, err := r.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{Names: []string{"dry"}})
	if err != nil || get.GetTopics()[0].GetErrorCode() != 3 {
		t.Fatalf("validate_only topic visible: %v %v", get, err)
	}
}

func TestCreateTopicStorageFailure(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	e.storage.setFailCreate("kafka.flaky~2", true)
	res := createOne(t, r.client, "flaky", 4, nil)
	if res.GetErrorCode() != 56 {
		t.Fatalf("code %d, want 56 KAFKA_STORAGE_ERROR", res.GetErrorCode())
	}
	if n := e.storage.names(); len(n) != 0 {
		t.Fatalf("channels left after a failed create: %v", n)
	}
	get, err := r.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{Names: []string{"flaky"}})
	if err != nil || get.GetTopics()[0].GetErrorCode() != 3 {
		t.Fatalf("failed topic visible: %v %v", get, err)
	}
	e.storage.setFailCreate("kafka.flaky~2", false)
	if res := createOne(t, r.client, "flaky", 4, nil); res.GetErrorCode() != 0 {
		t.Fatalf("retry: %v", res)
	}
}

func TestCreatePartitions(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "grow", 1, map[string]string{"retention.ms": "12345"})
	grow := func(name string, n int32, validateOnly bool) *coordinatorv1.TopicResult {
		resp, err := r.client.CreatePartitions(ctxT(t), &coordinatorv1.CreatePartitionsRequest{ValidateOnly: validateOnly, Topics: []*coordinatorv1.PartitionGrowth{{Name: name, Count: n}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0]
	}
	if res := grow("grow", 3, true); res.GetErrorCode() != 0 || len(e.storage.names()) != 1 {
		t.Fatalf("validate_only grow: %v, channels %v", res, e.storage.names())
	}
	if res := grow("grow", 3, false); res.GetErrorCode() != 0 || res.GetTopic().GetPartitions() != 3 {
		t.Fatalf("grow to 3: %v", res)
	}
	if got := e.storage.names(); !slices.Equal(got, []string{"kafka.grow", "kafka.grow~1", "kafka.grow~2"}) {
		t.Fatalf("channels = %v", got)
	}
	if e.storage.config("kafka.grow~2").GetRetentionMs() != 12345 {
		t.Fatal("new partition does not carry the topic's retention.ms")
	}
	for _, tc := range []struct {
		name string
		n    int32
		code int32
	}{{"grow", 2, 37}, {"grow", 3, 37}, {"grow", 257, 37}, {"missing", 2, 3}} {
		if res := grow(tc.name, tc.n, false); res.GetErrorCode() != tc.code {
			t.Errorf("grow %s to %d: code %d, want %d", tc.name, tc.n, res.GetErrorCode(), tc.code)
		}
	}
	get, err := r.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{Names: []string{"grow"}})
	if err != nil || get.GetTopics()[0].GetPartitions() != 3 {
		t.Fatalf("GetTopics after grow: %v %v", get, err)
	}
}

func TestDeleteTopics(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "byname", 2, nil)
	byID := createOne(t, r.client, "byid", 3, nil)
	createOne(t, r.client, "kept", 1, nil)
	// Committed offsets of a topic go when it is deleted (Kafka's onPartitionsDeleted);
	// those of other topics stay.
	cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	groups := coordinatorv1.NewGroupCoordinatorServiceClient(cc)
	for _, g := range []string{"g1", "g2"} {
		commit, err := groups.OffsetCommit(ctxT(t), &coordinatorv1.OffsetCommitRequest{GroupId: g, GenerationId: -1, Topics: []*coordinatorv1.OffsetCommitTopic{
			{Name: "byname", Partitions: []*coordinatorv1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 5, CommittedLeaderEpoch: -1}, {Partition: 1, CommittedOffset: 6, CommittedLeaderEpoch: -1}}},
			{Name: "kept", Partitions: []*coordinatorv1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 7, CommittedLeaderEpoch: -1}}},
		}})
		if err != nil || commit.GetTopics()[0].GetPartitions()[0].GetErrorCode() != 0 {
			t.Fatalf("OffsetCommit %s: %v %v", g, err, commit)
		}
	}
	resp, err := r.client.DeleteTopics(ctxT(t), &coordinatorv1.DeleteTopicsRequest{
		Names:    []string{"byname", "missing"},
		TopicIds: [][]byte{byID.GetTopic().GetTopicId(), make([]byte, 16), {1, 2, 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for _, res := range resp.GetResults() {
		got = append(got, res.GetErrorCode())
	}
	if !slices.Equal(got, []int32{0, 3, 0, 100, 42}) {
		t.Fatalf("delete codes = %v, want [0 3 0 100 42]", got)
	}
	if resp.GetResults()[2].GetName() != "byid" {
		t.Fatalf("delete by id names %q", resp.GetResults()[2].GetName())
	}
	if n := e.storage.names(); !slices.Equal(n, []string{"kafka.kept"}) {
		t.Fatalf("channels left: %v, want [kafka.kept]", n)
	}
	all, err := r.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{All: true})
	if err != nil || len(all.GetTopics()) != 1 || all.GetTopics()[0].GetName() != "kept" {
		t.Fatalf("topics left: %v %v", all, err)
	}
	createOne(t, r.client, "byname", 2, nil)
	for _, g := range []string{"g1", "g2"} {
		fetched, err := groups.OffsetFetch(ctxT(t), &coordinatorv1.OffsetFetchRequest{Groups: []*coordinatorv1.OffsetFetchGroup{{GroupId: g, AllTopics: true}}})
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, ft := range fetched.GetGroups()[0].GetTopics() {
			for _, fp := range ft.GetPartitions() {
				left = append(left, fmt.Sprintf("%s/%d@%d", ft.GetName(), fp.GetPartition(), fp.GetCommittedOffset()))
			}
		}
		if !slices.Equal(left, []string{"kept/0@7"}) {
			t.Errorf("group %s offsets after deleting and re-creating byname: %v, want [kept/0@7]", g, left)
		}
	}
	again := createOne(t, r.client, "byid", 1, nil)
	if again.GetErrorCode() != 0 || string(again.GetTopic().GetTopicId()) == string(byID.GetTopic().GetTopicId()) {
		t.Fatalf("re-create after delete: %v", again)
	}
}

func TestTopicConfigs(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "cfg", 2, map[string]string{"retention.ms": "1000"})

	describe := func(names ...string) map[string]*coordinatorv1.ConfigEntry {
		resp, err := r.client.DescribeTopicConfigs(ctxT(t), &coordinatorv1.DescribeTopicConfigsRequest{Names: []string{"cfg"}, ConfigNames: names})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*coordinatorv1.ConfigEntry{}
		for _, e := range resp.GetTopics()[0].GetEntries() {
			out[e.GetName()] = e
		}
		return out
	}
	all := describe()
	if len(all) < 25 {
		t.Fatalf("only %d configs described", len(all))
	}
	if e := all["retention.ms"]; e.GetValue() != "1000" || e.GetSource() != coordinatorv1.ConfigSource_CONFIG_SOURCE_TOPIC || e.GetType() != coordinatorv1.ConfigType_CONFIG_TYPE_LONG {
		t.Fatalf("retention.ms = %v", e)
	}
	if e := all["cleanup.policy"]; e.GetValue() != "delete" || e.GetSource() != coordinatorv1.ConfigSource_CONFIG_SOURCE_DEFAULT || e.GetType() != coordinatorv1.ConfigType_CONFIG_TYPE_LIST {
		t.Fatalf("cleanup.policy = %v", e)
	}
	if e := all["max.message.bytes"]; e.GetValue() != "1048588" || e.GetType() != coordinatorv1.ConfigType_CONFIG_TYPE_INT {
		t.Fatalf("max.message.bytes = %v", e)
	}
	if some := describe("segment.bytes", "nope"); len(some) != 1 || some["segment.bytes"].GetValue() != "1073741824" {
		t.Fatalf("filtered describe = %v", some)
	}
	missing, err := r.client.DescribeTopicConfigs(ctxT(t), &coordinatorv1.DescribeTopicConfigsRequest{Names: []string{"nope"}})
	if err != nil || missing.GetTopics()[0].GetErrorCode() != 3 {
		t.Fatalf("describe missing topic: %v %v", missing, err)
	}
	// Kafka's internal topics: described with the configs Kafka creates them with.
	internal, err := r.client.DescribeTopicConfigs(ctxT(t), &coordinatorv1.DescribeTopicConfigsRequest{Names: []string{"__consumer_offsets", "__transaction_state"}})
	if err != nil || len(internal.GetTopics()) != 2 {
		t.Fatalf("describe internal topics: %v %v", internal, err)
	}
	for i, want := range []map[string]string{
		{"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"},
		{"cleanup.policy": "compact", "compression.type": "uncompressed", "segment.bytes": "104857600", "unclean.leader.election.enable": "false"},
	} {
		tc := internal.GetTopics()[i]
		set := map[string]string{}
		for _, e := range tc.GetEntries() {
			if e.GetSource() == coordinatorv1.ConfigSource_CONFIG_SOURCE_TOPIC {
				set[e.GetName()] = e.GetValue()
			}
		}
		if tc.GetErrorCode() != 0 || len(tc.GetEntries()) != len(all) || !maps.Equal(set, want) {
			t.Errorf("%s: error %d, %d entries, set on the topic %v; want %v", tc.GetName(), tc.GetErrorCode(), len(tc.GetEntries()), set, want)
		}
	}

	alter := func(validateOnly bool, alts ...*coordinatorv1.ConfigAlteration) *coordinatorv1.TopicResult {
		resp, err := r.client.AlterTopicConfigs(ctxT(t), &coordinatorv1.AlterTopicConfigsRequest{ValidateOnly: validateOnly, Topics: []*coordinatorv1.TopicAlteration{{Name: "cfg", Alterations: alts}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0]
	}
	set := func(n, v string) *coordinatorv1.ConfigAlteration {
		return &coordinatorv1.ConfigAlteration{Name: n, Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: v}
	}
	op := func(o coordinatorv1.AlterOp, n, v string) *coordinatorv1.ConfigAlteration {
		return &coordinatorv1.ConfigAlteration{Name: n, Op: o, Value: v}
	}

	if res := alter(true, set("retention.bytes", "999")); res.GetErrorCode() != 0 || describe("retention.bytes")["retention.bytes"].GetValue() != "-1" {
		t.Fatalf("validate_only alter changed something: %v", res)
	}
	if res := alter(false, set("retention.bytes", "999"), op(coordinatorv1.AlterOp_ALTER_OP_DELETE, "retention.ms", ""), set("message.timestamp.type", "LogAppendTime")); res.GetErrorCode() != 0 {
		t.Fatalf("alter: %v", res)
	}
	got := describe()
	if got["retention.bytes"].GetValue() != "999" || got["retention.ms"].GetValue() != "604800000" || got["retention.ms"].GetSource() != coordinatorv1.ConfigSource_CONFIG_SOURCE_DEFAULT {
		t.Fatalf("after alter: retention.bytes %v retention.ms %v", got["retention.bytes"], got["retention.ms"])
	}
	for _, ch := range []string{"kafka.cfg", "kafka.cfg~1"} {
		cc := e.storage.config(ch)
		if cc.GetRetentionBytes() != 999 || cc.GetRetentionMs() != 604800000 || cc.GetTimestampType() != storagev1.TimestampType_TIMESTAMP_TYPE_LOG_APPEND_TIME {
			t.Fatalf("%s config after alter = %v", ch, cc)
		}
	}

	if res := alter(false, op(coordinatorv1.AlterOp_ALTER_OP_APPEND, "cleanup.policy", "compact")); res.GetErrorCode() != 0 || res.GetTopic().GetConfigs()["cleanup.policy"] != "delete,compact" {
		t.Fatalf("append: %v", res)
	}
	if e.storage.config("kafka.cfg~1").GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT_DELETE {
		t.Fatal("append not pushed to storage")
	}
	if res := alter(false, op(coordinatorv1.AlterOp_ALTER_OP_SUBTRACT, "cleanup.policy", "delete")); res.GetTopic().GetConfigs()["cleanup.policy"] != "compact" {
		t.Fatalf("subtract: %v", res)
	}
	if e.storage.config("kafka.cfg").GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_COMPACT {
		t.Fatal("subtract not pushed to storage")
	}

	for _, tc := range []struct {
		name string
		alts []*coordinatorv1.ConfigAlteration
		code int32
	}{
		{"append to a long", []*coordinatorv1.ConfigAlteration{op(coordinatorv1.AlterOp_ALTER_OP_APPEND, "retention.ms", "5")}, 40},
		{"unknown config", []*coordinatorv1.ConfigAlteration{set("no.such", "1")}, 40},
		{"bad value", []*coordinatorv1.ConfigAlteration{set("segment.ms", "0")}, 40},
		{"unspecified op", []*coordinatorv1.ConfigAlteration{op(coordinatorv1.AlterOp_ALTER_OP_UNSPECIFIED, "retention.ms", "5")}, 42},
		{"same config twice", []*coordinatorv1.ConfigAlteration{set("retention.ms", "5"), set("retention.ms", "6")}, 42},
	} {
		if res := alter(false, tc.alts...); res.GetErrorCode() != tc.code {
			t.Errorf("%s: code %d (%s), want %d", tc.name, res.GetErrorCode(), res.GetErrorMessage(), tc.code)
		}
	}
	resp, err := r.client.AlterTopicConfigs(ctxT(t), &coordinatorv1.AlterTopicConfigsRequest{Topics: []*coordinatorv1.TopicAlteration{{Name: "nope", Alterations: []*coordinatorv1.ConfigAlteration{set("retention.ms", "5")}}}})
	if err != nil || resp.GetResults()[0].GetErrorCode() != 3 {
		t.Fatalf("alter missing topic: %v %v", resp, err)
	}
}

// TestReplaceTopicConfigs: with replace (Kafka AlterConfigs) the SETs become the whole
// set of overrides, so configs not named return to their defaults, in Postgres and on
// every partition's channel; validate_only and a refused value change nothing.
func TestReplaceTopicConfigs(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "rep", 2, map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"})
	set := func(n, v string) *coordinatorv1.ConfigAlteration {
		return &coordinatorv1.ConfigAlteration{Name: n, Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: v}
	}
	replace := func(validateOnly bool, alts ...*coordinatorv1.ConfigAlteration) *coordinatorv1.TopicResult {
		resp, err := r.client.AlterTopicConfigs(ctxT(t), &coordinatorv1.AlterTopicConfigsRequest{Replace: true, ValidateOnly: validateOnly, Topics: []*coordinatorv1.TopicAlteration{{Name: "rep", Alterations: alts}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0]
	}
	overrides := func() map[string]string {
		resp, err := r.client.DescribeTopicConfigs(ctxT(t), &coordinatorv1.DescribeTopicConfigsRequest{Names: []string{"rep"}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range resp.GetTopics()[0].GetEntries() {
			if c.GetSource() == coordinatorv1.ConfigSource_CONFIG_SOURCE_TOPIC {
				out[c.GetName()] = c.GetValue()
			}
		}
		return out
	}
	before := map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}

	if res := replace(true, set("retention.bytes", "999")); res.GetErrorCode() != 0 || !maps.Equal(res.GetTopic().GetConfigs(), map[string]string{"retention.bytes": "999"}) {
		t.Fatalf("validate_only replace: %v", res)
	}
	if got := overrides(); !maps.Equal(got, before) {
		t.Fatalf("validate_only replace changed the overrides: %v", got)
	}
	for _, tc := range []struct {
		name string
		alts []*coordinatorv1.ConfigAlteration
		code int32
	}{
		{"bad value", []*coordinatorv1.ConfigAlteration{set("retention.bytes", "1"), set("segment.ms", "0")}, 40},
		{"unknown config", []*coordinatorv1.ConfigAlteration{set("no.such", "1")}, 40},
		{"delete op", []*coordinatorv1.ConfigAlteration{{Name: "retention.ms", Op: coordinatorv1.AlterOp_ALTER_OP_DELETE}}, 42},
		{"same config twice", []*coordinatorv1.ConfigAlteration{set("retention.ms", "5"), set("retention.ms", "6")}, 42},
	} {
		if res := replace(false, tc.alts...); res.GetErrorCode() != tc.code {
			t.Errorf("%s: code %d (%s), want %d", tc.name, res.GetErrorCode(), res.GetErrorMessage(), tc.code)
		}
	}
	if got := overrides(); !maps.Equal(got, before) {
		t.Fatalf("a refused replace changed the overrides: %v", got)
	}

	if res := replace(false, set("retention.bytes", "999")); res.GetErrorCode() != 0 {
		t.Fatalf("replace: %v", res)
	}
	if got := overrides(); !maps.Equal(got, map[string]string{"retention.bytes": "999"}) {
		t.Fatalf("after replace the overrides are %v, want only retention.bytes", got)
	}
	for _, ch := range []string{"kafka.rep", "kafka.rep~1"} {
		cc := e.storage.config(ch)
		if cc.GetRetentionBytes() != 999 || cc.GetRetentionMs() != 604800000 || cc.GetCleanupPolicy() != storagev1.CleanupPolicy_CLEANUP_POLICY_DELETE {
			t.Fatalf("%s config after replace = %v", ch, cc)
		}
	}
	if res := replace(false); res.GetErrorCode() != 0 || len(overrides()) != 0 {
		t.Fatalf("empty replace: %v, overrides %v", res, overrides())
	}
}

func TestInitProducerIDAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	init := func(c coordinatorv1.CoordinatorServiceClient, req *coordinatorv1.InitProducerIdRequest) *coordinatorv1.InitProducerIdResponse {
		resp, err := c.InitProducerId(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	fresh := &coordinatorv1.InitProducerIdRequest{ProducerId: -1, ProducerEpoch: -1}
	seen := map[int64]bool{}
	var highest int64 = -1
	for range 5 {
		resp := init(r.client, fresh)
		if resp.GetErrorCode() != 0 || resp.GetProducerEpoch() != 0 || seen[resp.GetProducerId()] || resp.GetProducerId() < 0 {
			t.Fatalf("fresh id: %v (seen %v)", resp, seen)
		}
		seen[resp.GetProducerId()] = true
		highest = max(highest, resp.GetProducerId())
	}
	// Transactional ids go to the transaction coordinator: timeout checked, then a
	// fresh id, then the same id with the epoch bumped (fencing the first producer).
	if resp := init(r.client, &coordinatorv1.InitProducerIdRequest{TransactionalId: "tx", ProducerId: -1, ProducerEpoch: -1}); resp.GetErrorCode() != 50 {
		t.Fatalf("transactional without a timeout: %v, want INVALID_TRANSACTION_TIMEOUT (50)", resp)
	}
	txReq := &coordinatorv1.InitProducerIdRequest{TransactionalId: "tx", TransactionTimeoutMs: 60000, ProducerId: -1, ProducerEpoch: -1}
	tx1 := init(r.client, txReq)
	if tx1.GetErrorCode() != 0 || tx1.GetProducerEpoch() != 0 || seen[tx1.GetProducerId()] {
		t.Fatalf("transactional: %v (seen %v)", tx1, seen)
	}
	seen[tx1.GetProducerId()] = true
	highest = max(highest, tx1.GetProducerId())
	if tx2 := init(r.client, txReq); tx2.GetErrorCode() != 0 || tx2.GetProducerId() != tx1.GetProducerId() || tx2.GetProducerEpoch() != 1 {
		t.Fatalf("transactional again: %v, want id %d epoch 1", tx2, tx1.GetProducerId())
	}
	if resp := init(r.client, &coordinatorv1.InitProducerIdRequest{ProducerId: 7, ProducerEpoch: 3}); resp.GetProducerId() != 7 || resp.GetProducerEpoch() != 4 {
		t.Fatalf("bump: %v", resp)
	}
	if resp := init(r.client, &coordinatorv1.InitProducerIdRequest{ProducerId: 7, ProducerEpoch: 32766}); resp.GetProducerId() == 7 || resp.GetProducerEpoch() != 0 || seen[resp.GetProducerId()] {
		t.Fatalf("exhausted epoch: %v", resp)
	} else {
		seen[resp.GetProducerId()] = true
		highest = max(highest, resp.GetProducerId())
	}
	if resp := init(r.client, &coordinatorv1.InitProducerIdRequest{ProducerId: 7, ProducerEpoch: -1}); resp.GetErrorCode() != 42 {
		t.Fatalf("id without epoch: %v, want 42", resp)
	}

	r.stop()
	r2 := start(t, e.cfg, true)
	for range 3 {
		resp := init(r2.client, fresh)
		if resp.GetProducerId() <= highest {
			t.Fatalf("after restart got id %d, not above %d handed out before", resp.GetProducerId(), highest)
		}
	}
}

func TestReadinessAndUnavailable(t *testing.T) {
	e := newEnv(t)
	// Postgres that cannot be reached: a closed port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	cfg := e.cfg
	cfg.PostgresURL = "postgres://postgres@" + dead + "/tributary?sslmode=disable&connect_timeout=1"
	r := start(t, cfg, false)
	body, code := readyz(t, r.srv.HTTPAddr())
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: postgres:") {
		t.Fatalf("readyz = %d %q", code, body)
	}
	_, err = r.client.CreateTopics(ctxT(t), &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{{Name: "x", Partitions: 1}}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("CreateTopics without Postgres: %v, want UNAVAILABLE", err)
	}
	_, err = r.client.InitProducerId(ctxT(t), &coordinatorv1.InitProducerIdRequest{ProducerId: -1, ProducerEpoch: -1})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("InitProducerId without Postgres: %v, want UNAVAILABLE", err)
	}
	r.stop()

	ok := start(t, e.cfg, true)
	createOne(t, ok.client, "counted", 1, nil)
	if body, code := readyz(t, ok.srv.HTTPAddr()); code != http.StatusOK {
		t.Fatalf("readyz = %d %q", code, body)
	}
	e.storage.srv.Stop()
	waitFor(t, "readyz reports storage-core", func() error {
		body, code := readyz(t, ok.srv.HTTPAddr())
		if code == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: storage-core:") {
			return nil
		}
		return errors.New(body)
	})
	metrics, _ := get(t, "http://"+ok.srv.HTTPAddr()+"/metrics")
	for _, want := range []string{"tributary_coordinator_topics ", "tributary_coordinator_requests_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func readyz(t *testing.T, addr string) (string, int) {
	return get(t, "http://"+addr+"/readyz")
}

func get(t *testing.T, u string) (string, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

// TestConcurrentCreatesAcrossReplicas races creates of the same topic, and of colliding
// names, on two coordinators sharing one database: exactly one wins each race.
func TestConcurrentCreatesAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	a := start(t, e.cfg, true)
	b := start(t, e.cfg, true)
	clients := []coordinatorv1.CoordinatorServiceClient{a.client, b.client}
	names := []string{"race", "race", "race", "race", "x.y", "x_y", "x.y", "x_y"}
	codes := make([]int32, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			resp, err := clients[i%2].CreateTopics(ctxT(t), &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{{Name: n, Partitions: 2}}})
			if err != nil {
				t.Errorf("create %s: %v", n, err)
				return
			}
			codes[i] = resp.GetResults()[0].GetErrorCode()
		})
	}
	wg.Wait()
	count := func(from, to int, code int32) int {
		c := 0
		for _, v := range codes[from:to] {
			if v == code {
				c++
			}
		}
		return c
	}
	if count(0, 4, 0) != 1 || count(0, 4, 36) != 3 {
		t.Errorf("same-name race codes %v: want one 0 and three 36", codes[:4])
	}
	if count(4, 8, 0) != 1 {
		t.Errorf("colliding-name race codes %v: want exactly one 0", codes[4:])
	}
	all, err := b.client.GetTopics(ctxT(t), &coordinatorv1.GetTopicsRequest{All: true})
	if err != nil || len(all.GetTopics()) != 2 {
		t.Fatalf("topics after races: %v %v", all, err)
	}
	if n := len(e.storage.names()); n != 4 {
		t.Fatalf("%d channels, want 4: %v", n, e.storage.names())
	}
}

// TestRecoversAfterPostgresDropsConnections kills every session of the coordinator's
// database: calls may fail (UNAVAILABLE) until the pool reconnects, then work again.
func TestRecoversAfterPostgresDropsConnections(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "before", 1, nil)

	u, err := url.Parse(e.cfg.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	admin, err := pgx.Connect(ctxT(t), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	var killed int
	if err := admin.QueryRow(ctxT(t), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", dbName).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no coordinator session to terminate")
	}
	waitFor(t, "create after reconnect", func() error {
		resp, err := r.client.CreateTopics(ctxT(t), &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{{Name: "after", Partitions: 1}}})
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("error while reconnecting is %v, want UNAVAILABLE", err)
			}
			return err
		}
		if c := resp.GetResults()[0].GetErrorCode(); c != 0 && c != 36 {
			t.Fatalf("create after reconnect: code %d", c)
		}
		return nil
	})
	waitFor(t, "ready after reconnect", func() error { return r.srv.Ready(ctxT(t)) })
}

// TestReconcileRecreatesLostChannels: channels storage-core lost are re-created with the
// topic's configs when a coordinator starts.
func TestReconcileRecreatesLostChannels(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "lost", 3, map[string]string{"retention.ms": "4242"})
	r.stop()
	e.storage.drop("kafka.lost~1")
	e.storage.drop("kafka.lost")
	e.storage.drop("kafka.orphan") // not registered: nothing to do
	start(t, e.cfg, true)
	waitFor(t, "lost channels re-created", func() error {
		if got := e.storage.names(); !slices.Equal(got, []string{"kafka.lost", "kafka.lost~1", "kafka.lost~2"}) {
			return errors.New(strings.Join(got, ","))
		}
		return nil
	})
	if e.storage.config("kafka.lost~1").GetRetentionMs() != 4242 {
		t.Fatalf("re-created channel config = %v", e.storage.config("kafka.lost~1"))
	}
}

// TestReconcilePushesTimestampLimits: a topic's channels that hold no timestamp limits
// although the topic sets them (made before storage-core enforced them) get the
// topic's configs at the next reconcile.
func TestReconcilePushesTimestampLimits(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	createOne(t, r.client, "old", 2, map[string]string{"message.timestamp.before.max.ms": "60000", "retention.ms": "4242"})
	r.stop()
	for _, ch := range []string{"kafka.old", "kafka.old~1"} {
		c := e.storage.config(ch)
		c.TimestampBeforeMaxMs, c.TimestampAfterMaxMs = 0, 0
		e.storage.setConfig(ch, c)
	}
	start(t, e.cfg, true)
	waitFor(t, "timestamp limits pushed", func() error {
		for _, ch := range []string{"kafka.old", "kafka.old~1"} {
			if c := e.storage.config(ch); c.GetTimestampBeforeMaxMs() != 60000 || c.GetRetentionMs() != 4242 {
				return fmt.Errorf("%s: %v", ch, c)
			}
		}
		return nil
	})
}

// A taken port is an error from New, not a panic (the cleanup of a half-built server
// used to run on a nil *Server).
func TestNewWithTakenPortFails(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := e.cfg
	cfg.GRPCAddr = ln.Addr().String()
	s, err := New(cfg, zaptest.NewLogger(t))
	if err == nil || s != nil {
		t.Fatalf("New on a taken port = %v, %v; want an error", s, err)
	}
}
