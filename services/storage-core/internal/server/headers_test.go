package server

import (
	"context"
	"testing"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// checkNullEmpty checks that hs are the headers appended by TestHeaderNullAndEmpty:
// "null" without a value, "empty" with an empty one, "full" with "v".
func checkNullEmpty(t *testing.T, what string, hs []*storagev1.Header) {
	t.Helper()
	if len(hs) != 3 {
		t.Fatalf("%s: %d headers, want 3", what, len(hs))
	}
	if h := hs[0]; h.GetKey() != "null" || h.Value != nil {
		t.Errorf("%s: header %q value %q (nil %v), want null", what, h.GetKey(), h.Value, h.Value == nil)
	}
	if h := hs[1]; h.GetKey() != "empty" || h.Value == nil || len(h.Value) != 0 {
		t.Errorf("%s: header %q value %q (nil %v), want empty, not null", what, h.GetKey(), h.Value, h.Value == nil)
	}
	if h := hs[2]; h.GetKey() != "full" || string(h.Value) != "v" {
		t.Errorf("%s: header %q value %q, want \"v\"", what, h.GetKey(), h.Value)
	}
}

// TestHeaderNullAndEmpty: a header appended natively with no value reads back null and
// one with an empty value reads back empty, through Read and Subscribe (over gRPC, so
// through the proto encoding both ways), as Kafka tells them apart (length -1 and 0).
func TestHeaderNullAndEmpty(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	const ch = "kafka.hdr"
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
		t.Fatal(err)
	}
	hs := []*storagev1.Header{{Key: "null"}, {Key: "empty", Value: []byte{}}, {Key: "full", Value: []byte("v")}}
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: ch, Records: []*storagev1.AppendRecord{{Value: []byte("x"), Headers: hs}}}); err != nil {
		t.Fatal(err)
	}
	rr, err := c.Read(ctx, &storagev1.ReadRequest{Channel: ch, FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Records) != 1 {
		t.Fatalf("read %d records, want 1", len(rr.Records))
	}
	checkNullEmpty(t, "Read", rr.Records[0].Headers)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Subscribe(sctx, &storagev1.SubscribeRequest{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Records) != 1 {
		t.Fatalf("subscribe: %d records, want 1", len(m.Records))
	}
	checkNullEmpty(t, "Subscribe", m.Records[0].Headers)
}
