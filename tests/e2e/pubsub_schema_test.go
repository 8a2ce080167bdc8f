package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// Avro schema revisions of the tests: revision 2 adds a nullable note.
const (
	avroOrderV1  = `{"type":"record","name":"Order","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"int"}]}`
	avroOrderV2  = `{"type":"record","name":"Order","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"int"},{"name":"note","type":["null","string"],"default":null}]}`
	protoReading = "syntax = \"proto3\";\nmessage Reading {\n  string device = 1;\n  int64 value = 2;\n}\n"
)

func schemaPath(id string) string { return "projects/" + psProject + "/schemas/" + id }

// schemaAdmin returns the Go client's schema admin client (cloud.google.com/go/pubsub/v2/apiv1)
// for gateway addr, found through PUBSUB_EMULATOR_HOST as users find an emulator.
func schemaAdmin(t *testing.T, addr string) *vkit.SchemaClient {
	t.Helper()
	t.Setenv("PUBSUB_EMULATOR_HOST", addr)
	c, err := vkit.NewSchemaClient(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("NewSchemaClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawSchemas returns the generated SchemaService client of addr (exact codes, no
// retries).
func rawSchemas(t *testing.T, addr string) pubsubpb.SchemaServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pubsubpb.NewSchemaServiceClient(cc)
}

// receiveN receives n messages of sub with the Go client (acking them) and returns
// them by data.
func receiveN(t *testing.T, c *pubsub.Client, sub string, n int) map[string]*pubsub.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t, time.Minute), 45*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]*pubsub.Message{}
	err := c.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got[string(m.Data)] = m
		if len(got) == n {
			cancel()
		}
	})
	if err != nil {
		t.Fatalf("Receive %s: %v", sub, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("received %d messages of %s, want %d", len(got), sub, n)
	}
	return got
}

// wantSchemaAttrs fails the test unless m carries the schema attributes Google adds.
func wantSchemaAttrs(t *testing.T, m *pubsub.Message, schema, encoding, revision string) {
	t.Helper()
	a := m.Attributes
	if a["googclient_schemaname"] != schema || a["googclient_schemaencoding"] != encoding || a["googclient_schemarevisionid"] != revision {
		t.Errorf("message %q: attributes %v, want schema %s, encoding %s, revision %s", m.Data, a, schema, encoding, revision)
	}
}

