package handler

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// TestShareSessionEpochs: epoch 0 opens (ShareFetch only), n must be the session's,
// -1 closes and hands back the partitions to release, as KIP-932 says.
func TestShareSessionEpochs(t *testing.T) {
	var s shareSessions
	k := shareKey{"g", "m"}
	p0, p1 := sharePart{[16]byte{1}, 0}, sharePart{[16]byte{1}, 1}
	if c := s.advance(k, 1, nil, nil, false, groupShareConfig{}); c.code != kerr.ShareSessionNotFound.Code {
		t.Fatalf("epoch 1 without a session: %d", c.code)
	}
	if c := s.advance(k, 0, nil, nil, true, groupShareConfig{}); c.code != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("ShareAcknowledge at epoch 0: %d", c.code)
	}
	c := s.advance(k, 0, []sharePart{p0}, nil, false, groupShareConfig{lockMs: 1234})
	if c.code != 0 || !slices.Equal(c.parts, []sharePart{p0}) || !c.added[p0] || c.cfg.lockMs != 1234 {
		t.Fatalf("open: %+v", c)
	}
	if c := s.advance(k, 2, nil, nil, false, groupShareConfig{}); c.code != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("epoch 2 when 1 is due: %d", c.code)
	}
	c = s.advance(k, 1, []sharePart{p0, p1}, nil, false, groupShareConfig{})
	if c.code != 0 || !slices.Equal(c.parts, []sharePart{p0, p1}) || c.added[p0] || !c.added[p1] || c.cfg.lockMs != 1234 {
		t.Fatalf("epoch 1 adding p1: %+v", c)
	}
	c = s.advance(k, 2, nil, []sharePart{p0}, true, groupShareConfig{})
	if c.code != 0 || !slices.Equal(c.parts, []sharePart{p1}) {
		t.Fatalf("epoch 2 forgetting p0: %+v", c)
	}
	if c := s.advance(shareKey{"g", "other"}, 3, nil, nil, false, groupShareConfig{}); c.code != kerr.ShareSessionNotFound.Code {
		t.Fatalf("another member's epoch: %d", c.code)
	}
	c = s.advance(k, -1, nil, nil, true, groupShareConfig{})
	if c.code != 0 || !slices.Equal(c.parts, []sharePart{p1}) {
		t.Fatalf("close: %+v", c)
	}
	if c := s.advance(k, 3, nil, nil, false, groupShareConfig{}); c.code != kerr.ShareSessionNotFound.Code {
		t.Fatalf("after close: %d", c.code)
	}
	// Epoch 0 again replaces a session.
	s.advance(k, 0, []sharePart{p0}, nil, false, groupShareConfig{})
	s.advance(k, 1, nil, nil, false, groupShareConfig{})
	if c := s.advance(k, 0, []sharePart{p1}, nil, false, groupShareConfig{}); c.code != 0 || !slices.Equal(c.parts, []sharePart{p1}) {
		t.Fatalf("reopen: %+v", c)
	}
	if m := s.drain(); len(m) != 1 || s.drain() != nil {
		t.Fatalf("drain: %v", m)
	}
}

func TestShareAckBatchesRefused(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, last []int64
		types       [][]int8
		renew       bool
	}{
		{"backwards", []int64{5}, []int64{4}, [][]int8{{1}}, false},
		{"negative", []int64{-1}, []int64{0}, [][]int8{{1}}, false},
		{"overlap", []int64{0, 2}, []int64{2, 3}, [][]int8{{1}, {1}}, false},
		{"no types", []int64{0}, []int64{0}, [][]int8{{}}, false},
		{"type count", []int64{0}, []int64{2}, [][]int8{{1, 1}}, false},
		{"unknown type", []int64{0}, []int64{0}, [][]int8{{5}}, true},
		{"renew without IsRenewAck", []int64{0}, []int64{0}, [][]int8{{4}}, false},
	} {
		if _, ok := shareAckBatches(c.first, c.last, c.types, c.renew); ok {
			t.Errorf("%s: accepted", c.name)
		}
	}
	bs, ok := shareAckBatches([]int64{0, 3}, []int64{2, 3}, [][]int8{{1, 0, 2}, {4}}, true)
	if !ok || len(bs) != 2 || bs[0].Types[2] != storagev1.ShareAcknowledgeType_SHARE_ACKNOWLEDGE_TYPE_RELEASE || bs[1].Types[0] != storagev1.ShareAcknowledgeType_SHARE_ACKNOWLEDGE_TYPE_RENEW {
		t.Fatalf("good batches: %v %v", bs, ok)
	}
}

