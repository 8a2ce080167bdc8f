package server

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestFetchWireMatchesProtoMarshal checks that the by-reference encoding is the bytes
// proto.Marshal produces, for results with and without batches, errors and negative
// numbers.
func TestFetchWireMatchesProtoMarshal(t *testing.T) {
	m := &storagev1.FetchResponse{Results: []*storagev1.FetchChannelResult{
		{Channel: "kafka.a", HighWatermark: 10, LastStableSequence: 10, LogStartSequence: 1, Batches: bytes.Repeat([]byte{7}, 3000)},
		{Channel: "kafka.b", Error: storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, HighWatermark: -1},
		{},
		{Channel: "kafka.c~3", Batches: []byte{1, 2, 3}},
	}}
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fetchWire{m: m, fb: &fetchBuffers{}}.MarshalBuffers(grpcx.BufferPool)
	if err != nil {
		t.Fatal(err)
	}
	if b := got.Materialize(); !bytes.Equal(b, want) {
		t.Fatalf("encoding differs:\n got %x\nwant %x", b, want)
	}
}

// TestFetchOverGRPCByReference fetches many partitions over gRPC, where the answer is
// read into pooled buffers and sent by reference, repeatedly (buffers are reused
// between calls), and checks every answer against the bytes appended.
func TestFetchOverGRPCByReference(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	chans := []string{"kafka.f", "kafka.f~1", "kafka.f~2"}
	want := map[string][]byte{}
	for i, ch := range chans {
		if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
			t.Fatal(err)
		}
		var values [][]byte
		total := 0
		for j := range 20 {
			v := bytes.Repeat([]byte{byte('a' + i)}, 100+j)
			b := kafkaBatch(t, -1, -1, -1, string(v))
			res, err := c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: ch, Batches: b}}})
			if err != nil {
				t.Fatal(err)
			}
			if r := res.Results[0]; r.Error != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				t.Fatalf("append %s: %v %s", ch, r.Error, r.ErrorMessage)
			}
			values = append(values, v)
			total += len(b)
		}
		raw, err := c.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: ch, FromSequence: 1, MaxBytes: 1 << 20}}})
		if err != nil {
			t.Fatal(err)
		}
		want[ch] = raw.Results[0].Batches
		if len(want[ch]) != total {
			t.Fatalf("%s: fetched %d bytes, appended %d", ch, len(want[ch]), total)
		}
		for _, v := range values {
			if !bytes.Contains(want[ch], v) {
				t.Fatalf("%s: fetched batches lack value %q", ch, v)
			}
		}
	}
	for round := range 50 {
		req := &storagev1.FetchRequest{MaxBytes: 1 << 20}
		for _, ch := range chans {
			req.Channels = append(req.Channels, &storagev1.FetchChannel{Channel: ch, FromSequence: 1, MaxBytes: 1 << 20})
		}
		req.Channels = append(req.Channels, &storagev1.FetchChannel{Channel: "kafka.missing", FromSequence: 1})
		resp, err := c.Fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Results) != len(chans)+1 {
			t.Fatalf("round %d: %d results", round, len(resp.Results))
		}
		for i, ch := range chans {
			r := resp.Results[i]
			if r.Channel != ch || r.HighWatermark != 20 || r.LogStartSequence != 1 || !bytes.Equal(r.Batches, want[ch]) {
				t.Fatalf("round %d %s: got channel %q hw %d log start %d, %d bytes (equal %v)", round, ch, r.Channel, r.HighWatermark, r.LogStartSequence, len(r.Batches), bytes.Equal(r.Batches, want[ch]))
			}
		}
		if r := resp.Results[len(chans)]; r.Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND || len(r.Batches) != 0 {
			t.Fatalf("round %d: missing channel got %v", round, r)
		}
	}
}
