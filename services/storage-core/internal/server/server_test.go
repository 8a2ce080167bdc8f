package server

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs a server on port 0 in a temp dir and returns a client.
func startServer(t *testing.T, dir string) (storagev1.StorageServiceClient, func()) {
	t.Helper()
	return startServerLog(t, dir, zaptest.NewLogger(t))
}

func startServerTB(t testing.TB, dir string) (storagev1.StorageServiceClient, func()) {
	return startServerLog(t, dir, zap.NewNop())
}

func startServerLog(t testing.TB, dir string, log *zap.Logger) (storagev1.StorageServiceClient, func()) {
	t.Helper()
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	cc, err := grpcx.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		_ = cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	return storagev1.NewStorageServiceClient(cc), stop
}

// kafkaBatch builds a RecordBatch v2 with kmsg, as a Kafka producer would.
func kafkaBatch(t testing.TB, pid int64, epoch int16, seq int32, values ...string) []byte {
	t.Helper()
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v), Key: []byte("k")}
		body := r.AppendTo(nil)
		r.Length = int32(len(body) - 1) // Length 0 took one varint byte
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(values)), Records: recs,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

func TestGRPC(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()

	_, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "_sys"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reserved create: %v", err)
	}
	_, err = c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "bad/name"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad name: %v", err)
	}
	cr, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.orders"})
	if err != nil || !cr.Created {
		t.Fatalf("create: %v %v", cr, err)
	}
	if cr.Channel.Config.MaxMessageBytes != 1048588 || cr.Channel.LogStartSequence != 1 || cr.Channel.HighWatermark != 0 {
		t.Fatalf("channel: %v", cr.Channel)
	}
	if _, err = c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.orders"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("dup create: %v", err)
	}

	// Long poll woken by an append.
	readDone := make(chan *storagev1.ReadResponse, 1)
	go func() {
		r, err := c.Read(ctx, &storagev1.ReadRequest{Channel: "kafka.orders", FromSequence: 1, WaitMs: 30000})
		if err != nil {
			t.Errorf("read: %v", err)
		}
		readDone <- r
	}()
	ar, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.orders", Records: []*storagev1.AppendRecord{
		{Key: []byte("a"), Value: []byte("1"), Headers: []*storagev1.Header{{Key: "h", Value: []byte("v")}}},
		{Value: []byte{}},
	}})
	if err != nil || ar.FirstSequence != 1 || ar.LastSequence != 2 {
		t.Fatalf("append: %v %v", ar, err)
	}
	rr := <-readDone
	if rr == nil || len(rr.Records) != 2 || rr.HighWatermark != 2 || rr.NextSequence != 3 {
		t.Fatalf("read: %v", rr)
	}
	r0, r1 := rr.Records[0], rr.Records[1]
	if string(r0.Key) != "a" || string(r0.Value) != "1" || len(r0.Headers) != 1 || r0.Sequence != 1 || r0.ProducerId != -1 {
		t.Fatalf("record 0: %v", r0)
	}
	if r1.Key != nil || r1.Value == nil || len(r1.Value) != 0 {
		t.Fatalf("record 1 null/empty: %v", r1)
	}

	// Raw Kafka batches, idempotent.
	b := kafkaBatch(t, 7, 0, 0, "x", "y", "z")
	resp, err := c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{
		{Channel: "kafka.orders", Batches: b},
		{Channel: "kafka.missing", Batches: b},
		{Channel: "_x", Batches: b},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0]; r.Error != 0 || r.FirstSequence != 3 {
		t.Fatalf("append batches: %v", r)
	}
	if resp.Results[1].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND || resp.Results[2].Error != storagev1.ErrorCode_ERROR_CODE_RESERVED_CHANNEL {
		t.Fatalf("errors: %v", resp.Results)
	}
	// Retry of the same batch: the original sequence.
	resp, err = c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "kafka.orders", Batches: kafkaBatch(t, 7, 0, 0, "x", "y", "z")}}})
	if err != nil || resp.Results[0].FirstSequence != 3 || resp.Results[0].Error != 0 {
		t.Fatalf("dup: %v %v", resp, err)
	}
	// Corrupt CRC.
	bad := kafkaBatch(t, -1, -1, -1, "q")
	bad[len(bad)-1] ^= 0xff
	resp, _ = c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "kafka.orders", Batches: bad}}})
	if resp.Results[0].Error != storagev1.ErrorCode_ERROR_CODE_CORRUPT_BATCH {
		t.Fatalf("corrupt: %v", resp.Results[0])
	}

	// Fetch returns the stored frames.
	fr, err := c.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "kafka.orders", FromSequence: 3, MaxBytes: 1 << 20}, {Channel: "kafka.nope", FromSequence: 1}}, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if r := fr.Results[0]; r.Error != 0 || r.HighWatermark != 5 || len(r.Batches) != len(b) {
		t.Fatalf("fetch: %v", r)
	}
	if fr.Results[1].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
		t.Fatalf("fetch missing: %v", fr.Results[1])
	}
	// Fetch long poll woken by an append.
	fetchDone := make(chan *storagev1.FetchResponse, 1)
	go func() {
		fr, err := c.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "kafka.orders", FromSequence: 6}}, MaxWaitMs: 30000, MinBytes: 1})
		if err != nil {
			t.Errorf("fetch: %v", err)
		}
		fetchDone <- fr
	}()
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.orders", Records: []*storagev1.AppendRecord{{Value: []byte("w")}}}); err != nil {
		t.Fatal(err)
	}
	if fr := <-fetchDone; fr == nil || len(fr.Results[0].Batches) == 0 {
		t.Fatalf("fetch long poll: %v", fr)
	}

	// Subscribe from the first record.
	sctx, scancel := context.WithCancel(ctx)
	sub, err := c.Subscribe(sctx, &storagev1.SubscribeRequest{Channel: "kafka.orders", Start: &storagev1.SubscribeRequest_First{First: true}})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 6 {
		m, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got += len(m.Records)
	}
	scancel()
	for {
		if _, err := sub.Recv(); err != nil {
			break
		}
	}

	ls, err := c.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: "kafka.orders", TimestampMs: -1})
	if err != nil || ls.Sequence != 7 {
		t.Fatalf("lookup latest: %v %v", ls, err)
	}
	ls, err = c.LookupSequence(ctx, &storagev1.LookupSequenceRequest{Channel: "kafka.orders", TimestampMs: 1000})
	if err != nil || !ls.Found || ls.Sequence != 1 {
		t.Fatalf("lookup time: %v %v", ls, err)
	}
	dr, err := c.DeleteRecords(ctx, &storagev1.DeleteRecordsRequest{Channel: "kafka.orders", BeforeSequence: 3})
	if err != nil || dr.LogStartSequence != 3 {
		t.Fatalf("delete records: %v %v", dr, err)
	}
	// Again, and below the log start: nothing changes, no error (Kafka DeleteRecords).
	for _, before := range []int64{3, 2, 1} {
		dr, err := c.DeleteRecords(ctx, &storagev1.DeleteRecordsRequest{Channel: "kafka.orders", BeforeSequence: before})
		if err != nil || dr.LogStartSequence != 3 {
			t.Fatalf("delete records before %d with log start 3: %v %v", before, dr, err)
		}
	}
	if _, err := c.DeleteRecords(ctx, &storagev1.DeleteRecordsRequest{Channel: "kafka.orders", BeforeSequence: 8}); status.Code(err) != codes.OutOfRange {
		t.Fatalf("delete records past the high watermark: %v", err)
	}
	if _, err := c.Read(ctx, &storagev1.ReadRequest{Channel: "kafka.orders", FromSequence: 1}); status.Code(err) != codes.OutOfRange {
		t.Fatalf("read below log start: %v", err)
	}
	uc, err := c.UpdateChannelConfig(ctx, &storagev1.UpdateChannelConfigRequest{Name: "kafka.orders", Config: &storagev1.ChannelConfig{RetentionMs: 1000}, UpdateMask: []string{"retention_ms"}})
	if err != nil || uc.Channel.Config.RetentionMs != 1000 {
		t.Fatalf("update config: %v %v", uc, err)
	}
	lr, err := c.ListChannels(ctx, &storagev1.ListChannelsRequest{Prefix: "kafka."})
	if err != nil || len(lr.Channels) != 1 {
		t.Fatalf("list: %v %v", lr, err)
	}
	if _, err := c.DeleteChannel(ctx, &storagev1.DeleteChannelRequest{Name: "kafka.orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetChannel(ctx, &storagev1.GetChannelRequest{Name: "kafka.orders"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c, stop := startServer(t, dir)
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.t"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.t", Records: []*storagev1.AppendRecord{{Value: []byte("v")}}}); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	c, stop = startServer(t, dir)
	defer stop()
	g, err := c.GetChannel(ctx, &storagev1.GetChannelRequest{Name: "gcp.t"})
	if err != nil || g.Channel.HighWatermark != 3 {
		t.Fatalf("after restart: %v %v", g, err)
	}
}