// TestShareBatch: acquired records with offset gaps and delivery counts become one
// valid RecordBatch at their offsets and AcquiredRecords ranges.
func TestShareBatch(t *testing.T) {
	rec := func(off, ts int64, v string, dc int32) *storagev1.ShareAcquiredRecord {
		return &storagev1.ShareAcquiredRecord{DeliveryCount: dc, Record: &storagev1.Record{Sequence: off + 1, TimestampMs: ts, Value: []byte(v),
			Headers: []*storagev1.Header{{Key: "h", Value: []byte(v)}}}}
	}
	recs := []*storagev1.ShareAcquiredRecord{rec(10, 1000, "a", 1), rec(11, 990, "b", 1), rec(12, 1005, "c", 2), rec(20, 1001, "d", 2)}
	b := shareBatch(recs)
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if int(rb.Length) != len(b)-12 || rb.Magic != 2 || uint32(rb.CRC) != crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("header: length %d of %d, magic %d, crc %x", rb.Length, len(b), rb.Magic, rb.CRC)
	}
	if rb.FirstOffset != 10 || rb.LastOffsetDelta != 10 || rb.NumRecords != 4 || rb.FirstTimestamp != 1000 || rb.MaxTimestamp != 1005 || rb.ProducerID != -1 {
		t.Fatalf("batch %+v", rb)
	}
	in := rb.Records
	var got []string
	for i := 0; i < 4; i++ {
		l, n := binary.Varint(in)
		var r kmsg.Record
		if err := r.ReadFrom(in[:n+int(l)]); err != nil {
			t.Fatal(err)
		}
		in = in[n+int(l):]
		got = append(got, string(r.Value))
		if want := recs[i].Record; rb.FirstOffset+int64(r.OffsetDelta) != want.Sequence-1 || rb.FirstTimestamp+r.TimestampDelta64 != want.TimestampMs || string(r.Headers[0].Value) != string(want.Value) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if len(in) != 0 || !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("records %v, %d bytes left", got, len(in))
	}
	ranges := acquiredRanges(recs)
	want := [][3]int64{{10, 11, 1}, {12, 12, 2}, {20, 20, 2}}
	if len(ranges) != len(want) {
		t.Fatalf("ranges %+v", ranges)
	}
	for i, r := range ranges {
		if r.FirstOffset != want[i][0] || r.LastOffset != want[i][1] || int64(r.DeliveryCount) != want[i][2] {
			t.Fatalf("ranges %+v, want %v", ranges, want)
		}
	}
}

// fakeShare records ShareService calls and answers them as configured.
type fakeShare struct {
	storagev1.ShareServiceClient
	mu       sync.Mutex
	fetches  []*storagev1.ShareFetchRequest
	acks     []*storagev1.ShareAcknowledgeRequest
	releases []*storagev1.ReleaseMemberRequest
	ackErr   storagev1.ShareError
	// stored, when set, answers fetches asking for a batch with these bytes
	// and acquired offsets 5..6 at delivery count 3, for every partition.
	stored []byte
}

