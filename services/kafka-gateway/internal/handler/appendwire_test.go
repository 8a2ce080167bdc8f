package handler

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// appendWire's pieces, joined, are exactly proto.Marshal's bytes, and the batches are
// sent by reference.
func TestAppendWireMatchesProtoMarshal(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 300)
	for _, m := range []*storagev1.AppendStreamRequest{
		{},
		{Id: 1},
		{Id: 1 << 40, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.t", Batches: []byte{1, 2, 3}}}},
		{Id: 9, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.a", Batches: big}, {Channel: "", Batches: []byte{4}}, {Channel: "kafka.b~1"}, {}, {Channel: "kafka.c", Batches: big}}},
	} {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := appendWire{m}.MarshalBuffers(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := bs.Materialize(); !bytes.Equal(got, want) {
			t.Errorf("%v: got %x, want %x", m, got, want)
		}
		for _, cb := range m.Channels {
			if len(cb.Batches) == 0 {
				continue
			}
			found := false
			for _, b := range bs {
				d := b.ReadOnlyData()
				found = found || len(d) > 0 && &d[0] == &cb.Batches[0]
			}
			if !found {
				t.Errorf("%v: batches of %q were copied, not referenced", m, cb.Channel)
			}
		}
	}
	bad := &storagev1.AppendStreamRequest{Channels: []*storagev1.ChannelBatches{{Channel: "\xff"}}}
	if _, err := (appendWire{bad}).MarshalBuffers(nil); err == nil {
		t.Error("invalid UTF-8 channel name accepted")
	}
}

// The encoder knows every field: a field added to the messages must be added to
// appendWire (and to storage-core's decoder) too.
func TestAppendWireKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		md   protoreflect.MessageDescriptor
		want []string
	}{
		{(&storagev1.AppendStreamRequest{}).ProtoReflect().Descriptor(), []string{"id", "channels"}},
		{(&storagev1.ChannelBatches{}).ProtoReflect().Descriptor(), []string{"channel", "batches"}},
	} {
		fs := c.md.Fields()
		if fs.Len() != len(c.want) {
			t.Fatalf("%s has %d fields, appendWire encodes %v", c.md.FullName(), fs.Len(), c.want)
		}
		for i, name := range c.want {
			if f := fs.Get(i); string(f.Name()) != name || int(f.Number()) != i+1 {
				t.Errorf("%s field %d is %s = %d, appendWire encodes %s = %d", c.md.FullName(), i, f.Name(), f.Number(), name, i+1)
			}
		}
	}
}
