package handler

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseName(t *testing.T) {
	r, err := parseName("projects/p-1/topics/orders.v2~x+y%z", collTopics)
	if err != nil || r.project != "p-1" || r.id != "orders.v2~x+y%z" {
		t.Fatalf("parseName = %+v, %v", r, err)
	}
	for _, name := range []string{
		"", "projects/p/topics/", "projects//topics/abc", "projects/p/subscriptions/abc", "projects/p/topics/ab",
		"projects/p/topics/goog-x", "projects/p/topics/sub.x", "projects/p/topics/1abc", "projects/p/topics/a/b",
		"projects/p/topics/" + strings.Repeat("a", 256), "projects/p q/topics/abc",
	} {
		if _, err := parseName(name, collTopics); status.Code(err) != codes.InvalidArgument {
			t.Errorf("parseName(%q) = %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if _, err := parseName("projects/p/subscriptions/sub.ok", collSubscriptions); err != nil {
		t.Errorf("subscription id sub.ok refused: %v", err)
	}
}

func msgs(n int, m *pubsubpb.PubsubMessage) []*pubsubpb.PubsubMessage {
	out := make([]*pubsubpb.PubsubMessage, n)
	for i := range out {
		out[i] = m
	}
	return out
}

func TestValidatePublish(t *testing.T) {
	ok := &pubsubpb.PubsubMessage{Data: []byte("x")}
	attrs := map[string]string{}
	for i := range 101 {
		attrs[strings.Repeat("k", 1+i%5)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	for _, tc := range []struct {
		name string
		req  *pubsubpb.PublishRequest
		ok   bool
	}{
		{"one", &pubsubpb.PublishRequest{Messages: msgs(1, ok)}, true},
		{"1000", &pubsubpb.PublishRequest{Messages: msgs(1000, ok)}, true},
		{"attributes only", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Attributes: map[string]string{"a": ""}})}, true},
		{"none", &pubsubpb.PublishRequest{}, false},
		{"1001", &pubsubpb.PublishRequest{Messages: msgs(1001, ok)}, false},
		{"empty message", &pubsubpb.PublishRequest{Messages: []*pubsubpb.PubsubMessage{ok, {}}}, false},
		{"101 attributes", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Attributes: attrs})}, false},
		{"key 257", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Attributes: map[string]string{strings.Repeat("k", 257): "v"}})}, false},
		{"key 256", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Attributes: map[string]string{strings.Repeat("k", 256): "v"}})}, true},
		{"goog key", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Attributes: map[string]string{"GOOGx": "v"}})}, false},
		{"value 1025", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Attributes: map[string]string{"k": strings.Repeat("v", 1025)}})}, false},
		{"ordering key 1025", &pubsubpb.PublishRequest{Messages: msgs(1, &pubsubpb.PubsubMessage{Data: []byte("x"), OrderingKey: strings.Repeat("o", 1025)})}, false},
		{"two ordering keys", &pubsubpb.PublishRequest{Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x"), OrderingKey: "a"}, {Data: []byte("x"), OrderingKey: "b"}}}, false},
		{"over 10 MB", &pubsubpb.PublishRequest{Messages: msgs(11, &pubsubpb.PubsubMessage{Data: make([]byte, 1000*1000)})}, false},
	} {
		err := validatePublish(tc.req)
		if tc.ok != (err == nil) || (err != nil && status.Code(err) != codes.InvalidArgument) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestNormalizeSub(t *testing.T) {
	sub := resource{project: "p", id: "s1"}
	s := &pubsubpb.Subscription{}
	if err := normalizeSub(s, sub); err != nil {
		t.Fatal(err)
	}
	if s.AckDeadlineSeconds != 10 || s.MessageRetentionDuration.AsDuration() != 7*24*time.Hour || s.ExpirationPolicy.Ttl.AsDuration() != 31*24*time.Hour || s.Name != "projects/p/subscriptions/s1" {
		t.Fatalf("defaults: %v", s)
	}
	dl := &pubsubpb.Subscription{
		EnableMessageOrdering: true, EnableExactlyOnceDelivery: true,
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/p/topics/dlq"},
		RetryPolicy:      &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second)},
	}
	if err := normalizeSub(dl, sub); err != nil {
		t.Fatal(err)
	}
	c := queueConfig(dl, sub)
	if c.DeadLetter.GetChannel() != "gcp.dlq" || c.DeadLetter.GetMaxDeliveryAttempts() != 5 || c.OrderingKeyHeader != hdrOrderingKey ||
		!c.ExactlyOnce || c.Retry.GetMinBackoffMs() != 1000 || c.Retry.GetMaxBackoffMs() != 600000 || c.AckDeadlineMs != 10000 {
		t.Fatalf("queue config: %v", c)
	}
	for _, tc := range []struct {
		name string
		s    *pubsubpb.Subscription
		want codes.Code
	}{
		{"ack 9", &pubsubpb.Subscription{AckDeadlineSeconds: 9}, codes.InvalidArgument},
		{"ack 601", &pubsubpb.Subscription{AckDeadlineSeconds: 601}, codes.InvalidArgument},
		{"retention 5m", &pubsubpb.Subscription{MessageRetentionDuration: durationpb.New(5 * time.Minute)}, codes.InvalidArgument},
		{"retention 32d", &pubsubpb.Subscription{MessageRetentionDuration: durationpb.New(32 * 24 * time.Hour)}, codes.InvalidArgument},
		{"ttl 1h", &pubsubpb.Subscription{ExpirationPolicy: &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(time.Hour)}}, codes.InvalidArgument},
		{"filter 257", &pubsubpb.Subscription{Filter: strings.Repeat("a", 257)}, codes.InvalidArgument},
		{"bad filter", &pubsubpb.Subscription{Filter: "attributes.x ="}, codes.InvalidArgument},
		{"dlq 4", &pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/p/topics/dlq", MaxDeliveryAttempts: 4}}, codes.OutOfRange},
		{"dlq 101", &pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/p/topics/dlq", MaxDeliveryAttempts: 101}}, codes.OutOfRange},
		{"dlq without topic", &pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{}}, codes.NotFound},
		{"dlq bad topic", &pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "dlq"}}, codes.InvalidArgument},
		{"retry 601s", &pubsubpb.Subscription{RetryPolicy: &pubsubpb.RetryPolicy{MaximumBackoff: durationpb.New(601 * time.Second)}}, codes.InvalidArgument},
		{"push endpoint not a URL", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "not a url"}}, codes.InvalidArgument},
		{"push endpoint ftp", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "ftp://127.0.0.1/x"}}, codes.InvalidArgument},
		{"push endpoint without host", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http:///x"}}, codes.InvalidArgument},
		{"push endpoint http", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://127.0.0.1:8080/push"}}, codes.OK},
		{"retry min > max", &pubsubpb.Subscription{RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(20 * time.Second), MaximumBackoff: durationpb.New(10 * time.Second)}}, codes.InvalidArgument},
	} {
		if err := normalizeSub(tc.s, sub); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestToReceived(t *testing.T) {
	sub := &subInfo{spec: &pubsubpb.Subscription{}}
	pub := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	m := toReceived(&storagev1.ReceivedMessage{AckId: "a1", SourceSequence: 7, DeliveryAttempt: 2, Record: &storagev1.Record{
		TimestampMs: 1, Value: []byte("d"),
		Headers: []*storagev1.Header{
			{Key: "k", Value: []byte("v")}, {Key: hdrMessageID, Value: []byte("42")},
			{Key: hdrPublishTime, Value: []byte(pub.Format(time.RFC3339Nano))}, {Key: hdrOrderingKey, Value: []byte("ok")},
			{Key: "_tributary_other", Value: []byte("x")},
		},
	}}, sub)
	if m.AckId != "a1" || m.Message.MessageId != "42" || !m.Message.PublishTime.AsTime().Equal(pub) || m.Message.OrderingKey != "ok" ||
		len(m.Message.Attributes) != 1 || m.Message.Attributes["k"] != "v" || m.DeliveryAttempt != 0 {
		t.Fatalf("published message: %v", m)
	}
	sub.spec.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{}
	native := toReceived(&storagev1.ReceivedMessage{SourceSequence: 7, DeliveryAttempt: 3, Record: &storagev1.Record{
		TimestampMs: 1700000000123, Headers: []*storagev1.Header{{Key: hdrDeadLetterSourceTime, Value: []byte("1700000000000")}},
	}}, sub)
	if native.Message.MessageId != "7" || native.Message.PublishTime.AsTime().UnixMilli() != 1700000000123 || native.DeliveryAttempt != 3 ||
		native.Message.Attributes[deadLetterSourceTime] != "2023-11-14T22:13:20Z" {
		t.Fatalf("native record: %v", native)
	}
}

// Attribute keys starting with "_" are valid in Pub/Sub: they survive the round trip
// through the log, and none of them becomes a reserved header (an attribute
// "_pubsub_ordering_key" must not set the ordering key, "_tributary_source" must not
// reach storage-core as its binding header).
func TestUnderscoreAttributesRoundTrip(t *testing.T) {
	attrs := map[string]string{
		"k": "1", "_trace": "2", hdrOrderingKey: "forged", hdrMessageID: "forged", hdrPublishTime: "forged",
		"_tributary_source": "forged", hdrAttrPrefix + "x": "3",
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := publishRecord(&pubsubpb.PubsubMessage{Data: []byte("d"), Attributes: attrs}, "42", now, []byte(now.Format(time.RFC3339Nano)))
	for _, h := range rec.GetHeaders() {
		switch h.GetKey() {
		case hdrOrderingKey, "_tributary_source":
			t.Errorf("attribute written as reserved header %s", h.GetKey())
		case hdrMessageID, hdrPublishTime:
			if string(h.GetValue()) == "forged" {
				t.Errorf("attribute written as reserved header %s", h.GetKey())
			}
		}
	}
	if len(rec.GetKey()) != 0 {
		t.Errorf("record key %q from an attribute", rec.GetKey())
	}
	m := toReceived(&storagev1.ReceivedMessage{AckId: "a", Record: &storagev1.Record{
		Value: rec.GetValue(), Key: rec.GetKey(), Headers: rec.GetHeaders(), TimestampMs: rec.GetTimestampMs(),
	}}, &subInfo{spec: &pubsubpb.Subscription{}})
	if m.Message.MessageId != "42" || m.Message.OrderingKey != "" || !m.Message.PublishTime.AsTime().Equal(now) {
		t.Errorf("reserved fields forged: %v", m.Message)
	}
	if len(m.Message.Attributes) != len(attrs) {
		t.Errorf("attributes %v, want %v", m.Message.Attributes, attrs)
	}
	for k, v := range attrs {
		if m.Message.Attributes[k] != v {
			t.Errorf("attribute %q = %q, want %q", k, m.Message.Attributes[k], v)
		}
	}
}

func TestAckFailures(t *testing.T) {
	if err := ackFailures([]string{"a", "b"}, []storagev1.AckResult{0, 0}); err != nil {
		t.Fatal(err)
	}
	err := ackFailures([]string{"a", "b", "c"}, []storagev1.AckResult{0, storagev1.AckResult_ACK_RESULT_EXPIRED, storagev1.AckResult_ACK_RESULT_INVALID})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || len(st.Details()) != 1 {
		t.Fatalf("status %v", st)
	}
	info, ok := st.Details()[0].(*errdetails.ErrorInfo)
	if !ok || info.Reason != "EXACTLY_ONCE_ACKID_FAILURE" || info.Domain != "pubsub.googleapis.com" ||
		len(info.Metadata) != 2 || info.Metadata["b"] != "PERMANENT_FAILURE_INVALID_ACK_ID" || info.Metadata["c"] == "" {
		t.Fatalf("error info %v", st.Details()[0])
	}
}

// An ack id sent twice in one request (storage-core: the repeat is expired) was acked:
// it must not be reported as failed.
func TestAckFailuresDuplicateID(t *testing.T) {
	expired := storagev1.AckResult_ACK_RESULT_EXPIRED
	if err := ackFailures([]string{"a", "a"}, []storagev1.AckResult{0, expired}); err != nil {
		t.Fatalf("duplicate of an acked id reported: %v", err)
	}
	err := ackFailures([]string{"b", "b", "a"}, []storagev1.AckResult{expired, expired, 0})
	info, _ := status.Convert(err).Details()[0].(*errdetails.ErrorInfo)
	if info == nil || len(info.Metadata) != 1 || info.Metadata["b"] == "" {
		t.Fatalf("failures %v", err)
	}
	ok, failed := splitResults([]string{"a", "b", "a", "b"}, []storagev1.AckResult{expired, 0, 0, expired})
	if len(ok) != 2 || len(failed) != 0 {
		t.Fatalf("split = %v, %v", ok, failed)
	}
}

func TestIAMPermissive(t *testing.T) {
	i := NewIAM()
	ctx := context.Background()
	res := "projects/p/topics/t1"
	p, err := i.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res})
	if err != nil || len(p.GetBindings()) != 0 {
		t.Fatalf("initial policy %v, %v", p, err)
	}
	set := &iampb.Policy{Bindings: []*iampb.Binding{{Role: "roles/pubsub.publisher", Members: []string{"user:a@example.com"}}}}
	if _, err := i.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: set}); err != nil {
		t.Fatal(err)
	}
	if p, _ := i.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res}); len(p.GetBindings()) != 1 || p.GetBindings()[0].GetRole() != "roles/pubsub.publisher" {
		t.Fatalf("policy after set: %v", p)
	}
	perms := []string{"pubsub.topics.publish", "pubsub.topics.get"}
	tr, err := i.TestIamPermissions(ctx, &iampb.TestIamPermissionsRequest{Resource: res, Permissions: perms})
	if err != nil || len(tr.GetPermissions()) != 2 {
		t.Fatalf("TestIamPermissions = %v, %v", tr, err)
	}
	if _, err := i.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no resource: %v", err)
	}
}

