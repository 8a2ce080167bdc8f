package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// maxSchemaDefinition is the largest schema definition (Google's quotas and limits:
// "The schema definition field cannot exceed 300 KB in size"), in bytes. A compiled
// protocol buffer configuration (compiled_bytes) is the same definition in another
// form and has the same bound: unbounded, one request of several MB would compile to
// hundreds of MB.
const maxSchemaDefinition = 300 * 1000

// codec checks messages against one schema revision.
type codec interface {
	// check reports why data is not one message of the schema in encoding enc (JSON
	// or BINARY), or nil when it is.
	check(data []byte, enc pubsubpb.Encoding) error
}

// compileSchema parses s (type and definition, or a compiled protocol buffer
// configuration). Errors are INVALID_ARGUMENT: "Invalid schema type" for a missing or
// unknown type (the emulator's words), "Could not parse schema definition: <why>" for a
// definition the type's parser refuses.
func compileSchema(ctx context.Context, s *pubsubpb.Schema) (codec, error) {
	compiled := s.GetCompiledProtoSchema()
	switch {
	case s.GetType() != pubsubpb.Schema_AVRO && s.GetType() != pubsubpb.Schema_PROTOCOL_BUFFER:
		return nil, invalid("Invalid schema type")
	case len(s.GetDefinition()) > maxSchemaDefinition:
		return nil, invalid("The value for definition_size is too large. You passed %d in the request, but the maximum value is %d.", len(s.GetDefinition()), maxSchemaDefinition)
	case len(compiled.GetCompiledBytes()) > maxSchemaDefinition:
		return nil, invalid("The value for compiled_bytes size is too large. You passed %d in the request, but the maximum value is %d.", len(compiled.GetCompiledBytes()), maxSchemaDefinition)
	case compiled != nil && s.GetDefinition() != "":
		return nil, invalid("Only one of definition and compiled_proto_schema may be set")
	case compiled != nil && s.GetType() != pubsubpb.Schema_PROTOCOL_BUFFER:
		return nil, invalid("compiled_proto_schema needs type PROTOCOL_BUFFER")
	}
	var (
		c   codec
		err error
	)
	switch {
	case compiled != nil:
		c, err = compileProtoSet(compiled)
	case s.GetType() == pubsubpb.Schema_AVRO:
		c, err = compileAvro(s.GetDefinition())
	default:
		c, err = compileProto(ctx, s.GetDefinition())
	}
	if err != nil {
		return nil, invalid("Could not parse schema definition: %v", err)
	}
	return c, nil
}

// Bounds of the binary Avro check: a recursive schema could otherwise nest a 10 MB
// message millions of levels deep, and an array of nulls claim any length.
const (
	maxAvroDepth = 1000
	maxAvroItems = maxPublishBytes
)

// avroCodec checks messages against an Avro schema (Avro 1.11 specification): BINARY
// is the binary encoding of exactly one datum (trailing bytes are refused, as Google
// does: "Too much data to parse for schema"; so are nesting deeper than maxAvroDepth
// and more than maxAvroItems array or map items), JSON the specification's JSON
// encoding (unions as {"branch": value}, bytes and fixed as strings of code points
// 0..255, every record field present; fields the schema does not name are ignored).
type avroCodec struct {
	schema avro.Schema
}

func compileAvro(def string) (codec, error) {
	// A cache of its own per definition: named types of one schema must not resolve
	// in another's.
	s, err := avro.ParseWithCache(def, "", &avro.SchemaCache{})
	if err != nil {
		return nil, err
	}
	return &avroCodec{schema: s}, nil
}

func (c *avroCodec) check(data []byte, enc pubsubpb.Encoding) error {
	if enc == pubsubpb.Encoding_BINARY {
		d := &avroBinary{b: data}
		if err := d.datum(c.schema); err != nil {
			return fmt.Errorf("not a binary Avro datum of the schema: %w", err)
		}
		if len(d.b) > 0 {
			return errors.New("too much data to parse for schema")
		}
		return nil
	}
	v, err := decodeJSON(data)
	if err != nil {
		return err
	}
	return avroJSON(c.schema, v, nil)
}