func (f *fakeShare) ShareFetch(_ context.Context, in *storagev1.ShareFetchRequest, _ ...grpc.CallOption) (*storagev1.ShareFetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetches = append(f.fetches, in)
	out := &storagev1.ShareFetchResponse{}
	for _, a := range in.Acknowledgements {
		out.AckResults = append(out.AckResults, &storagev1.ShareAckResult{Topic: a.Topic, Partition: a.Partition, Error: f.ackErr})
	}
	for _, p := range in.Partitions {
		if f.stored != nil && in.AsBatch {
			out.Partitions = append(out.Partitions, &storagev1.SharePartitionRecords{Topic: p.Topic, Partition: p.Partition,
				Batches: f.stored, Acquired: []*storagev1.ShareAcquiredRange{{FirstOffset: 5, LastOffset: 6, DeliveryCount: 3}}})
			continue
		}
		out.Partitions = append(out.Partitions, &storagev1.SharePartitionRecords{Topic: p.Topic, Partition: p.Partition,
			Records: []*storagev1.ShareAcquiredRecord{{DeliveryCount: 1, Record: &storagev1.Record{Sequence: 1, Value: []byte("v")}}}})
	}
	return out, nil
}

func (f *fakeShare) ShareAcknowledge(_ context.Context, in *storagev1.ShareAcknowledgeRequest, _ ...grpc.CallOption) (*storagev1.ShareAcknowledgeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, in)
	out := &storagev1.ShareAcknowledgeResponse{}
	for _, a := range in.Acknowledgements {
		out.Results = append(out.Results, &storagev1.ShareAckResult{Topic: a.Topic, Partition: a.Partition, Error: f.ackErr})
	}
	return out, nil
}

func (f *fakeShare) ReleaseMember(_ context.Context, in *storagev1.ReleaseMemberRequest, _ ...grpc.CallOption) (*storagev1.ReleaseMemberResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, in)
	return &storagev1.ReleaseMemberResponse{}, nil
}

// TestShareFetchAsBatchPassedOn: ShareFetch asks storage-core for the log's
// stored batches and passes them on byte for byte as the partition's Records, with
// the acquired ranges as AcquiredRecords.
func TestShareFetchAsBatchPassedOn(t *testing.T) {
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	fs := &fakeShare{stored: []byte("a batch, as it is")}
	h := New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1},
		Deps{Storage: st, Coordinator: co, Share: fs, Log: zaptest.NewLogger(t)})
	e := &env{h: h, st: st, co: co}
	e.createTopic(t, "t", 1, nil)
	md := e.do(t, &kmsg.MetadataRequest{Topics: []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}}, 12).(*kmsg.MetadataResponse)
	req := kmsg.NewPtrShareFetchRequest()
	req.SetVersion(1)
	req.GroupID, req.MemberID, req.MaxRecords = kmsg.StringPtr("g"), kmsg.StringPtr("m"), 10
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = md.Topics[0].TopicID
	rt.Partitions = []kmsg.ShareFetchRequestTopicPartition{kmsg.NewShareFetchRequestTopicPartition()}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := h.Handle(ctx, &Request{Body: req, Session: NewSession(false, AnonymousPrincipal)})
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.ShareFetchResponse)
	if len(fs.fetches) != 1 || !fs.fetches[0].AsBatch {
		t.Fatalf("storage fetches %+v, want one asking for a batch", fs.fetches)
	}
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("answer %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if string(p.Records) != string(fs.stored) || len(p.AcquiredRecords) != 1 {
		t.Fatalf("records %q, acquired %+v", p.Records, p.AcquiredRecords)
	}
	if a := p.AcquiredRecords[0]; a.FirstOffset != 5 || a.LastOffset != 6 || a.DeliveryCount != 3 {
		t.Fatalf("acquired %+v, want 5..6 at delivery count 3", a)
	}
}