func TestValidateLabels(t *testing.T) {
	many := map[string]string{}
	for i := range 65 {
		many["k"+strings.Repeat("a", i)] = ""
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		ok     bool
	}{
		{"none", nil, true},
		{"plain", map[string]string{"env": "prod", "team_a-1": "", "größe": "groß"}, true},
		{"empty key", map[string]string{"": "v"}, false},
		{"uppercase key", map[string]string{"Env": "v"}, false},
		{"key starts with a digit", map[string]string{"1env": "v"}, false},
		{"key starts with an international letter", map[string]string{"環境": "本番"}, true},
		{"key starts with an uppercase international letter", map[string]string{"Ärger": "v"}, false},
		{"key 63", map[string]string{"k" + strings.Repeat("x", 62): "v"}, true},
		{"key 64", map[string]string{"k" + strings.Repeat("x", 63): "v"}, false},
		{"value 64", map[string]string{"k": strings.Repeat("v", 64)}, false},
		{"uppercase value", map[string]string{"k": "Prod"}, false},
		{"value with a dot", map[string]string{"k": "v1.2"}, false},
		{"65 labels", many, false},
	} {
		err := validateLabels(tc.labels)
		if tc.ok != (err == nil) || (err != nil && status.Code(err) != codes.InvalidArgument) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := normalizeSub(&pubsubpb.Subscription{Labels: map[string]string{"Bad": ""}}, resource{project: "p", id: "s1"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("subscription with a bad label: %v", err)
	}
	if _, err := topicChannelConfig(&pubsubpb.Topic{Labels: map[string]string{"Bad": ""}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("topic with a bad label: %v", err)
	}
}

// toReceived is the Pub/Sub message a proto-decoded delivery becomes.
func toReceived(m *storagev1.ReceivedMessage, sub *subInfo) *pubsubpb.ReceivedMessage {
	d := fromProto(m)
	return d.received(sub)
}
