package handler

import (
	"context"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// NewStorageClient returns the storage-core client for cc (a connection with
// grpcx.Codec) whose Fetch decodes answers by reference (fetchReply); every other
// method is the generated client's.
func NewStorageClient(cc grpc.ClientConnInterface) storagev1.StorageServiceClient {
	return storageClient{StorageServiceClient: storagev1.NewStorageServiceClient(cc), cc: cc}
}

type storageClient struct {
	storagev1.StorageServiceClient
	cc grpc.ClientConnInterface
}

// Fetch is StorageService.Fetch answered into a fetchReply. Errors: as the generated
// client (a gRPC status or context error).
func (c storageClient) Fetch(ctx context.Context, in *storagev1.FetchRequest, opts ...grpc.CallOption) (*storagev1.FetchResponse, error) {
	r := &fetchReply{}
	if err := c.cc.Invoke(ctx, storagev1.StorageService_Fetch_FullMethodName, in, r, opts...); err != nil {
		return nil, err
	}
	return &r.resp, nil
}

// fetchReply is a FetchResponse received through grpcx.Codec with each result's
// Batches a view of one buffer: the message is copied once out of the transport's
// frames, instead of a second time by proto.Unmarshal, which on a consume run was a
// fifth of the gateway's CPU. The buffer is not pooled: the batches live on in the
// Kafka response being written and in fetch-ahead, and the garbage collector frees it.
type fetchReply struct {
	resp storagev1.FetchResponse
}

// UnmarshalBuffers implements grpcx.BufferUnmarshaler. Results are decoded by hand for
// the fields FetchChannelResult has; anything else (unknown fields, wrong wire types,
// bad UTF-8) is left to proto.Unmarshal, which reports the errors it always reports.
func (f *fetchReply) UnmarshalBuffers(data mem.BufferSlice, _ mem.BufferPool) error {
	b := data.Materialize()
	if !decodeFetchResponse(b, &f.resp) {
		f.resp.Reset()
		return proto.Unmarshal(b, &f.resp)
	}
	return nil
}

// decodeFetchResponse decodes b into m with Batches aliasing b; false for input it
// does not handle.
func decodeFetchResponse(b []byte, m *storagev1.FetchResponse) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
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

// decodeFetchChannelResult decodes one result: fields in any order, and a field seen
// twice keeps its last value, as proto.Unmarshal does for scalar and bytes fields.
func decodeFetchChannelResult(b []byte, r *storagev1.FetchChannelResult) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 6) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == 1 {
				if !utf8.Valid(v) {
					return false
				}
				r.Channel = string(v)
			} else {
				r.Batches = v[:len(v):len(v)]
			}
		case num >= 2 && num <= 5 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 2:
				r.Error = storagev1.ErrorCode(int32(v))
			case 3:
				r.HighWatermark = int64(v)
			case 4:
				r.LastStableSequence = int64(v)
			case 5:
				r.LogStartSequence = int64(v)
			}
		case num == 7 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			a := &storagev1.AbortedTransaction{}
			if !decodeAbortedTransaction(v, a) {
				return false
			}
			r.AbortedTransactions = append(r.AbortedTransactions, a)
		default:
			return false
		}
	}
	return true
}

// decodeAbortedTransaction decodes one FetchChannelResult.aborted_transactions entry.
func decodeAbortedTransaction(b []byte, a *storagev1.AbortedTransaction) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || (num != 1 && num != 2) || typ != protowire.VarintType {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == 1 {
			a.ProducerId = int64(v)
		} else {
			a.FirstSequence = int64(v)
		}
	}
	return true
}