// TestShareFetchHandler: the request checks Kafka makes before any storage call, the
// storage call ShareFetch makes, acknowledge errors per partition, and the release of
// a closed session and of a closed connection's sessions.
func TestShareFetchHandler(t *testing.T) {
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	fs := &fakeShare{}
	h := New(Config{NodeID: 1, ClusterID: "unit", AutoCreateTopics: true, DefaultPartitions: 1, Share: ShareConfig{RecordLockDuration: 7 * time.Second, DeliveryCountLimit: 4}},
		Deps{Storage: st, Coordinator: co, Share: fs, Log: zaptest.NewLogger(t)})
	e := &env{h: h, st: st, co: co}
	e.createTopic(t, "t", 2, nil)
	md := e.do(t, &kmsg.MetadataRequest{Topics: []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}}, 12).(*kmsg.MetadataResponse)
	tid := md.Topics[0].TopicID
	sess := NewSession(false, AnonymousPrincipal)
	do := func(req kmsg.Request, v int16) kmsg.Response {
		t.Helper()
		req.SetVersion(v)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := h.Handle(ctx, &Request{Body: req, Session: sess})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	fetch := func(member string, epoch int32, parts []int32, ack []int64) *kmsg.ShareFetchRequest {
		req := kmsg.NewPtrShareFetchRequest()
		req.GroupID, req.MemberID, req.ShareSessionEpoch, req.MaxRecords = kmsg.StringPtr("g"), kmsg.StringPtr(member), epoch, 10
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = tid
		for _, p := range parts {
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rp.Partition = p
			if ack != nil {
				b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
				b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = ack[0], ack[1], []int8{int8(ack[2])}
				rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, b)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return req
	}
	code := func(r kmsg.Response) int16 { return r.(*kmsg.ShareFetchResponse).ErrorCode }
	long := "0123456789012345678901234567890123456"
	for name, c := range map[string]struct {
		req  *kmsg.ShareFetchRequest
		v    int16
		want int16
	}{
		"member id too long": {fetch(long, 0, []int32{0}, nil), 1, kerr.InvalidRequest.Code},
		"no member id":       {fetch("", 0, []int32{0}, nil), 1, kerr.InvalidRequest.Code},
		"acks at epoch 0":    {fetch("m", 0, []int32{0}, []int64{0, 0, 1}), 1, kerr.InvalidRequest.Code},
		"no session":         {fetch("m", 4, []int32{0}, nil), 1, kerr.ShareSessionNotFound.Code},
		"renew with fetch limits": {func() *kmsg.ShareFetchRequest {
			r := fetch("m", 0, []int32{0}, []int64{0, 0, 4})
			r.IsRenewAck = true
			return r
		}(), 2, kerr.InvalidRequest.Code},
	} {
		if got := code(do(c.req, c.v)); got != c.want {
			t.Errorf("%s: %v, want %v", name, kerr.ErrorForCode(got), kerr.ErrorForCode(c.want))
		}
	}
	if len(fs.fetches)+len(fs.acks) != 0 {
		t.Fatalf("refused requests reached storage: %d fetches, %d acks", len(fs.fetches), len(fs.acks))
	}

	// Open: partition 0, 1 and 9 (not in the topic).
	resp := do(fetch("m", 0, []int32{0, 1, 9}, nil), 1).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode != 0 || resp.AcquisitionLockTimeoutMillis != 7000 || len(fs.fetches) != 1 {
		t.Fatalf("open: %+v", resp)
	}
	sf := fs.fetches[0]
	if len(sf.Partitions) != 2 || sf.LockDurationMs != 7000 || sf.DeliveryCountLimit != 4 || sf.MaxRecords != 10 || sf.GroupId != "g" || sf.MemberId != "m" {
		t.Fatalf("storage ShareFetch %+v", sf)
	}
	// The request's MaxBytes (kmsg's default, MaxInt32) is capped as Kafka's
	// fetch.max.bytes caps it; so are 0 and negative values, which storage would
	// otherwise read as no limit.
	other := func(r *kmsg.ShareFetchRequest) kmsg.Response { // on its own connection
		t.Helper()
		r.SetVersion(1)
		resp, err := h.Handle(context.Background(), &Request{Body: r, Session: NewSession(false, AnonymousPrincipal)})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, mb := range []int32{0, -1, 1 << 30} {
		r := fetch(fmt.Sprintf("cap%d", i), 0, []int32{0}, nil)
		r.MaxBytes = mb
		if code(other(r)) != 0 {
			t.Fatalf("MaxBytes %d refused", mb)
		}
		if got := fs.fetches[len(fs.fetches)-1].MaxBytes; got != shareMaxBytes {
			t.Fatalf("MaxBytes %d reached storage as %d, want %d", mb, got, shareMaxBytes)
		}
	}
	if sf.MaxBytes != shareMaxBytes {
		t.Fatalf("default MaxBytes reached storage as %d, want %d", sf.MaxBytes, shareMaxBytes)
	}
	r := fetch("small", 0, []int32{0}, nil)
	r.MaxBytes = 4096
	if other(r); fs.fetches[len(fs.fetches)-1].MaxBytes != 4096 {
		t.Fatalf("MaxBytes 4096 reached storage as %d", fs.fetches[len(fs.fetches)-1].MaxBytes)
	}
	fs.fetches = fs.fetches[:1]
	byPart := map[int32]kmsg.ShareFetchResponseTopicPartition{}
	for _, p := range resp.Topics[0].Partitions {
		byPart[p.Partition] = p
	}
	if byPart[9].ErrorCode != kerr.UnknownTopicOrPartition.Code || len(byPart[0].AcquiredRecords) != 1 || len(byPart[1].Records) == 0 {
		t.Fatalf("partitions %+v", byPart)
	}
	// Epoch 1 with an ack storage refuses: INVALID_RECORD_STATE on that partition. The
	// acknowledgements ride on the storage ShareFetch.
	fs.ackErr = storagev1.ShareError_SHARE_ERROR_INVALID_RECORD_STATE
	resp = do(fetch("m", 1, []int32{0}, []int64{0, 0, 1}), 1).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode != 0 || len(fs.fetches) != 2 || len(fs.fetches[1].Acknowledgements) != 1 || len(fs.acks) != 0 {
		t.Fatalf("epoch 1: %+v", resp)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.Partition == 0 && p.AcknowledgeErrorCode != kerr.InvalidRecordState.Code {
			t.Fatalf("ack error %v", kerr.ErrorForCode(p.AcknowledgeErrorCode))
		}
	}
	// A malformed batch never reaches storage.
	resp = do(fetch("m", 2, []int32{0}, []int64{3, 1, 1}), 1).(*kmsg.ShareFetchResponse)
	for _, p := range resp.Topics[0].Partitions {
		if p.Partition == 0 && p.AcknowledgeErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("malformed batch: %v", kerr.ErrorForCode(p.AcknowledgeErrorCode))
		}
	}
	if len(fs.fetches) != 3 || len(fs.fetches[2].Acknowledgements) != 0 || len(fs.acks) != 0 {
		t.Fatalf("malformed batch reached storage")
	}
	// Close with a final acknowledgement: applied alone (nothing is fetched), then the
	// session's partitions are released.
	fs.ackErr = 0
	final := fetch("m", -1, []int32{0}, []int64{0, 0, 1})
	final.Topics[0].Partitions = final.Topics[0].Partitions[:1]
	if r := do(final, 1).(*kmsg.ShareFetchResponse); r.ErrorCode != 0 || len(fs.acks) != 1 || len(fs.fetches) != 3 || len(fs.releases) != 1 || len(fs.releases[0].Partitions) != 2 {
		t.Fatalf("close: %+v, acks %d, releases %+v", r, len(fs.acks), fs.releases)
	}
	// A connection closing releases what its open sessions hold.
	do(fetch("m2", 0, []int32{1}, nil), 1)
	h.ConnectionClosed(sess)
	if len(fs.releases) != 2 || fs.releases[1].MemberId != "m2" || fs.releases[1].Partitions[0].Partition != 1 {
		t.Fatalf("connection close releases %+v", fs.releases)
	}
	// Without a Session (no connection state) the answer is an error, not a crash.
	if r := e.do(t, fetch("m", 0, []int32{0}, nil), 1).(*kmsg.ShareFetchResponse); r.ErrorCode != kerr.UnknownServerError.Code {
		t.Fatalf("no session state: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}