// avroBinary walks one datum of the Avro binary encoding, consuming b.
type avroBinary struct {
	b     []byte
	depth int
	items int
}

var errAvroShort = errors.New("the data ends inside the datum")

func (d *avroBinary) take(n int64) ([]byte, error) {
	if n < 0 || n > int64(len(d.b)) {
		return nil, errAvroShort
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out, nil
}

// long reads a zig-zag varint of at most 64 bits.
func (d *avroBinary) long() (int64, error) {
	var u uint64
	for i := range 10 {
		if len(d.b) == 0 {
			return 0, errAvroShort
		}
		c := d.b[0]
		d.b = d.b[1:]
		u |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
	}
	return 0, errors.New("a varint longer than 10 bytes")
}

// count reads the item count of one array or map block (a negative count is followed
// by the block's size in bytes) and books its items.
func (d *avroBinary) count() (int64, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, errors.New("a block count out of range")
		}
		n = -n
		if size, err := d.long(); err != nil || size < 0 {
			return 0, errors.New("a bad block size")
		}
	}
	if n > int64(maxAvroItems-d.items) {
		return 0, fmt.Errorf("more than %d array or map items", maxAvroItems)
	}
	d.items += int(n)
	return n, nil
}

// avroMapKey is the schema of a map's keys.
var avroMapKey = avro.NewPrimitiveSchema(avro.String, nil)

// datum consumes one datum of schema s.
func (d *avroBinary) datum(s avro.Schema) error {
	if d.depth++; d.depth > maxAvroDepth {
		return fmt.Errorf("nested deeper than %d levels", maxAvroDepth)
	}
	defer func() { d.depth-- }()
	var err error
	switch s.Type() {
	case avro.Ref:
		err = d.datum(s.(*avro.RefSchema).Schema())
	case avro.Null:
	case avro.Boolean:
		var b []byte
		if b, err = d.take(1); err == nil && b[0] > 1 {
			err = fmt.Errorf("boolean byte %#x", b[0])
		}
	case avro.Int:
		var n int64
		if n, err = d.long(); err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
			err = fmt.Errorf("int %d out of 32-bit range", n)
		}
	case avro.Long:
		_, err = d.long()
	case avro.Float:
		_, err = d.take(4)
	case avro.Double:
		_, err = d.take(8)
	case avro.Bytes, avro.String:
		var n int64
		if n, err = d.long(); err == nil {
			_, err = d.take(n)
		}
	case avro.Fixed:
		_, err = d.take(int64(s.(*avro.FixedSchema).Size()))
	case avro.Enum:
		var i int64
		if i, err = d.long(); err == nil {
			if n := len(s.(*avro.EnumSchema).Symbols()); i < 0 || i >= int64(n) {
				err = fmt.Errorf("enum index %d of %d symbols", i, n)
			}
		}
	case avro.Union:
		var i int64
		if i, err = d.long(); err == nil {
			types := s.(*avro.UnionSchema).Types()
			if i < 0 || i >= int64(len(types)) {
				return fmt.Errorf("union index %d of %d branches", i, len(types))
			}
			err = d.datum(types[i])
		}
	case avro.Array:
		err = d.blocks(func() error { return d.datum(s.(*avro.ArraySchema).Items()) })
	case avro.Map:
		err = d.blocks(func() error {
			if err := d.datum(avroMapKey); err != nil {
				return err
			}
			return d.datum(s.(*avro.MapSchema).Values())
		})
	case avro.Record:
		for _, f := range s.(*avro.RecordSchema).Fields() {
			if err = d.datum(f.Type()); err != nil {
				break
			}
		}
	default:
		err = fmt.Errorf("schema type %s cannot be checked", s.Type())
	}
	return err
}

// blocks consumes the blocks of an array or map, item by item, up to the empty block.
func (d *avroBinary) blocks(item func() error) error {
	for {
		n, err := d.count()
		if err != nil || n == 0 {
			return err
		}
		for range n {
			if err := item(); err != nil {
				return err
			}
		}
	}
}

// decodeJSON parses data as exactly one JSON value (numbers kept as json.Number).
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not JSON: data after the first value")
	}
	return v, nil
}

