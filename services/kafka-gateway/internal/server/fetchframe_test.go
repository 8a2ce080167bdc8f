package server

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchFrameMatchesEncodeResponse: a Fetch response framed in pieces is, joined,
// byte for byte the frame encodeResponse makes, at every served version, and the
// response's batches are back in place afterwards.
func TestFetchFrameMatchesEncodeResponse(t *testing.T) {
	big := bytes.Repeat([]byte{0xab}, 300)
	build := func(v int16) *kmsg.FetchResponse {
		r := kmsg.NewPtrFetchResponse()
		r.SetVersion(v)
		for ti, name := range []string{"a", "topic-two"} {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = name
			rt.TopicID[0] = byte(ti + 1)
			for p := int32(0); p < 3; p++ {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = p
				rp.HighWatermark = 100 + int64(p)
				rp.RecordBatches = []byte{}
				if p != 1 {
					rp.RecordBatches = append([]byte{byte(ti), byte(p)}, big[:100*(int(p)+1)]...)
				}
				if p == 2 {
					at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					at.ProducerID, at.FirstOffset = 7, 9
					rp.AbortedTransactions = append(rp.AbortedTransactions, at)
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	}
	var ff fetchFrame
	for v := int16(4); v <= 16; v++ {
		resp := build(v)
		want := encodeResponse(nil, 42, resp)
		if !ff.encode(42, resp) {
			t.Fatalf("v%d: not framed in pieces", v)
		}
		got := bytes.Join(ff.pieces(nil), nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("v%d: pieces differ from encodeResponse (%d vs %d bytes)", v, len(got), len(want))
		}
		if !bytes.Equal(encodeResponse(nil, 42, resp), want) {
			t.Fatalf("v%d: the response's batches were not put back", v)
		}
		ff.reset()
	}
	empty := kmsg.NewPtrFetchResponse()
	empty.SetVersion(12)
	if ff.encode(1, empty) {
		t.Fatal("a response without batches was framed in pieces")
	}
}

// TestShareFetchFrameMatchesEncodeResponse: a ShareFetch response (its partitions'
// Records the log's batches) framed in pieces is, joined, byte for byte the frame
// encodeResponse makes, at every served version, with the records back in place.
func TestShareFetchFrameMatchesEncodeResponse(t *testing.T) {
	big := bytes.Repeat([]byte{0xcd}, 300)
	build := func(v int16) *kmsg.ShareFetchResponse {
		r := kmsg.NewPtrShareFetchResponse()
		r.SetVersion(v)
		r.AcquisitionLockTimeoutMillis = 30000
		for ti := range 2 {
			rt := kmsg.NewShareFetchResponseTopic()
			rt.TopicID[0] = byte(ti + 1)
			for p := int32(0); p < 3; p++ {
				rp := kmsg.NewShareFetchResponseTopicPartition()
				rp.Partition = p
				if p != 1 {
					rp.Records = append([]byte{byte(ti), byte(p)}, big[:100*(int(p)+1)]...)
					ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
					ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = 5, 9, 2
					rp.AcquiredRecords = append(rp.AcquiredRecords, ar)
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	}
	var ff fetchFrame
	for v := int16(1); v <= 2; v++ {
		resp := build(v)
		want := encodeResponse(nil, 7, resp)
		if !ff.encodeShare(7, resp) {
			t.Fatalf("v%d: not framed in pieces", v)
		}
		if got := bytes.Join(ff.pieces(nil), nil); !bytes.Equal(got, want) {
			t.Fatalf("v%d: pieces differ from encodeResponse (%d vs %d bytes)", v, len(got), len(want))
		}
		if !bytes.Equal(encodeResponse(nil, 7, resp), want) {
			t.Fatalf("v%d: the response's records were not put back", v)
		}
		ff.reset()
	}
	empty := kmsg.NewPtrShareFetchResponse()
	empty.SetVersion(1)
	if ff.encodeShare(1, empty) {
		t.Fatal("a response without records was framed in pieces")
	}
}
