package server

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire/wiretest"
)

// appendRequest decodes what proto.Marshal encodes, with the batches as views of its
// own buffer, and leaves everything else to proto.Unmarshal.
func TestAppendRequestDecodes(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 40000)
	msgs := []*storagev1.AppendStreamRequest{
		{},
		{Id: 3},
		{Id: 1 << 50, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.a", Batches: big}, {}, {Channel: "kafka.b~2"}, {Batches: []byte{1}}}},
	}
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var a appendRequest
		if err := a.UnmarshalBuffers(wiretest.Split(b, 16384), grpcx.BufferPool); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&a.req, m) {
			t.Errorf("decoded %v, want %v", &a.req, m)
		}
		if a.buf == nil {
			t.Errorf("%v: took the proto.Unmarshal path", m)
		}
		for _, cb := range a.req.Channels {
			if len(cb.Batches) > 0 && !wiretest.Within(*a.buf, cb.Batches) {
				t.Errorf("batches of %q are not a view of the request's buffer", cb.Channel)
			}
		}
		a.release()
		if a.buf != nil || len(a.req.Channels) > 0 && a.req.Channels[0].Batches != nil {
			t.Error("release kept the buffer")
		}
	}

	// Outside the plain shape: proto.Unmarshal decides (same result, or its error).
	plain, _ := proto.Marshal(&storagev1.AppendStreamRequest{Id: 5, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.x", Batches: []byte{9}}}})
	unknown := protowire.AppendTag(append([]byte(nil), plain...), 15, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	twiceID := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), plain...), 1, protowire.VarintType), 6)
	badUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("\xff"))
	badUTF8 = protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), badUTF8)
	for _, c := range []struct {
		name string
		b    []byte
	}{{"unknown field", unknown}, {"repeated id", twiceID}, {"bad UTF-8", badUTF8}, {"truncated", plain[:len(plain)-1]}} {
		var want storagev1.AppendStreamRequest
		werr := proto.Unmarshal(c.b, &want)
		var a appendRequest
		err := a.UnmarshalBuffers(wiretest.Split(c.b, 3), grpcx.BufferPool)
		if (err == nil) != (werr == nil) {
			t.Errorf("%s: error %v, proto.Unmarshal's %v", c.name, err, werr)
		}
		if err == nil && !proto.Equal(&a.req, &want) {
			t.Errorf("%s: decoded %v, proto.Unmarshal %v", c.name, &a.req, &want)
		}
		if a.buf != nil {
			t.Errorf("%s: kept a pooled buffer on the proto.Unmarshal path", c.name)
		}
	}
}