// avroJSON checks that v (decoded JSON) is a datum of s in the Avro JSON encoding. at
// is the place in the message, named in errors (nil = the top).
func avroJSON(s avro.Schema, v any, at *jsonPath) error {
	mismatch := func() error {
		where := ""
		if at != nil {
			where = " at " + at.String()
		}
		return fmt.Errorf("JSON %s%s does not match schema type %s", jsonKind(v), where, s.Type())
	}
	switch s.Type() {
	case avro.Ref:
		return avroJSON(s.(*avro.RefSchema).Schema(), v, at)
	case avro.Null:
		if v != nil {
			return mismatch()
		}
	case avro.Boolean:
		if _, ok := v.(bool); !ok {
			return mismatch()
		}
	case avro.Int, avro.Long:
		n, ok := v.(json.Number)
		bits := 64
		if s.Type() == avro.Int {
			bits = 32
		}
		if !ok {
			return mismatch()
		}
		if _, err := strconv.ParseInt(n.String(), 10, bits); err != nil {
			return fmt.Errorf("JSON number %s at %s is not a %d-bit integer (schema type %s)", n, at, bits, s.Type())
		}
	case avro.Float, avro.Double:
		switch x := v.(type) {
		case json.Number:
			f, err := strconv.ParseFloat(x.String(), 64)
			if err != nil || s.Type() == avro.Float && math.Abs(f) > math.MaxFloat32 {
				return fmt.Errorf("JSON number %s at %s is out of range for schema type %s", x, at, s.Type())
			}
		case string:
			if x != "NaN" && x != "Infinity" && x != "-Infinity" {
				return mismatch()
			}
		default:
			return mismatch()
		}
	case avro.String:
		if _, ok := v.(string); !ok {
			return mismatch()
		}
	case avro.Bytes:
		str, ok := v.(string)
		if !ok {
			return mismatch()
		}
		if _, err := avroJSONBytes(str, at); err != nil {
			return err
		}
	case avro.Fixed:
		str, ok := v.(string)
		if !ok {
			return mismatch()
		}
		n, err := avroJSONBytes(str, at)
		if err != nil {
			return err
		}
		if size := s.(*avro.FixedSchema).Size(); n != size {
			return fmt.Errorf("%d bytes at %s, schema type fixed has %d", n, at, size)
		}
	case avro.Enum:
		str, ok := v.(string)
		if !ok {
			return mismatch()
		}
		for _, sym := range s.(*avro.EnumSchema).Symbols() {
			if sym == str {
				return nil
			}
		}
		return fmt.Errorf("%q at %s is not a symbol of enum %s", str, at, s.(*avro.EnumSchema).FullName())
	case avro.Array:
		items, ok := v.([]any)
		if !ok {
			return mismatch()
		}
		p := &jsonPath{up: at, index: true}
		for i, it := range items {
			p.item = i
			if err := avroJSON(s.(*avro.ArraySchema).Items(), it, p); err != nil {
				return err
			}
		}
	case avro.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return mismatch()
		}
		p := &jsonPath{up: at, key: true}
		for k, it := range m {
			p.name = k
			if err := avroJSON(s.(*avro.MapSchema).Values(), it, p); err != nil {
				return err
			}
		}
	case avro.Record:
		m, ok := v.(map[string]any)
		if !ok {
			return mismatch()
		}
		p := &jsonPath{up: at}
		for _, f := range s.(*avro.RecordSchema).Fields() {
			p.name = f.Name()
			fv, present := m[f.Name()]
			if !present {
				return fmt.Errorf("field %s is missing", p)
			}
			if err := avroJSON(f.Type(), fv, p); err != nil {
				return err
			}
		}
	case avro.Union:
		return avroJSONUnion(s.(*avro.UnionSchema), v, at)
	default:
		return fmt.Errorf("schema type %s at %s cannot be checked", s.Type(), at)
	}
	return nil
}

// avroJSONUnion checks a union value: null, or an object with one member named by the
// branch (full name for named types, the type name otherwise).
func avroJSONUnion(u *avro.UnionSchema, v any, at *jsonPath) error {
	if v == nil {
		for _, b := range u.Types() {
			if b.Type() == avro.Null {
				return nil
			}
		}
		return fmt.Errorf("null at %s is not a branch of the union", at)
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return fmt.Errorf("JSON %s at %s is not a union value: want null or an object with one member naming the branch", jsonKind(v), at)
	}
	for name, bv := range m {
		for _, b := range u.Types() {
			if unionBranchName(b) == name {
				return avroJSON(b, bv, &jsonPath{up: at, name: name})
			}
		}
		return fmt.Errorf("%q at %s names no branch of the union", name, at)
	}
	return nil
}

