package raftnode

import (
	"bytes"
	"reflect"
	"testing"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestEntriesCodec: entries encoded apart (appendEntries) are raftpb.Message field 7,
// so a message's rest followed by them decodes as the whole message with raftpb's own
// Unmarshal; decodeEntries gives the same entries with their data in the buffer, and
// refuses what is not that encoding.
func TestEntriesCodec(t *testing.T) {
	ents := []raftpb.Entry{
		{Term: 3, Index: 7, Type: raftpb.EntryNormal, Data: bytes.Repeat([]byte("x"), 70000)},
		{Term: 3, Index: 8}, // raft's empty entry
		{Term: 4, Index: 9, Type: raftpb.EntryConfChangeV2, Data: []byte{1, 2, 3}},
	}
	m := raftpb.Message{Type: raftpb.MsgApp, From: 1, To: 2, Term: 4, LogTerm: 3, Index: 6, Commit: 5}
	head, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	enc := appendEntries(nil, ents)
	var whole raftpb.Message
	if err := whole.Unmarshal(append(append([]byte(nil), head...), enc...)); err != nil {
		t.Fatal(err)
	}
	want := m
	want.Entries = ents
	if !reflect.DeepEqual(normalize(whole), normalize(want)) {
		t.Fatalf("raftpb decodes %+v, want %+v", whole, want)
	}
	got, err := decodeEntries(enc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(raftpb.Message{Entries: got}), normalize(raftpb.Message{Entries: ents})) {
		t.Fatalf("decodeEntries %+v, want %+v", got, ents)
	}
	// The data is the buffer's, not a copy.
	enc[bytes.IndexByte(enc, 'x')] = 'y'
	if got[0].Data[0] != 'y' {
		t.Fatal("decoded data does not alias the buffer")
	}
	for _, bad := range [][]byte{
		{0x3a, 0x05, 0x10},       // length past the end
		{0x08, 0x01},             // not field 7
		{0x3a, 0x02, 0x22, 0x05}, // data past the end of the entry
		enc[:len(enc)-1],         // cut
	} {
		if _, err := decodeEntries(bad, nil); err == nil {
			t.Fatalf("decodeEntries(%x) succeeded", bad)
		}
	}
}

// normalize makes empty data nil, as raftpb's Unmarshal leaves it.
func normalize(m raftpb.Message) raftpb.Message {
	for i := range m.Entries {
		if len(m.Entries[i].Data) == 0 {
			m.Entries[i].Data = nil
		}
	}
	return m
}

// TestCodec: the raft streams' codec writes ExchangeRequest's protobuf encoding (the
// proto codec reads what it writes, and it reads what protobuf writes), with the
// received bytes in one buffer, and refuses a batch that does not decode.
func TestCodec(t *testing.T) {
	big := bytes.Repeat([]byte("e"), 100000)
	req := &storagev1.ExchangeRequest{From: 1, To: 3, Messages: []*storagev1.RaftMessage{
		{Group: 7, Message: []byte("head"), Entries: big},
		{Group: 1 << 40, Message: bytes.Repeat([]byte("m"), 5000), Quiesce: true},
		{Group: 9, Wake: true},
		{Group: 11, CompactIndex: 1 << 33, CompactTerm: 7},
		{},
	}}
	c := codec{}
	data, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	wire := data.Materialize()
	var viaProto storagev1.ExchangeRequest
	if err := proto.Unmarshal(wire, &viaProto); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&viaProto, req) {
		t.Fatalf("protobuf reads %v, want %v", &viaProto, req)
	}
	std, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got storagev1.ExchangeRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(std)}, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, req) {
		t.Fatalf("codec reads %v, want %v", &got, req)
	}
	// Unknown fields are skipped, as protobuf does.
	withUnknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), std...), 99, protowire.VarintType), 5)
	if err := decodeExchange(withUnknown, &got); err != nil || !proto.Equal(&got, req) {
		t.Fatalf("with an unknown field: %v, %v", err, &got)
	}
	for _, bad := range [][]byte{std[:len(std)-1], {0x1a, 0x7f}, {0x08}} {
		if err := decodeExchange(bad, &got); err == nil {
			t.Fatalf("decodeExchange(%x) succeeded", bad)
		}
	}
}
