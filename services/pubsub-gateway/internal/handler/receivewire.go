package handler

import (
	"context"
	"errors"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Receive answers hold up to 1000 messages. Decoded by proto, each message became a
// ReceivedMessage, a Record, a header slice and a struct and a copy per header, only
// to be turned into a Pub/Sub message at once; profiles of a StreamingPull run put a
// quarter of the gateway's CPU there. When the handler has the storage connection,
// Receive answers are decoded straight from the wire into deliveries (receiveReply):
// one copy of the answer, values and header values viewed in it.

// receive leases messages from storage-core: over conn, decoded by receiveReply;
// without it (tests with a fake QueueServiceClient), through queues.
func (h *Handler) receive(ctx context.Context, req *storagev1.ReceiveRequest) ([]delivery, error) {
	if h.storageConn != nil {
		var r receiveReply
		if err := h.storageConn.Invoke(ctx, storagev1.QueueService_Receive_FullMethodName, req, &r); err != nil {
			return nil, err
		}
		return r.msgs, nil
	}
	resp, err := h.queues.Receive(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]delivery, len(resp.GetMessages()))
	for i, m := range resp.GetMessages() {
		out[i] = fromProto(m)
	}
	return out, nil
}

// receiveReply is a ReceiveResponse decoded into deliveries (grpcx.BufferUnmarshaler).
// Fields the gateway does not use are skipped, as are fields of an unexpected wire
// type (proto keeps those as unknown fields).
type receiveReply struct {
	msgs []delivery
}

var _ grpcx.BufferUnmarshaler = (*receiveReply)(nil)

// errBadUTF8 is proto's refusal of a string field that is not UTF-8.
var errBadUTF8 = errors.New("receive answer: string field contains invalid UTF-8")

// errFieldNumber is proto's refusal of a field number above protowire.MaxValidNumber.
var errFieldNumber = errors.New("receive answer: invalid field number")

// UnmarshalBuffers implements grpcx.BufferUnmarshaler: the answer is copied once, and
// the deliveries' values and header values are views of that copy.
func (r *receiveReply) UnmarshalBuffers(data mem.BufferSlice, _ mem.BufferPool) error {
	b := data.Materialize()
	r.msgs = r.msgs[:0]
	return forFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		d, err := decodeDelivery(v)
		if err != nil {
			return err
		}
		r.msgs = append(r.msgs, d)
		return nil
	})
}

// forFields calls fn with each field of the message b; v is the value of a bytes
// field, or the bytes of a varint (decode with protowire.ConsumeVarint), else nil.
func forFields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			// ConsumeTag takes field numbers up to MaxInt32; proto refuses those above
			// 2^29-1.
			return errFieldNumber
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
			if n > 0 {
				v = b[:n]
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func varint(v []byte) uint64 {
	x, _ := protowire.ConsumeVarint(v)
	return x
}

// decodeDelivery decodes a ReceivedMessage (queue.proto): ack_id 1, record 2,
// source 3 (checked only), source_sequence 4, delivery_attempt 5.
func decodeDelivery(b []byte) (delivery, error) {
	var d delivery
	err := forFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return errBadUTF8
			}
			d.ackID = string(v)
		case num == 2 && typ == protowire.BytesType:
			return decodeRecordInto(&d, v)
		case num == 3 && typ == protowire.BytesType:
			// source: unused, but a string, so proto refuses it when not UTF-8.
			if !utf8.Valid(v) {
				return errBadUTF8
			}
		case num == 4 && typ == protowire.VarintType:
			d.sourceSeq = int64(varint(v))
		case num == 5 && typ == protowire.VarintType:
			d.attempt = int32(varint(v))
		}
		return nil
	})
	return d, err
}

// decodeRecordInto decodes a Record (storage.proto) into d: timestamp_ms 2, value 4,
// headers 5 (key 1, value 2).
func decodeRecordInto(d *delivery, b []byte) error {
	return forFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 2 && typ == protowire.VarintType:
			d.ts = int64(varint(v))
		case num == 4 && typ == protowire.BytesType:
			d.value = v[:len(v):len(v)]
		case num == 5 && typ == protowire.BytesType:
			var h storedHeader
			err := forFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					if !utf8.Valid(v) {
						return errBadUTF8
					}
					h.key = string(v)
				case num == 2 && typ == protowire.BytesType:
					h.value = v[:len(v):len(v)]
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.headers = append(d.headers, h)
		}
		return nil
	})
}