// TestPubSubSchemaAvro drives an Avro schema through its life with the Go client's
// schema admin client and publisher: create, commit a revision, a topic validating
// JSON against every revision, messages accepted with the schema attributes (the
// newest matching revision named) and a bad one refused with Google's ErrorInfo, a
// topic bounded to one revision, rollback, revision delete (the bound reads
// `_deleted-schema-revision_`) and the schema's delete (`_deleted-schema_` on the topic
// and on messages delivered after it, publishes refused).
func TestPubSubSchemaAvro(t *testing.T) {
	s := pubsubStack(t)
	addr := s.PubSubAddrs[0]
	sc := schemaAdmin(t, addr)
	c := psClient(t, addr)
	ctx := ctxT(t, 2*time.Minute)
	id := psID("orders-avro")

	v1, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: "projects/" + psProject, SchemaId: id,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroOrderV1}})
	if err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	if v1.GetName() != schemaPath(id) || len(v1.GetRevisionId()) != 8 || v1.GetDefinition() != avroOrderV1 || v1.GetRevisionCreateTime().AsTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("created %v", v1)
	}
	v2, err := sc.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: schemaPath(id), Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroOrderV2}})
	if err != nil || v2.GetRevisionId() == v1.GetRevisionId() || v2.GetDefinition() != avroOrderV2 {
		t.Fatalf("CommitSchema: %v, %v", v2, err)
	}
	if got, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: schemaPath(id)}); err != nil || got.GetRevisionId() != v2.GetRevisionId() || got.GetDefinition() != avroOrderV2 {
		t.Fatalf("GetSchema (latest, FULL by default): %v, %v", got, err)
	}
	if got, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: schemaPath(id) + "@" + v1.GetRevisionId(), View: pubsubpb.SchemaView_BASIC}); err != nil ||
		got.GetRevisionId() != v1.GetRevisionId() || got.GetDefinition() != "" || got.GetType() != pubsubpb.Schema_AVRO {
		t.Fatalf("GetSchema %s@%s BASIC: %v, %v", id, v1.GetRevisionId(), got, err)
	}
	var revs []string
	it := sc.ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: schemaPath(id), PageSize: 1})
	for r, err := it.Next(); !errors.Is(err, iterator.Done); r, err = it.Next() {
		if err != nil {
			t.Fatalf("ListSchemaRevisions: %v", err)
		}
		if r.GetDefinition() != "" {
			t.Errorf("ListSchemaRevisions (BASIC by default) gave a definition: %v", r)
		}
		revs = append(revs, r.GetRevisionId())
	}
	if strings.Join(revs, ",") != v1.GetRevisionId()+","+v2.GetRevisionId() {
		t.Fatalf("revisions %v, want %s then %s", revs, v1.GetRevisionId(), v2.GetRevisionId())
	}
	found := false
	lit := sc.ListSchemas(ctx, &pubsubpb.ListSchemasRequest{Parent: "projects/" + psProject, View: pubsubpb.SchemaView_FULL})
	for l, err := lit.Next(); !errors.Is(err, iterator.Done); l, err = lit.Next() {
		if err != nil {
			t.Fatalf("ListSchemas: %v", err)
		}
		if l.GetName() == schemaPath(id) {
			found = l.GetRevisionId() == v2.GetRevisionId() && l.GetDefinition() == avroOrderV2
		}
	}
	if !found {
		t.Fatalf("ListSchemas FULL does not list %s at its latest revision", id)
	}

	// A topic validating JSON against every revision.
	topic, sub := psID("avro-topic"), psID("avro-sub")
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(topic),
		SchemaSettings: &pubsubpb.SchemaSettings{Schema: schemaPath(id), Encoding: pubsubpb.Encoding_JSON}}); err != nil {
		t.Fatalf("CreateTopic with schema settings: %v", err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(sub), Topic: topicPath(topic)}); err != nil {
		t.Fatal(err)
	}
	p := c.Publisher(topic)
	defer p.Stop()
	plain, noted := `{"sku":"a-1","qty":2}`, `{"sku":"a-2","qty":1,"note":{"string":"gift"}}`
	for _, d := range []string{plain, noted} {
		if _, err := p.Publish(ctx, &pubsub.Message{Data: []byte(d), Attributes: map[string]string{"k": "v"}}).Get(ctx); err != nil {
			t.Fatalf("Publish %s: %v", d, err)
		}
	}
	_, err = p.Publish(ctx, &pubsub.Message{Data: []byte(`{"sku":"a-3","qty":"many"}`)}).Get(ctx)
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || st.Message() != "Invalid data in message: Message failed schema validation." {
		t.Fatalf("a message of neither revision: %v, want INVALID_ARGUMENT as Google words it", err)
	}
	if len(st.Details()) != 1 {
		t.Fatalf("details %v, want Google's ErrorInfo", st.Details())
	}
	if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.GetReason() != "INVALID_JSON_AVRO_MESSAGE" || info.GetDomain() != "pubsub.googleapis.com" ||
		!strings.Contains(info.GetMetadata()["revisionInfo"], "last checked revision: revision_id="+v1.GetRevisionId()) {
		t.Errorf("ErrorInfo %v", st.Details()[0])
	}
	got := receiveN(t, c, sub, 2)
	// Revisions are tried newest first: the plain order lacks revision 2's note field,
	// so revision 1 accepted it.
	wantSchemaAttrs(t, got[plain], schemaPath(id), "JSON", v1.GetRevisionId())
	wantSchemaAttrs(t, got[noted], schemaPath(id), "JSON", v2.GetRevisionId())
	if got[plain].Attributes["k"] != "v" {
		t.Errorf("the publisher's attributes were lost: %v", got[plain].Attributes)
	}

	// A topic bounded to revision 2 only.
	bounded := psID("avro-bounded")
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(bounded), SchemaSettings: &pubsubpb.SchemaSettings{
		Schema: schemaPath(id), Encoding: pubsubpb.Encoding_JSON, FirstRevisionId: v2.GetRevisionId(), LastRevisionId: v2.GetRevisionId()}}); err != nil {
		t.Fatalf("CreateTopic bounded: %v", err)
	}
	bp := c.Publisher(bounded)
	defer bp.Stop()
	if _, err := bp.Publish(ctx, &pubsub.Message{Data: []byte(plain)}).Get(ctx); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a revision-1 message on a topic bounded to revision 2: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := bp.Publish(ctx, &pubsub.Message{Data: []byte(noted)}).Get(ctx); err != nil {
		t.Fatalf("a revision-2 message on the bounded topic: %v", err)
	}

	// Rollback to revision 1: a new revision with its definition, now the latest.
	v3, err := sc.RollbackSchema(ctx, &pubsubpb.RollbackSchemaRequest{Name: schemaPath(id), RevisionId: v1.GetRevisionId()})
	if err != nil || v3.GetDefinition() != avroOrderV1 || v3.GetRevisionId() == v1.GetRevisionId() || v3.GetRevisionId() == v2.GetRevisionId() {
		t.Fatalf("RollbackSchema: %v, %v", v3, err)
	}
	// Delete revision 2: the bounded topic's bounds read deleted and it accepts nothing;
	// the unbounded topic validates with revisions 3 and 1.
	if del, err := sc.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: schemaPath(id) + "@" + v2.GetRevisionId()}); err != nil || del.GetRevisionId() != v2.GetRevisionId() {
		t.Fatalf("DeleteSchemaRevision: %v, %v", del, err)
	}
	bt, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicPath(bounded)})
	if err != nil || bt.GetSchemaSettings().GetFirstRevisionId() != "_deleted-schema-revision_" || bt.GetSchemaSettings().GetLastRevisionId() != "_deleted-schema-revision_" ||
		bt.GetSchemaSettings().GetSchema() != schemaPath(id) {
		t.Fatalf("bounded topic after its revision's delete: %v, %v", bt.GetSchemaSettings(), err)
	}
	if _, err := bp.Publish(ctx, &pubsub.Message{Data: []byte(noted)}).Get(ctx); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("publish to a topic whose only revision was deleted: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := p.Publish(ctx, &pubsub.Message{Data: []byte(`{"sku":"a-4","qty":3}`)}).Get(ctx); err != nil {
		t.Fatalf("publish after the rollback: %v", err)
	}
	wantSchemaAttrs(t, receiveN(t, c, sub, 1)[`{"sku":"a-4","qty":3}`], schemaPath(id), "JSON", v3.GetRevisionId())
	for _, r := range []string{v1.GetRevisionId()} {
		if _, err := sc.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: schemaPath(id) + "@" + r}); err != nil {
			t.Fatalf("DeleteSchemaRevision %s: %v", r, err)
		}
	}
	_, err = sc.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: schemaPath(id) + "@" + v3.GetRevisionId()})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "Cannot delete last revision. Please use DeleteSchema." {
		t.Fatalf("delete of the last revision: %v", err)
	}

	// Delete the schema: its topics read `_deleted-schema_` and refuse publishes, and a
	// message published before and delivered after carries the deleted markers, as
	// the emulator delivers it.
	pending := `{"sku":"a-5","qty":5}`
	if _, err := p.Publish(ctx, &pubsub.Message{Data: []byte(pending)}).Get(ctx); err != nil {
		t.Fatalf("Publish before the schema's delete: %v", err)
	}
	if err := sc.DeleteSchema(ctx, &pubsubpb.DeleteSchemaRequest{Name: schemaPath(id)}); err != nil {
		t.Fatalf("DeleteSchema: %v", err)
	}
	wantSchemaAttrs(t, receiveN(t, c, sub, 1)[pending], "_deleted-schema_", "JSON", "_deleted-schema-revision_")
	tp, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicPath(topic)})
	if err != nil || tp.GetSchemaSettings().GetSchema() != "_deleted-schema_" || tp.GetSchemaSettings().GetEncoding() != pubsubpb.Encoding_JSON {
		t.Fatalf("topic after its schema's delete: %v, %v", tp.GetSchemaSettings(), err)
	}
	_, err = p.Publish(ctx, &pubsub.Message{Data: []byte(plain)}).Get(ctx)
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "Schema associated with topic deleted." {
		t.Fatalf("publish after the schema's delete: %v", err)
	}
	// Updating another field keeps the deleted schema; clearing the settings lets
	// anything in again.
	up, err := c.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{Topic: &pubsubpb.Topic{Name: topicPath(topic), Labels: map[string]string{"team": "a"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
	if err != nil || up.GetSchemaSettings().GetSchema() != "_deleted-schema_" {
		t.Fatalf("UpdateTopic labels: %v, %v", up, err)
	}
	if _, err := c.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{Topic: &pubsubpb.Topic{Name: topicPath(topic)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schema_settings"}}}); err != nil {
		t.Fatalf("UpdateTopic clearing schema_settings: %v", err)
	}
	if _, err := c.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte("free text")}}}); err != nil {
		t.Fatalf("publish without schema settings: %v", err)
	}
	if m := receiveN(t, c, sub, 1)["free text"]; m.Attributes["googclient_schemaname"] != "" {
		t.Errorf("a message published without schema settings got %v", m.Attributes)
	}
}

