package handler

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/hamba/avro/v2"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

const testAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},
  {"name":"qty","type":"int"},
  {"name":"price","type":"double"},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["NEW","OLD"]}},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"attrs","type":{"type":"map","values":"int"}},
  {"name":"raw","type":"bytes"},
  {"name":"code","type":{"type":"fixed","name":"Code","size":2}},
  {"name":"next","type":["null","Order"],"default":null}
]}`

const testAvroOK = `{"id":1,"qty":2,"price":1.5,"note":{"string":"n"},"kind":"NEW","tags":["a"],"attrs":{"x":1},"raw":"\u00ff\u0000","code":"ab","next":null}`

func mustCompile(t *testing.T, s *pubsubpb.Schema) codec {
	t.Helper()
	c, err := compileSchema(context.Background(), s)
	if err != nil {
		t.Fatalf("compile %v: %v", s, err)
	}
	return c
}

// TestAvroJSON: the Avro specification's JSON encoding, as the emulator (Apache Avro's
// JsonDecoder) reads it, except where Google is stricter (non-integral numbers for
// int, data after the value).
func TestAvroJSON(t *testing.T) {
	c := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: testAvro})
	replace := func(old, new string) string {
		if !strings.Contains(testAvroOK, old) {
			t.Fatalf("%s not in the message", old)
		}
		return strings.Replace(testAvroOK, old, new, 1)
	}
	for _, tc := range []struct {
		name, data, want string // want: "" = valid, else part of the error
	}{
		{"valid", testAvroOK, ""},
		{"unknown field ignored", replace(`"id":1`, `"id":1,"extra":true`), ""},
		{"nested record by full name", replace(`"next":null`, `"next":{"shop.Order":`+strings.Replace(testAvroOK, `"id":1`, `"id":2`, 1)+`}`), ""},
		{"NaN double", replace(`"price":1.5`, `"price":"NaN"`), ""},
		{"missing field with default", replace(`"note":{"string":"n"},`, ``), "field note is missing"},
		{"string for long", replace(`"id":1`, `"id":"1"`), "JSON string at id does not match schema type long"},
		{"fraction for int", replace(`"qty":2`, `"qty":2.5`), "not a 32-bit integer"},
		{"int overflow", replace(`"qty":2`, `"qty":2147483648`), "not a 32-bit integer"},
		{"bare union value", replace(`"note":{"string":"n"}`, `"note":"n"`), "not a union value"},
		{"short union name", replace(`"next":null`, `"next":{"Order":{}}`), "names no branch"},
		{"bad enum", replace(`"kind":"NEW"`, `"kind":"MID"`), "not a symbol of enum shop.Kind"},
		{"array item", replace(`"tags":["a"]`, `"tags":[1]`), "tags[0]"},
		{"map value", replace(`"attrs":{"x":1}`, `"attrs":{"x":"1"}`), `attrs["x"]`},
		{"bytes beyond U+00FF", replace(`\u00ff`, `\u0100`), "not a byte"},
		{"fixed size", replace(`"code":"ab"`, `"code":"abc"`), "3 bytes at code"},
		{"not JSON", `{"id":`, "not JSON"},
		{"data after the value", testAvroOK + ` {}`, "data after the first value"},
		{"empty", ``, "not JSON"},
	} {
		err := c.check([]byte(tc.data), pubsubpb.Encoding_JSON)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestAvroBinary: one datum exactly; trailing bytes are refused as Google does.
func TestAvroBinary(t *testing.T) {
	const def = `{"type":"record","name":"R","fields":[{"name":"s","type":"string"},{"name":"n","type":"int"}]}`
	c := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: def})
	s, err := avro.Parse(def)
	if err != nil {
		t.Fatal(err)
	}
	good, err := avro.Marshal(s, map[string]any{"s": strings.Repeat("x", 2<<20), "n": 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.check(good, pubsubpb.Encoding_BINARY); err != nil {
		t.Errorf("a 2 MiB string datum: %v", err)
	}
	if err := c.check(good[:len(good)-1], pubsubpb.Encoding_BINARY); err == nil {
		t.Error("a truncated datum passed")
	}
	if err := c.check(append(good, 0), pubsubpb.Encoding_BINARY); err == nil || !strings.Contains(err.Error(), "too much data") {
		t.Errorf("trailing byte: %v", err)
	}

	// The full test schema as the library encodes it, nested once.
	full, err := avro.Parse(testAvro)
	if err != nil {
		t.Fatal(err)
	}
	inner := map[string]any{"id": int64(2), "qty": 1, "price": 2.5, "note": nil, "kind": "OLD", "tags": []any{}, "attrs": map[string]any{},
		"raw": []byte{}, "code": [2]byte{'c', 'd'}, "next": nil}
	outer := map[string]any{"id": int64(1), "qty": 2, "price": 1.5, "note": "n", "kind": "NEW", "tags": []any{"a", "b"}, "attrs": map[string]any{"x": 1},
		"raw": []byte{0xff}, "code": [2]byte{'a', 'b'}, "next": map[string]any{"shop.Order": inner}}
	enc, err := avro.Marshal(full, outer)
	if err != nil {
		t.Fatal(err)
	}
	fc := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: testAvro})
	if err := fc.check(enc, pubsubpb.Encoding_BINARY); err != nil {
		t.Errorf("every type, nested: %v", err)
	}
}

// TestAvroBinaryBounds: a recursive schema cannot nest a message deeper than
// maxAvroDepth (the walk would otherwise overflow the stack), nor an array of nulls
// claim more than maxAvroItems items.
func TestAvroBinaryBounds(t *testing.T) {
	rec := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO,
		Definition: `{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}`})
	deep := append(bytesRepeat(0x02, 5_000_000), 0x00) // branch "N" 5M times, then null
	if err := rec.check(deep, pubsubpb.Encoding_BINARY); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("5M levels: %v", err)
	}
	if err := rec.check([]byte{0x02, 0x02, 0x00}, pubsubpb.Encoding_BINARY); err != nil {
		t.Errorf("2 levels: %v", err)
	}
	nulls := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `{"type":"array","items":"null"}`})
	huge := append(binaryVarint(1<<60), 0x00)
	if err := nulls.check(huge, pubsubpb.Encoding_BINARY); err == nil || !strings.Contains(err.Error(), "items") {
		t.Errorf("2^60 nulls: %v", err)
	}
	if err := nulls.check(append(binaryVarint(3), 0x00), pubsubpb.Encoding_BINARY); err != nil {
		t.Errorf("3 nulls: %v", err)
	}
}

// TestAvroJSONDeepCost: checking a deeply nested JSON message costs memory in
// proportion to the message, not to the square of its depth (a publish may carry
// hundreds of such messages).
func TestAvroJSONDeepCost(t *testing.T) {
	rec := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO,
		Definition: `{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}`})
	const levels = 4990 // two JSON levels each, under encoding/json's 10000
	data := []byte(strings.Repeat(`{"next":{"N":`, levels) + `{"next":null}` + strings.Repeat("}}", levels))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := rec.check(data, pubsubpb.Encoding_JSON); err != nil {
		t.Fatalf("%d levels: %v", levels, err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(256*len(data)) {
		t.Errorf("checking %d bytes of JSON allocated %d bytes", len(data), n)
	}
	bad := []byte(strings.Repeat(`{"next":{"N":`, 3) + `{"next":1}` + strings.Repeat("}}", 3))
	if err := rec.check(bad, pubsubpb.Encoding_JSON); err == nil || !strings.Contains(err.Error(), "at next.N.next.N.next.N.next") {
		t.Errorf("a number 3 levels down: %v", err)
	}
}

func bytesRepeat(b byte, n int) []byte { return []byte(strings.Repeat(string([]byte{b}), n)) }

// binaryVarint is Avro's zig-zag varint of n.
func binaryVarint(n int64) []byte { return binary.AppendVarint(nil, n) }

// TestCompileSchema: definitions Google refuses are INVALID_ARGUMENT with the
// emulator's words; protocol buffer definitions hold exactly one top-level message and
// import nothing.
func TestCompileSchema(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *pubsubpb.Schema
		want string // "" = valid, else the start of the status message
	}{
		{"avro primitive", &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `"string"`}, ""},
		{"no type", &pubsubpb.Schema{Definition: `"string"`}, "Invalid schema type"},
		{"bad avro", &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `{"type":"record"`}, "Could not parse schema definition"},
		{"bad avro default", &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}`}, "Could not parse schema definition"},
		{"empty avro", &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO}, "Could not parse schema definition"},
		{"too large", &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `"string"` + strings.Repeat(" ", maxSchemaDefinition)}, "The value for definition_size is too large"},
		{"proto3", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `syntax = "proto3"; package p; message A { message B { int32 x = 1; } B b = 1; enum E { E0 = 0; } E e = 2; }`}, ""},
		{"proto2 without syntax", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `message A { required int32 x = 1; }`}, ""},
		{"two messages", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `syntax = "proto3"; message A {} message B {}`}, "Could not parse schema definition: the definition must declare exactly one top-level type"},
		{"top-level enum", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `syntax = "proto3"; message A { E e = 1; } enum E { E0 = 0; }`}, "Could not parse schema definition: the definition must declare exactly one top-level type"},
		{"import", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `syntax = "proto3"; import "google/protobuf/timestamp.proto"; message A { google.protobuf.Timestamp t = 1; }`}, "Could not parse schema definition: import \"google/protobuf/timestamp.proto\": imports are not supported"},
		{"syntax error", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `message {`}, "Could not parse schema definition: schema.proto:1:9"},
		{"compiled too large", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER,
			Configuration: &pubsubpb.Schema_CompiledProtoSchema{CompiledProtoSchema: &pubsubpb.CompiledProtoSchema{RootMessage: "A", CompiledBytes: wideDescriptorSet(t, 20000)}}},
			"The value for compiled_bytes size is too large"},
		{"definition and compiled", &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: `message A {}`,
			Configuration: &pubsubpb.Schema_CompiledProtoSchema{CompiledProtoSchema: &pubsubpb.CompiledProtoSchema{RootMessage: "A"}}}, "Only one of definition and compiled_proto_schema"},
	} {
		_, err := compileSchema(context.Background(), tc.s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.want)):
			t.Errorf("%s: %v, want INVALID_ARGUMENT starting %q", tc.name, err, tc.want)
		}
	}
}