func unionBranchName(s avro.Schema) string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(s.Type())
}

// avroJSONBytes checks the JSON form of bytes (each character one byte, U+0000..U+00FF)
// and returns the byte count.
func avroJSONBytes(s string, at *jsonPath) (int, error) {
	for _, r := range s {
		if r > 0xFF {
			return 0, fmt.Errorf("character %q at %s is not a byte (U+0000..U+00FF)", r, at)
		}
	}
	return utf8.RuneCountInString(s), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// jsonPath is a place in a JSON message: a record field or union branch (name), a map
// value (key) or an array item (index), below up (nil = the top). It is rendered only
// for an error, so checking a message deep down costs nothing per level but the step.
type jsonPath struct {
	up    *jsonPath
	name  string
	item  int
	key   bool // name is a map key
	index bool // item is an array index
}

// String renders p as a.b["key"][3]; a nil p is the top level.
func (p *jsonPath) String() string {
	if p == nil {
		return "the top level"
	}
	var steps []*jsonPath
	for q := p; q != nil; q = q.up {
		steps = append(steps, q)
	}
	var sb strings.Builder
	for i := len(steps) - 1; i >= 0; i-- {
		switch q := steps[i]; {
		case q.index:
			sb.WriteString("[" + strconv.Itoa(q.item) + "]")
		case q.key:
			sb.WriteString("[" + strconv.Quote(q.name) + "]")
		default:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(q.name)
		}
	}
	return sb.String()
}

// protoCodec checks messages against one protocol buffer message type: BINARY is its
// wire format (unknown fields are kept, proto2 required fields must be set), JSON its
// proto3 JSON mapping (unknown fields are refused).
type protoCodec struct {
	msg protoreflect.MessageDescriptor
}

// protoSchemaFile is the file name a definition is compiled under.
const protoSchemaFile = "schema.proto"

// compileProto compiles a definition: one .proto file (proto2 or proto3) that declares
// exactly one top-level type, a message (nested types are fine), and imports nothing
// (Google: "you must define only one top-level type. Import statements that reference
// other types are not supported").
func compileProto(ctx context.Context, def string) (codec, error) {
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{protoSchemaFile: def}),
		}),
		MaxParallelism: 1,
	}
	files, err := c.Compile(ctx, protoSchemaFile)
	if err != nil {
		return nil, err
	}
	fd := files[0]
	if fd.Imports().Len() > 0 {
		return nil, fmt.Errorf("import %q: imports are not supported", fd.Imports().Get(0).Path())
	}
	if fd.Messages().Len() != 1 || fd.Enums().Len() != 0 {
		return nil, fmt.Errorf("the definition must declare exactly one top-level type, a message; it declares %d messages and %d enums", fd.Messages().Len(), fd.Enums().Len())
	}
	return &protoCodec{msg: fd.Messages().Get(0)}, nil
}

// compileProtoSet builds the root message of a compiled FileDescriptorSet.
func compileProtoSet(c *pubsubpb.CompiledProtoSchema) (codec, error) {
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(c.GetCompiledBytes(), set); err != nil {
		return nil, fmt.Errorf("compiled_bytes is not a FileDescriptorSet: %w", err)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, err
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(strings.TrimPrefix(c.GetRootMessage(), ".")))
	if err != nil {
		return nil, fmt.Errorf("root_message %q: %w", c.GetRootMessage(), err)
	}
	msg, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("root_message %q is not a message", c.GetRootMessage())
	}
	return &protoCodec{msg: msg}, nil
}

func (c *protoCodec) check(data []byte, enc pubsubpb.Encoding) error {
	m := dynamicpb.NewMessage(c.msg)
	if enc == pubsubpb.Encoding_BINARY {
		return proto.Unmarshal(data, m)
	}
	return protojson.Unmarshal(data, m)
}