// avroString and avroInt are Avro's binary encodings (zig-zag varints).
func avroString(s string) []byte { return append(binary.AppendVarint(nil, int64(len(s))), s...) }
func avroInt(n int64) []byte     { return binary.AppendVarint(nil, n) }

// TestPubSubSchemaProto: a protocol buffer schema, a topic taking BINARY messages (the
// wire format) and one taking JSON (the proto3 JSON mapping), received with the schema
// attributes; ValidateMessage on the stored schema; a second top-level type refused.
func TestPubSubSchemaProto(t *testing.T) {
	s := pubsubStack(t)
	addr := s.PubSubAddrs[1]
	sc := schemaAdmin(t, addr)
	c := psClient(t, addr)
	ctx := ctxT(t, 2*time.Minute)
	id := psID("readings-proto")
	parent := "projects/" + psProject

	_, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: id,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: protoReading + "message Other {}\n"}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "exactly one top-level type") {
		t.Fatalf("two top-level messages: %v", err)
	}
	rev, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: id,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: protoReading}})
	if err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	var wire []byte
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendString(wire, "d-1")
	wire = protowire.AppendTag(wire, 2, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 42)
	for _, tc := range []struct {
		msg  []byte
		enc  pubsubpb.Encoding
		want codes.Code
	}{
		{wire, pubsubpb.Encoding_BINARY, codes.OK},
		{[]byte(`{"device":"d-1","value":"42"}`), pubsubpb.Encoding_JSON, codes.OK},
		{[]byte(`{"device":"d-1","volts":1}`), pubsubpb.Encoding_JSON, codes.InvalidArgument},
		{[]byte{0xff, 0xff}, pubsubpb.Encoding_BINARY, codes.InvalidArgument},
	} {
		_, err := sc.ValidateMessage(ctx, &pubsubpb.ValidateMessageRequest{Parent: parent,
			SchemaSpec: &pubsubpb.ValidateMessageRequest_Name{Name: schemaPath(id)}, Message: tc.msg, Encoding: tc.enc})
		wantCode(t, "ValidateMessage "+string(tc.msg), err, tc.want)
	}

	bin, js, sub := psID("proto-bin"), psID("proto-json"), psID("proto-sub")
	for _, tc := range []struct {
		topic string
		enc   pubsubpb.Encoding
	}{{bin, pubsubpb.Encoding_BINARY}, {js, pubsubpb.Encoding_JSON}} {
		if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(tc.topic),
			SchemaSettings: &pubsubpb.SchemaSettings{Schema: schemaPath(id), Encoding: tc.enc}}); err != nil {
			t.Fatalf("CreateTopic %s: %v", tc.topic, err)
		}
	}
	// One subscription per topic would do; the binary topic's is enough to see
	// delivery, the JSON topic's publish result shows acceptance.
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(sub), Topic: topicPath(bin)}); err != nil {
		t.Fatal(err)
	}
	pb := c.Publisher(bin)
	defer pb.Stop()
	if _, err := pb.Publish(ctx, &pubsub.Message{Data: wire}).Get(ctx); err != nil {
		t.Fatalf("Publish BINARY: %v", err)
	}
	if _, err := pb.Publish(ctx, &pubsub.Message{Data: []byte(`{"device":"d-1","value":"42"}`)}).Get(ctx); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("JSON on the BINARY topic: %v, want INVALID_ARGUMENT", err)
	}
	pj := c.Publisher(js)
	defer pj.Stop()
	if _, err := pj.Publish(ctx, &pubsub.Message{Data: []byte(`{"device":"d-2","value":"7"}`)}).Get(ctx); err != nil {
		t.Fatalf("Publish JSON: %v", err)
	}
	wantSchemaAttrs(t, receiveN(t, c, sub, 1)[string(wire)], schemaPath(id), "BINARY", rev.GetRevisionId())
}

