package raftnode

import (
	"errors"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Entries on the wire (RaftMessage.entries): a MsgApp's entries are encoded once per
// Ready for every peer they go to, and a receiver's entries keep their data in the
// received buffer. Both sides of a MsgApp of a 1 MiB produce request copied it once per
// peer before (the marshal of each MsgApp, the receiver's unmarshal).

// raftpb field numbers: Message.entries; Entry.Type, Term, Index, Data.
const (
	fieldMessageEntries = 7
	fieldEntryType      = 1
	fieldEntryTerm      = 2
	fieldEntryIndex     = 3
	fieldEntryData      = 4
)

var errBadEntries = errors.New("raftnode: entries do not decode")

// appendEntries appends ents to b, each as a raftpb.Message entries field.
func appendEntries(b []byte, ents []raftpb.Entry) []byte {
	n := 0
	for i := range ents {
		s := ents[i].Size()
		n += protowire.SizeTag(fieldMessageEntries) + protowire.SizeBytes(s)
	}
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	for i := range ents {
		s := ents[i].Size()
		b = protowire.AppendTag(b, fieldMessageEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(s))
		k := len(b)
		b = b[:k+s]
		_, _ = ents[i].MarshalToSizedBuffer(b[k:])
	}
	return b
}

// decodeEntries appends to ents the entries b holds (appendEntries' encoding); their
// data aliases b.
func decodeEntries(b []byte, ents []raftpb.Entry) ([]raftpb.Entry, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != fieldMessageEntries || typ != protowire.BytesType {
			return nil, errBadEntries
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, errBadEntries
		}
		b = b[n:]
		e, err := decodeEntry(v)
		if err != nil {
			return nil, err
		}
		ents = append(ents, e)
	}
	return ents, nil
}

func decodeEntry(b []byte) (raftpb.Entry, error) {
	var e raftpb.Entry
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, errBadEntries
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == fieldEntryType || num == fieldEntryTerm || num == fieldEntryIndex):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, errBadEntries
			}
			b = b[n:]
			switch num {
			case fieldEntryType:
				e.Type = raftpb.EntryType(v)
			case fieldEntryTerm:
				e.Term = v
			default:
				e.Index = v
			}
		case typ == protowire.BytesType && num == fieldEntryData:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, errBadEntries
			}
			b = b[n:]
			e.Data = v[:len(v):len(v)]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, errBadEntries
			}
			b = b[n:]
		}
	}
	return e, nil
}

// The raft streams' gRPC codec (content subtype "tributary-raft", named by the dialer
// per call; a server without it falls back to the proto codec, which reads the same
// bytes). The wire format is ExchangeRequest's protobuf encoding; what differs is the
// copying. gRPC's proto codec marshals into a buffer of its default pool (which zeroes
// a 1 MiB buffer for any message above 32 KiB), and its receive copies the frames into
// such a buffer and then every bytes field out of it. This codec hands gRPC the large
// fields (a MsgApp's entries) by reference, and decodes a received batch from one
// buffer of its own that the messages' bytes, and so their entries' data, alias.
const codecName = "tributary-raft"

// inlineBytes is the size from which a bytes field is handed to gRPC by reference.
const inlineBytes = 4 << 10

type codec struct{}

func init() { encoding.RegisterCodecV2(codec{}) }

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*storagev1.ExchangeRequest)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
	}
	var out mem.BufferSlice
	var b []byte
	flush := func() {
		if len(b) > 0 {
			out = append(out, mem.SliceBuffer(b))
			b = nil
		}
	}
	field := func(num protowire.Number, p []byte) {
		if len(p) == 0 {
			return
		}
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(p)))
		if len(p) < inlineBytes {
			b = append(b, p...)
			return
		}
		flush()
		out = append(out, mem.SliceBuffer(p))
	}
	varint := func(num protowire.Number, x uint64) {
		if x != 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), x)
		}
	}
	varint(1, req.GetFrom())
	varint(2, req.GetTo())
	for _, m := range req.GetMessages() {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(raftMessageSize(m)))
		varint(1, m.GetGroup())
		field(2, m.GetMessage())
		if m.GetQuiesce() {
			varint(3, 1)
		}
		if m.GetWake() {
			varint(4, 1)
		}
		field(5, m.GetEntries())
		varint(6, m.GetCompactIndex())
		varint(7, m.GetCompactTerm())
	}
	flush()
	return out, nil
}

func raftMessageSize(m *storagev1.RaftMessage) int {
	n := 0
	if g := m.GetGroup(); g != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(g)
	}
	if p := m.GetMessage(); len(p) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(p))
	}
	if m.GetQuiesce() {
		n += protowire.SizeTag(3) + 1
	}
	if m.GetWake() {
		n += protowire.SizeTag(4) + 1
	}
	if p := m.GetEntries(); len(p) > 0 {
		n += protowire.SizeTag(5) + protowire.SizeBytes(len(p))
	}
	if x := m.GetCompactIndex(); x != 0 {
		n += protowire.SizeTag(6) + protowire.SizeVarint(x)
	}
	if x := m.GetCompactTerm(); x != 0 {
		n += protowire.SizeTag(7) + protowire.SizeVarint(x)
	}
	return n
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*storagev1.ExchangeRequest)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
	}
	return decodeExchange(data.Materialize(), req)
}

var errBadBatch = errors.New("raftnode: batch does not decode")

// decodeExchange decodes b into req; the messages' bytes alias b. Unknown fields are
// skipped, as protobuf does.
func decodeExchange(b []byte, req *storagev1.ExchangeRequest) error {
	proto.Reset(req)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadBatch
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errBadBatch
			}
			b = b[n:]
			if num == 1 {
				req.From = x
			} else {
				req.To = x
			}
		case num == 3 && typ == protowire.BytesType:
			p, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errBadBatch
			}
			b = b[n:]
			m, err := decodeRaftMessage(p)
			if err != nil {
				return err
			}
			req.Messages = append(req.Messages, m)
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errBadBatch
			}
			b = b[n:]
		}
	}
	return nil
}

func decodeRaftMessage(b []byte) (*storagev1.RaftMessage, error) {
	m := &storagev1.RaftMessage{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errBadBatch
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 3 || num == 4 || num == 6 || num == 7) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, errBadBatch
			}
			b = b[n:]
			switch num {
			case 1:
				m.Group = x
			case 3:
				m.Quiesce = x != 0
			case 4:
				m.Wake = x != 0
			case 6:
				m.CompactIndex = x
			default:
				m.CompactTerm = x
			}
		case (num == 2 || num == 5) && typ == protowire.BytesType:
			p, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, errBadBatch
			}
			b = b[n:]
			if num == 2 {
				m.Message = p[:len(p):len(p)]
			} else {
				m.Entries = p[:len(p):len(p)]
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, errBadBatch
			}
			b = b[n:]
		}
	}
	return m, nil
}