// wideDescriptorSet is a valid FileDescriptorSet of one proto3 message A with n
// string fields (about 20 bytes each).
func wideDescriptorSet(t *testing.T, n int) []byte {
	t.Helper()
	msg := &descriptorpb.DescriptorProto{Name: proto.String("A")}
	for i := 1; i <= n; i++ {
		msg.Field = append(msg.Field, &descriptorpb.FieldDescriptorProto{
			Name: proto.String(fmt.Sprintf("field_%d", i)), Number: proto.Int32(int32(i)),
			Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		})
	}
	b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		{Name: proto.String("a.proto"), Syntax: proto.String("proto3"), MessageType: []*descriptorpb.DescriptorProto{msg}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProtoCodec: binary is the wire format (proto2 required fields enforced), JSON
// the proto3 JSON mapping with unknown fields refused; a compiled FileDescriptorSet
// works like a definition.
func TestProtoCodec(t *testing.T) {
	const def = `syntax = "proto2"; package shop; message Order { required int64 id = 1; optional string note = 2; }`
	c := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: def})
	md := c.(*protoCodec).msg
	m := dynamicpb.NewMessage(md)
	m.Set(md.Fields().ByName("id"), protoreflect.ValueOfInt64(7))
	bin, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data string
		enc  pubsubpb.Encoding
		ok   bool
	}{
		{"binary", string(bin), pubsubpb.Encoding_BINARY, true},
		{"binary without the required field", "\x12\x01x", pubsubpb.Encoding_BINARY, false},
		{"binary garbage", "\xff\xff\xff", pubsubpb.Encoding_BINARY, false},
		{"json", `{"id":"7","note":"n"}`, pubsubpb.Encoding_JSON, true},
		{"json unknown field", `{"id":"7","x":1}`, pubsubpb.Encoding_JSON, false},
		{"json wrong type", `{"id":"seven"}`, pubsubpb.Encoding_JSON, false},
	} {
		if err := c.check([]byte(tc.data), tc.enc); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}

	// The same type as a compiled FileDescriptorSet (with an import: allowed there, the
	// set carries its dependencies).
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(timestamppb.File_google_protobuf_timestamp_proto),
		{
			Name: proto.String("ev.proto"), Package: proto.String("ev"), Syntax: proto.String("proto3"),
			Dependency: []string{"google/protobuf/timestamp.proto"},
			MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Event"), Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("at"), JsonName: proto.String("at"), Number: proto.Int32(1),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
				TypeName: proto.String(".google.protobuf.Timestamp"),
			}}}},
		},
	}}
	raw, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	cs := mustCompile(t, &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER,
		Configuration: &pubsubpb.Schema_CompiledProtoSchema{CompiledProtoSchema: &pubsubpb.CompiledProtoSchema{RootMessage: "ev.Event", CompiledBytes: raw}}})
	if err := cs.check([]byte(`{"at":"2026-01-02T03:04:05Z"}`), pubsubpb.Encoding_JSON); err != nil {
		t.Errorf("compiled set, JSON: %v", err)
	}
	if err := cs.check([]byte(`{"at":"yesterday"}`), pubsubpb.Encoding_JSON); err == nil {
		t.Error("compiled set: a bad timestamp passed")
	}
	if _, err := compileSchema(context.Background(), &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER,
		Configuration: &pubsubpb.Schema_CompiledProtoSchema{CompiledProtoSchema: &pubsubpb.CompiledProtoSchema{RootMessage: "ev.Missing", CompiledBytes: raw}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown root message: %v", err)
	}
}