// TestPubSubSchemaVsEmulator runs the same SchemaService calls and schema-settings
// checks against the gateway and the official emulator and compares codes and
// messages. Where Google's reference and the emulator disagree the gateway follows
// Google; those rows name the emulator's answer.
func TestPubSubSchemaVsEmulator(t *testing.T) {
	s := pubsubStack(t)
	for _, target := range []struct {
		name, addr string
		emulator   bool
	}{{"gateway", s.PubSubAddrs[0], false}, {"emulator", startEmulator(t), true}} {
		sc := rawSchemas(t, target.addr)
		pub, _ := rawPubSub(t, target.addr)
		ctx := ctxT(t, 2*time.Minute)
		parent := "projects/" + psProject
		id := psID("cmp")
		name := schemaPath(id)
		avro := func(def string) *pubsubpb.Schema {
			return &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: def}
		}
		v1, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: id, Schema: avro(avroOrderV1)})
		if err != nil {
			t.Fatalf("%s: CreateSchema: %v", target.name, err)
		}
		v2, err := sc.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: avro(avroOrderV2)})
		if err != nil {
			t.Fatalf("%s: CommitSchema: %v", target.name, err)
		}
		lone := psID("lone")
		if _, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: lone, Schema: avro(`"string"`)}); err != nil {
			t.Fatal(err)
		}
		onlyRev, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: schemaPath(lone)})
		if err != nil {
			t.Fatal(err)
		}
		topicWith := func(ss *pubsubpb.SchemaSettings) error {
			_, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(psID("cmp-topic")), SchemaSettings: ss})
			return err
		}
		validate := func(data []byte, enc pubsubpb.Encoding) error {
			_, err := sc.ValidateMessage(ctx, &pubsubpb.ValidateMessageRequest{Parent: parent, SchemaSpec: &pubsubpb.ValidateMessageRequest_Name{Name: name}, Message: data, Encoding: enc})
			return err
		}
		for _, tc := range []struct {
			what   string
			call   func() error
			code   codes.Code
			prefix string // the start of the status message
			// emulator: the emulator's code where it differs from Google (the gateway
			// keeps code and prefix); OK = the emulator accepts.
			emulator *codes.Code
		}{
			{"CreateSchema id too short", func() error {
				_, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: "ab", Schema: avro(avroOrderV1)})
				return err
			}, codes.InvalidArgument, "Invalid [schemas] name: (name=projects/" + psProject + "/schemas/ab)", nil},
			{"CreateSchema existing id", func() error {
				_, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: id, Schema: avro(avroOrderV1)})
				return err
			}, codes.AlreadyExists, "Schema already exists", nil},
			{"CreateSchema without type", func() error {
				_, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: psID("x"), Schema: &pubsubpb.Schema{Definition: avroOrderV1}})
				return err
			}, codes.InvalidArgument, "Invalid schema type", nil},
			{"CreateSchema bad definition", func() error {
				_, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: psID("x"), Schema: avro(`{"type":"record"`)})
				return err
			}, codes.InvalidArgument, "Could not parse schema definition", nil},
			{"CommitSchema bad definition", func() error {
				_, err := sc.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: avro(`{"type":"enum"}`)})
				return err
			}, codes.InvalidArgument, "Could not parse schema definition", nil},
			{"CommitSchema missing schema", func() error {
				_, err := sc.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: schemaPath("missing-schema"), Schema: avro(avroOrderV1)})
				return err
			}, codes.NotFound, "Schema not found", nil},
			{"GetSchema missing schema", func() error {
				_, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: schemaPath("missing-schema")})
				return err
			}, codes.NotFound, "Schema not found", nil},
			{"GetSchema missing revision", func() error {
				_, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@deadbeef"})
				return err
			}, codes.NotFound, "Schema revision not found", nil},
			{"RollbackSchema without revision", func() error {
				_, err := sc.RollbackSchema(ctx, &pubsubpb.RollbackSchemaRequest{Name: name})
				return err
			}, codes.InvalidArgument, "Missing revision ID", nil},
			{"RollbackSchema missing revision", func() error {
				_, err := sc.RollbackSchema(ctx, &pubsubpb.RollbackSchemaRequest{Name: name, RevisionId: "deadbeef"})
				return err
			}, codes.NotFound, "Revision not found", nil},
			{"DeleteSchemaRevision missing revision", func() error {
				_, err := sc.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: name + "@deadbeef"})
				return err
			}, codes.NotFound, "Schema revision not found", nil},
			{"DeleteSchemaRevision the only revision", func() error {
				_, err := sc.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: schemaPath(lone) + "@" + onlyRev.GetRevisionId()})
				return err
			}, codes.InvalidArgument, "Cannot delete last revision. Please use DeleteSchema.", nil},
			{"DeleteSchema missing schema", func() error {
				_, err := sc.DeleteSchema(ctx, &pubsubpb.DeleteSchemaRequest{Name: schemaPath("missing-schema")})
				return err
			}, codes.NotFound, "Schema not found", nil},
			{"DeleteSchema with a revision", func() error {
				_, err := sc.DeleteSchema(ctx, &pubsubpb.DeleteSchemaRequest{Name: name + "@" + v1.GetRevisionId()})
				return err
			}, codes.InvalidArgument, "Invalid [schemas] name", nil},
			{"ValidateSchema bad definition", func() error {
				_, err := sc.ValidateSchema(ctx, &pubsubpb.ValidateSchemaRequest{Parent: parent, Schema: avro(`{"type":"fixed"}`)})
				return err
			}, codes.InvalidArgument, "Could not parse schema definition", nil},
			{"ValidateMessage valid JSON", func() error { return validate([]byte(`{"sku":"s","qty":1,"note":null}`), pubsubpb.Encoding_JSON) }, codes.OK, "", nil},
			{"ValidateMessage without encoding", func() error { return validate([]byte(`{}`), pubsubpb.Encoding_ENCODING_UNSPECIFIED) }, codes.InvalidArgument, "No encoding provided.", nil},
			{"ValidateMessage JSON of the wrong type", func() error { return validate([]byte(`{"sku":1,"qty":1,"note":null}`), pubsubpb.Encoding_JSON) }, codes.InvalidArgument, "Could not parse JSON Avro message", nil},
			{"ValidateMessage valid binary", func() error {
				return validate(append(append(avroString("s"), avroInt(1)...), 0), pubsubpb.Encoding_BINARY)
			}, codes.OK, "", nil},
			{"ValidateMessage truncated binary", func() error { return validate(avroString("s"), pubsubpb.Encoding_BINARY) }, codes.InvalidArgument, "Could not parse binary Avro message", nil},
			// Google refuses data after the datum ("Too much data to parse for schema");
			// the emulator accepts it.
			{"ValidateMessage binary with trailing data", func() error {
				return validate(append(append(avroString("s"), avroInt(1)...), 0, 0), pubsubpb.Encoding_BINARY)
			}, codes.InvalidArgument, "Could not parse binary Avro message", ptr(codes.OK)},
			{"CreateTopic schema settings without encoding", func() error { return topicWith(&pubsubpb.SchemaSettings{Schema: name}) }, codes.InvalidArgument, "Invalid schema encoding provided", nil},
			{"CreateTopic schema settings without schema", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Encoding: pubsubpb.Encoding_JSON})
			}, codes.InvalidArgument, "No schema name provided", nil},
			{"CreateTopic missing schema", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Schema: schemaPath("missing-schema"), Encoding: pubsubpb.Encoding_JSON})
			}, codes.NotFound, "Schema could not be found", nil},
			// A malformed schema name is a bad argument; the emulator looks it up.
			{"CreateTopic malformed schema name", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Schema: "orders", Encoding: pubsubpb.Encoding_JSON})
			}, codes.InvalidArgument, "Invalid [schemas] name", ptr(codes.NotFound)},
			{"CreateTopic missing first revision", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON, FirstRevisionId: "deadbeef"})
			}, codes.NotFound, "First revision could not be found", nil},
			{"CreateTopic missing last revision", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON, LastRevisionId: "deadbeef"})
			}, codes.NotFound, "Last revision could not be found", nil},
			{"CreateTopic first revision after last", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY, FirstRevisionId: v2.GetRevisionId(), LastRevisionId: v1.GetRevisionId()})
			}, codes.InvalidArgument, "First revision creation time is after last revision creation time", nil},
			{"CreateTopic revision range", func() error {
				return topicWith(&pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY, FirstRevisionId: v1.GetRevisionId(), LastRevisionId: v2.GetRevisionId()})
			}, codes.OK, "", nil},
		} {
			err := tc.call()
			code, prefix := tc.code, tc.prefix
			if target.emulator && tc.emulator != nil {
				code, prefix = *tc.emulator, ""
			}
			st := status.Convert(err)
			if st.Code() != code || !strings.HasPrefix(st.Message(), prefix) {
				t.Errorf("%s: %s: %v, want %v %q", target.name, tc.what, err, code, prefix)
			}
		}

		// The revision limit: 20 per schema.
		var err20 error
		for i := 0; i < 20 && err20 == nil; i++ {
			_, err20 = sc.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: avro(avroOrderV1)})
		}
		if st := status.Convert(err20); st.Code() != codes.ResourceExhausted || st.Message() != "Already at maximum number of schema revisions" {
			t.Errorf("%s: committing past 20 revisions: %v", target.name, err20)
		}

		// Publish: a message no revision accepts fails the whole request (the emulator
		// words it "Could not parse message"; Google as the gateway); after the schema's
		// delete every publish is NOT_FOUND.
		topic := psID("cmp-pub")
		if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(topic), SchemaSettings: &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON}}); err != nil {
			t.Fatalf("%s: CreateTopic: %v", target.name, err)
		}
		_, err = pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{
			{Data: []byte(`{"sku":"s","qty":1}`)}, {Data: []byte(`{"sku":"s"}`)}}})
		wantCode(t, target.name+": publish with one bad message", err, codes.InvalidArgument)
		// An update_mask path below schema_settings changes that field alone.
		up, err := pub.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
			Topic:      &pubsubpb.Topic{Name: topicPath(topic), SchemaSettings: &pubsubpb.SchemaSettings{Encoding: pubsubpb.Encoding_BINARY, LastRevisionId: v1.GetRevisionId()}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schema_settings.encoding"}},
		})
		if ss := up.GetSchemaSettings(); err != nil || ss.GetSchema() != name || ss.GetEncoding() != pubsubpb.Encoding_BINARY || ss.GetLastRevisionId() != "" {
			t.Errorf("%s: UpdateTopic schema_settings.encoding: %v, %v", target.name, up, err)
		}
		_, err = pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{
			{Data: append(append(avroString("s"), avroInt(1)...), 0)}}})
		if err != nil {
			t.Errorf("%s: a binary message after the switch to BINARY: %v", target.name, err)
		}
		// A topic bounded by two live revisions: they go with the schema.
		ranged := psID("cmp-ranged")
		if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(ranged), SchemaSettings: &pubsubpb.SchemaSettings{
			Schema: name, Encoding: pubsubpb.Encoding_JSON, FirstRevisionId: v1.GetRevisionId(), LastRevisionId: v2.GetRevisionId()}}); err != nil {
			t.Fatalf("%s: CreateTopic ranged: %v", target.name, err)
		}
		if _, err := sc.DeleteSchema(ctx, &pubsubpb.DeleteSchemaRequest{Name: name}); err != nil {
			t.Fatalf("%s: DeleteSchema: %v", target.name, err)
		}
		tp, err := pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicPath(topic)})
		if err != nil || tp.GetSchemaSettings().GetSchema() != "_deleted-schema_" {
			t.Errorf("%s: topic after the schema's delete: %v, %v", target.name, tp, err)
		}
		rt, err := pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicPath(ranged)})
		if ss := rt.GetSchemaSettings(); err != nil || ss.GetSchema() != "_deleted-schema_" ||
			ss.GetFirstRevisionId() != "_deleted-schema-revision_" || ss.GetLastRevisionId() != "_deleted-schema-revision_" {
			t.Errorf("%s: bounded topic after the schema's delete: %v, %v", target.name, ss, err)
		}
		_, err = pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte(`{"sku":"s","qty":1}`)}}})
		if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "Schema associated with topic deleted." {
			t.Errorf("%s: publish after the schema's delete: %v", target.name, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
