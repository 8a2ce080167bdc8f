package server

import (
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestUnknownIsolationLevel: Read, Subscribe, LookupSequence, Fetch and ShareFetch
// asked for an isolation level the API does not define are InvalidArgument, not served
// as READ_UNCOMMITTED (which would hand an open transaction's records to a client that
// asked for something stricter); a negative max_records_per_message is InvalidArgument
// too. The defined levels still read.
func TestUnknownIsolationLevel(t *testing.T) {
	ctx, sc, shc := startShareServer(t)
	ch := channel.KafkaPartition("iso", 0)
	if _, err := sc.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Append(ctx, &storagev1.AppendRequest{Channel: ch, Records: []*storagev1.AppendRecord{{Value: []byte("a")}}}); err != nil {
		t.Fatal(err)
	}
	const bad = storagev1.IsolationLevel(9)
	want := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", what, err)
		}
	}
	_, err := sc.Read(ctx, &storagev1.ReadRequest{Channel: ch, IsolationLevel: bad})
	want("Read", err)
	_, err = sc.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: ch, TimestampMs: -1, IsolationLevel: bad})
	want("LookupSequence", err)
	_, err = sc.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: ch, FromSequence: 1, MaxBytes: 1 << 20}},
		MaxBytes: 1 << 20, IsolationLevel: bad})
	want("Fetch", err)
	_, err = shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: 10,
		Partitions: []*storagev1.SharePartitionRef{{Topic: "iso", Partition: 0}}, IsolationLevel: bad})
	want("ShareFetch", err)
	for _, req := range []*storagev1.SubscribeRequest{
		{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}, IsolationLevel: bad},
		{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}, MaxRecordsPerMessage: -1},
	} {
		st, err := sc.Subscribe(ctx, req)
		if err == nil {
			_, err = st.Recv()
		}
		want("Subscribe "+req.String(), err)
	}
	for _, l := range []storagev1.IsolationLevel{0, 1, 2} {
		r, err := sc.Read(ctx, &storagev1.ReadRequest{Channel: ch, IsolationLevel: l})
		if err != nil || len(r.GetRecords()) != 1 {
			t.Errorf("Read at %v: %v, %v", l, r, err)
		}
		st, err := sc.Subscribe(ctx, &storagev1.SubscribeRequest{Channel: ch, Start: &storagev1.SubscribeRequest_First{First: true}, IsolationLevel: l})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := st.Recv(); err != nil && err != io.EOF || len(m.GetRecords()) != 1 {
			t.Errorf("Subscribe at %v: %v, %v", l, m, err)
		}
	}
}
