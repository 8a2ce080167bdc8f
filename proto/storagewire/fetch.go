package storagewire

import (
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// FetchResponseBuffers is m encoded as proto.Marshal encodes it, in pieces: each
// result's fields but its batches, marshalled by proto into one buffer (those numbered
// below batches before it, aborted_transactions after), interleaved with each
// result's Batches by reference. batch gives the buffer to send a result's
// batches in (for example a pooled buffer the transport frees once written); nil, or
// a nil answer, sends them as a plain view. The batches must not change until the
// pieces are written. Results are marshalled one by one with their Batches set aside
// for the call, so m must not be read concurrently. Errors: proto.Marshal's.
//
// A field added to FetchChannelResult is encoded by proto with those before batches;
// numbered above aborted_transactions, it makes the bytes differ from proto.Marshal's in
// order only (decoders accept any order), and TestFieldNumbers fails until it is placed.
func FetchResponseBuffers(m *storagev1.FetchResponse, batch func([]byte) mem.Buffer) (mem.BufferSlice, error) {
	out := make(mem.BufferSlice, 0, 2*len(m.Results))
	var frame []byte
	start := 0
	for _, r := range m.Results {
		batches, aborted := r.Batches, r.AbortedTransactions
		r.Batches, r.AbortedTransactions = nil, nil
		head, err := proto.MarshalOptions{}.MarshalAppend(nil, r) // the fields before batches
		r.Batches, r.AbortedTransactions = batches, aborted
		if err != nil {
			return nil, err
		}
		var tail []byte // the fields after batches
		if len(aborted) > 0 {
			tail, err = proto.MarshalOptions{}.MarshalAppend(nil, &storagev1.FetchChannelResult{AbortedTransactions: aborted})
			if err != nil {
				return nil, err
			}
		}
		size := len(head) + len(tail)
		if len(batches) > 0 {
			size += bytesField(len(batches))
		}
		frame = protowire.AppendTag(frame, fFetchResults, protowire.BytesType)
		frame = protowire.AppendVarint(frame, uint64(size))
		frame = append(frame, head...)
		if len(batches) == 0 {
			frame = append(frame, tail...)
			continue
		}
		frame = protowire.AppendTag(frame, fResultBatches, protowire.BytesType)
		frame = protowire.AppendVarint(frame, uint64(len(batches)))
		out = append(out, mem.SliceBuffer(frame[start:len(frame):len(frame)]))
		start = len(frame)
		var buf mem.Buffer
		if batch != nil {
			buf = batch(batches)
		}
		if buf == nil {
			buf = mem.SliceBuffer(batches)
		}
		out = append(out, buf)
		frame = append(frame, tail...)
	}
	if start < len(frame) {
		out = append(out, mem.SliceBuffer(frame[start:]))
	}
	return out, nil
}

// DecodeFetchResponse decodes b into m with each result's Batches a view of b (its
// capacity capped at the field). It handles the fields FetchChannelResult has, in any
// order, a field seen twice keeping its last value as proto.Unmarshal does. For
// anything else (an unknown field, a wrong wire type, bad UTF-8, truncation) it
// reports false and m is partly filled: the caller resets m and leaves the input to
// proto.Unmarshal, which reports the errors it always reports.
func DecodeFetchResponse(b []byte, m *storagev1.FetchResponse) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != fFetchResults || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		r := &storagev1.FetchChannelResult{}
		if !decodeFetchChannelResult(v, r) {
			return false
		}
		m.Results = append(m.Results, r)
	}
	return true
}

// decodeFetchChannelResult decodes one result (see DecodeFetchResponse).
func decodeFetchChannelResult(b []byte, r *storagev1.FetchChannelResult) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == fResultChannel || num == fResultBatches) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == fResultChannel {
				if !utf8.Valid(v) {
					return false
				}
				r.Channel = string(v)
			} else {
				r.Batches = v[:len(v):len(v)]
			}
		case num == fResultAborted && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			at := &storagev1.AbortedTransaction{}
			if !decodeAbortedTransaction(v, at) {
				return false
			}
			r.AbortedTransactions = append(r.AbortedTransactions, at)
		case num >= fResultError && num <= fResultLogStartSequence && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case fResultError:
				r.Error = storagev1.ErrorCode(int32(v))
			case fResultHighWatermark:
				r.HighWatermark = int64(v)
			case fResultLastStableSequence:
				r.LastStableSequence = int64(v)
			case fResultLogStartSequence:
				r.LogStartSequence = int64(v)
			}
		default:
			return false
		}
	}
	return true
}

// decodeAbortedTransaction decodes one AbortedTransaction (see DecodeFetchResponse).
func decodeAbortedTransaction(b []byte, at *storagev1.AbortedTransaction) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || (num != fAbortedProducerID && num != fAbortedFirstSequence) {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == fAbortedProducerID {
			at.ProducerId = int64(v)
		} else {
			at.FirstSequence = int64(v)
		}
	}
	return true
}