// TestCodecCacheBytes: the compiled revisions a replica keeps are bounded by the
// bytes of their definitions, not only by their count (a compiled 300 KB definition
// takes megabytes), and the revision ranges holding codecs go with them.
func TestCodecCacheBytes(t *testing.T) {
	h := New(Deps{Log: zap.NewNop()}).Schemas
	ctx := context.Background()
	def := `"string"` + strings.Repeat(" ", maxSchemaDefinition-10)
	spec, err := proto.Marshal(&pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: def})
	if err != nil {
		t.Fatal(err)
	}
	var keys []codecKey
	for i := range 2 * maxCachedSpecBytes / len(spec) {
		rev := &coordinatorv1.PubSubSchemaRevision{SchemaId: "s", RevisionId: fmt.Sprintf("%08x", i), Spec: spec, Sequence: int64(i + 1)}
		cd, err := h.revisionCodec(ctx, rev)
		if err != nil {
			t.Fatal(err)
		}
		if err := cd.check([]byte(`"x"`), pubsubpb.Encoding_JSON); err != nil {
			t.Fatalf("revision %d: %v", i, err)
		}
		keys = append(keys, codecKey{"s", rev.GetRevisionId(), rev.GetSequence()})
		h.ranges.mu.Lock()
		h.ranges.ranges[rangeKey{"s", rev.GetRevisionId(), ""}] = cachedRange{r: &revisionRange{revs: []rangeRevision{{id: rev.GetRevisionId(), codec: cd}}}}
		h.ranges.mu.Unlock()
	}
	held := 0
	for _, k := range keys {
		if _, ok := h.ranges.codecs[k]; ok {
			held += len(spec)
		}
	}
	if held > maxCachedSpecBytes {
		t.Errorf("the cache holds %d bytes of definitions, bound %d", held, maxCachedSpecBytes)
	}
	if n := len(h.ranges.ranges); n*len(spec) > maxCachedSpecBytes+len(spec) {
		t.Errorf("%d cached ranges still hold codecs of %d bytes each", n, len(spec))
	}
}