func TestSubscribeStartsAndFetchLimits(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	for _, n := range []string{"gcp.a", "gcp.b"} {
		if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.a", Records: []*storagev1.AppendRecord{{TimestampMs: int64(1000 + i), Value: []byte{byte(i)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.b", Records: []*storagev1.AppendRecord{{Value: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	first := func(req *storagev1.SubscribeRequest) int64 {
		t.Helper()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		sub, err := c.Subscribe(sctx, req)
		if err != nil {
			t.Fatal(err)
		}
		m, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return m.Records[0].Sequence
	}
	if got := first(&storagev1.SubscribeRequest{Channel: "gcp.a", Start: &storagev1.SubscribeRequest_LastN{LastN: 3}}); got != 8 {
		t.Errorf("last_n 3 starts at %d", got)
	}
	if got := first(&storagev1.SubscribeRequest{Channel: "gcp.a", Start: &storagev1.SubscribeRequest_TimeMs{TimeMs: 1004}}); got != 5 {
		t.Errorf("time 1004 starts at %d", got)
	}
	if got := first(&storagev1.SubscribeRequest{Channel: "gcp.a", Start: &storagev1.SubscribeRequest_Sequence{Sequence: 6}}); got != 6 {
		t.Errorf("sequence 6 starts at %d", got)
	}
	// Errors of server streams arrive with the first Recv.
	sub, err := c.Subscribe(ctx, &storagev1.SubscribeRequest{Channel: "_x"})
	if err == nil {
		_, err = sub.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("reserved subscribe: %v", err)
	}
	// Total max_bytes of 1: the first channel still gets one whole batch, the second none.
	fr, err := c.Fetch(ctx, &storagev1.FetchRequest{MaxBytes: 1, Channels: []*storagev1.FetchChannel{
		{Channel: "gcp.a", FromSequence: 1, MaxBytes: 1}, {Channel: "gcp.b", FromSequence: 1, MaxBytes: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Results[0].Batches) == 0 || len(fr.Results[1].Batches) != 0 || fr.Results[1].HighWatermark != 1 {
		t.Fatalf("fetch limits: %v", fr.Results)
	}
	// Past the high watermark: per-channel error, offsets still filled.
	fr, err = c.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "gcp.b", FromSequence: 5}}})
	if err != nil || fr.Results[0].Error != storagev1.ErrorCode_ERROR_CODE_SEQUENCE_OUT_OF_RANGE || fr.Results[0].LogStartSequence != 1 {
		t.Fatalf("fetch out of range: %v %v", fr, err)
	}
}

func TestConfigFsync(t *testing.T) {
	for in, want := range map[string]time.Duration{"always": 0, "interval=10ms": 10 * time.Millisecond} {
		c := Config{Fsync: in}
		if d, err := c.FsyncInterval(); err != nil || d != want {
			t.Errorf("%q: %v %v", in, d, err)
		}
	}
	for _, in := range []string{"never", "interval=", "interval=-1s", "interval=abc"} {
		c := Config{Fsync: in}
		if _, err := c.FsyncInterval(); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	if _, err := New(Config{DataDir: t.TempDir(), Fsync: "sometimes", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, zap.NewNop()); err == nil {
		t.Error("bad --fsync accepted by New")
	}
}

// TestAppendIdempotentProducer: a native Append carrying a producer identity is
// de-duplicated as Kafka's idempotent producer batches are (a retry returns the
// original sequences and stores nothing), also after a restart; a gap or an older
// epoch is FAILED_PRECONDITION and stores nothing; a bad identity is INVALID_ARGUMENT.
func TestAppendIdempotentProducer(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c, stop := startServer(t, dir)
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.idem"}); err != nil {
		t.Fatal(err)
	}
	recs := func(vs ...string) []*storagev1.AppendRecord {
		var out []*storagev1.AppendRecord
		for _, v := range vs {
			out = append(out, &storagev1.AppendRecord{TimestampMs: 1000, Value: []byte(v)})
		}
		return out
	}
	app := func(c storagev1.StorageServiceClient, epoch, seq int32, vs ...string) (*storagev1.AppendResponse, error) {
		return c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.idem", Records: recs(vs...),
			Producer: &storagev1.AppendProducer{ProducerId: 7, ProducerEpoch: epoch, BaseSequence: seq}})
	}
	first, err := app(c, 0, 0, "a", "b")
	if err != nil || first.Duplicate || first.FirstSequence != 1 || first.LastSequence != 2 {
		t.Fatalf("first append: %v %v", first, err)
	}
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.idem", Records: recs("plain")}); err != nil {
		t.Fatal(err)
	}
	dup, err := app(c, 0, 0, "a", "b")
	if err != nil || !dup.Duplicate || dup.FirstSequence != 1 || dup.LastSequence != 2 {
		t.Fatalf("retry: %v %v, want duplicate of 1..2", dup, err)
	}
	if _, err := app(c, 0, 5, "gap"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("sequence gap: %v, want FailedPrecondition", err)
	}
	next, err := app(c, 0, 2, "c")
	if err != nil || next.Duplicate || next.FirstSequence != 4 {
		t.Fatalf("next batch: %v %v", next, err)
	}
	for _, bad := range []*storagev1.AppendProducer{{ProducerId: -1}, {ProducerId: 1, ProducerEpoch: 40000}, {ProducerId: 1, BaseSequence: -2}} {
		if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.idem", Records: recs("x"), Producer: bad}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("producer %v: %v, want InvalidArgument", bad, err)
		}
	}
	stop()

	c, stop = startServer(t, dir)
	defer stop()
	dup, err = app(c, 0, 2, "c")
	if err != nil || !dup.Duplicate || dup.FirstSequence != 4 {
		t.Fatalf("retry after restart: %v %v, want duplicate of 4", dup, err)
	}
	if _, err := app(c, 1, 0, "new epoch"); err != nil {
		t.Fatalf("newer epoch from 0: %v", err)
	}
	if _, err := app(c, 0, 3, "fenced"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("older epoch: %v, want FailedPrecondition", err)
	}
	r, err := c.Read(ctx, &storagev1.ReadRequest{Channel: "kafka.idem", FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range r.Records {
		got = append(got, string(rec.Value))
	}
	if want := []string{"a", "b", "plain", "c", "new epoch"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("log holds %q, want %q", got, want)
	}
}
