package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Limits of the native API (storage.proto comments).
const (
	maxAppendRecords     = 10000
	defaultReadRecords   = 1000
	maxReadRecords       = 10000
	defaultReadBytes     = 1 << 20
	defaultSubscribeRecs = 500
	subscribeMaxBytes    = 4 << 20
	defaultFetchBytes    = 1 << 20
	maxFetchTotalBytes   = 64 << 20
	maxWait              = 5 * time.Minute
)

type service struct {
	storagev1.UnimplementedStorageServiceServer
	st *store.Store
	// raft: the store runs in raft mode (GetChannel names the leader).
	raft bool
	log  *zap.Logger
	// qm is the queue engine: DeleteChannel of a queue deletes it through qm.
	qm *queue.Manager

	calls *prometheus.CounterVec

	done     chan struct{}
	stopOnce sync.Once
}

func newService(st *store.Store, log *zap.Logger, reg prometheus.Registerer) *service {
	s := &service{st: st, raft: st.RaftTransport() != nil, log: log, done: make(chan struct{}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_storage_calls_total", Help: "gRPC calls by method and outcome (ok or error code)."},
			[]string{"method", "outcome"}),
	}
	reg.MustRegister(s.calls)
	return s
}

// stop ends long polls and streams (shutdown).
func (s *service) stop() { s.stopOnce.Do(func() { close(s.done) }) }

func (s *service) count(method string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = status.Code(err).String()
	}
	s.calls.WithLabelValues(method, outcome).Inc()
}

// channelFor validates name and returns its log.
func (s *service) channelFor(name string) (*store.Log, error) {
	if err := channel.Validate(name); err != nil {
		return nil, err
	}
	return s.st.Get(name)
}

// writableChannelFor is channelFor for calls that change a log: a queue's log is
// refused (ErrQueueChannel); its bindings write it. In raft mode a channel this node
// does not hold is confirmed absent with the metadata group first
// (store.GetConfirmed), so a write reaching a lagging replica is redirected rather than
// told the channel does not exist.
func (s *service) writableChannelFor(name string) (*store.Log, error) {
	if err := channel.Validate(name); err != nil {
		return nil, err
	}
	l, err := s.st.GetConfirmed(name)
	return writable(name, l, err)
}

// writableChannelsFor is writableChannelFor of every name, the absent ones confirmed
// together (store.GetConfirmedAll: one barrier for all).
func (s *service) writableChannelsFor(names []string) ([]*store.Log, []error) {
	logs, errs := make([]*store.Log, len(names)), make([]error, len(names))
	var look []string
	var at []int
	for i, n := range names {
		if errs[i] = channel.Validate(n); errs[i] == nil {
			look, at = append(look, n), append(at, i)
		}
	}
	ls, es := s.st.GetConfirmedAll(look)
	for j, i := range at {
		logs[i], errs[i] = writable(names[i], ls[j], es[j])
	}
	return logs, errs
}

// writable refuses a queue's log l (of name; err is its lookup's) for writes.
func writable(name string, l *store.Log, err error) (*store.Log, error) {
	if err == nil && l.Kind() == store.KindQueue {
		return nil, fmt.Errorf("%w: %s is written by its bindings only (QueueService)", ErrQueueChannel, name)
	}
	return l, err
}

func configFromProto(c *storagev1.ChannelConfig) store.ChannelConfig {
	if c == nil {
		return store.ChannelConfig{}
	}
	return store.ChannelConfig{
		RetentionMs: c.RetentionMs, RetentionBytes: c.RetentionBytes, MaxMessageBytes: c.MaxMessageBytes,
		SegmentBytes: c.SegmentBytes, CleanupPolicy: int32(c.CleanupPolicy), TimestampType: int32(c.TimestampType),
		SegmentMs: c.SegmentMs, TimestampBeforeMaxMs: c.TimestampBeforeMaxMs, TimestampAfterMaxMs: c.TimestampAfterMaxMs,
		MinCleanableDirtyRatio: c.MinCleanableDirtyRatio, MinCompactionLagMs: c.MinCompactionLagMs,
		MaxCompactionLagMs: c.MaxCompactionLagMs, DeleteRetentionMs: c.DeleteRetentionMs,
	}
}

func configToProto(c store.ChannelConfig) *storagev1.ChannelConfig {
	return &storagev1.ChannelConfig{
		RetentionMs: c.RetentionMs, RetentionBytes: c.RetentionBytes, MaxMessageBytes: c.MaxMessageBytes,
		SegmentBytes: c.SegmentBytes, CleanupPolicy: storagev1.CleanupPolicy(c.CleanupPolicy),
		TimestampType: storagev1.TimestampType(c.TimestampType), SegmentMs: c.SegmentMs,
		TimestampBeforeMaxMs: c.TimestampBeforeMaxMs, TimestampAfterMaxMs: c.TimestampAfterMaxMs,
		MinCleanableDirtyRatio: c.MinCleanableDirtyRatio, MinCompactionLagMs: c.MinCompactionLagMs,
		MaxCompactionLagMs: c.MaxCompactionLagMs, DeleteRetentionMs: c.DeleteRetentionMs,
	}
}

// describe builds the Channel message; config is the effective one (defaults filled).
func describe(l *store.Log) *storagev1.Channel {
	size, segs := l.Stats()
	return &storagev1.Channel{
		Name:               l.Name(),
		Kind:               storagev1.ChannelKind(l.Kind()),
		Config:             configToProto(l.Config().Effective()),
		LogStartSequence:   channel.OffsetToSequence(l.LogStart()),
		HighWatermark:      l.HighWatermark(),
		LastStableSequence: min(l.LastStable(), l.HighWatermark()),
		SizeBytes:          size,
		CreatedMs:          l.CreatedMs(),
		SegmentCount:       int32(segs),
	}
}

func (s *service) CreateChannel(_ context.Context, req *storagev1.CreateChannelRequest) (_ *storagev1.CreateChannelResponse, err error) {
	defer func() { s.count("CreateChannel", err) }()
	if req.Kind != storagev1.ChannelKind_CHANNEL_KIND_UNSPECIFIED && req.Kind != storagev1.ChannelKind_CHANNEL_KIND_LOG {
		if req.Kind == storagev1.ChannelKind_CHANNEL_KIND_QUEUE {
			return nil, status.Error(codes.InvalidArgument, "queues are created with QueueService.CreateQueue")
		}
		return nil, status.Errorf(codes.InvalidArgument, "channel kind %v is not supported", req.Kind)
	}
	l, created, err := s.st.Create(req.Name, configFromProto(req.Config), req.IfNotExists)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.CreateChannelResponse{Channel: describe(l), Created: created}, nil
}

func (s *service) GetChannel(ctx context.Context, req *storagev1.GetChannelRequest) (_ *storagev1.GetChannelResponse, err error) {
	defer func() { s.count("GetChannel", err) }()
	l, err := s.channelFor(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	ch := describe(l)
	if s.raft {
		if id, addr, term, err := s.st.RaftLeader(req.Name); err == nil {
			ch.LeaderId, ch.LeaderAddress, ch.LeaderTerm = id, addr, term
		}
		// Only the leader knows its followers' progress; elsewhere the lists stay empty.
		if r, err := s.st.RaftReplicas(ctx, req.Name); err == nil {
			ch.ReplicaIds, ch.IsrIds = r.Voters, r.InSync
		}
	}
	return &storagev1.GetChannelResponse{Channel: ch}, nil
}

func (s *service) ListChannels(_ context.Context, req *storagev1.ListChannelsRequest) (_ *storagev1.ListChannelsResponse, err error) {
	defer func() { s.count("ListChannels", err) }()
	resp := &storagev1.ListChannelsResponse{}
	for _, l := range s.st.List(req.Prefix) {
		if channel.IsReserved(l.Name()) {
			continue
		}
		resp.Channels = append(resp.Channels, describe(l))
	}
	return resp, nil
}

func (s *service) DeleteChannel(_ context.Context, req *storagev1.DeleteChannelRequest) (_ *storagev1.DeleteChannelResponse, err error) {
	defer func() { s.count("DeleteChannel", err) }()
	if err := channel.Validate(req.Name); err != nil {
		return nil, toStatus(err)
	}
	if s.qm != nil {
		// A queue goes with its delivery state and snapshots (QueueService.DeleteQueue);
		// the engine also serializes a log's delete with queue creates.
		if err := s.qm.DeleteChannel(req.Name, req.IfExists); err != nil {
			return nil, toStatus(err)
		}
		return &storagev1.DeleteChannelResponse{}, nil
	}
	if err := s.st.Delete(req.Name, req.IfExists); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.DeleteChannelResponse{}, nil
}

func (s *service) UpdateChannelConfig(_ context.Context, req *storagev1.UpdateChannelConfigRequest) (_ *storagev1.UpdateChannelConfigResponse, err error) {
	defer func() { s.count("UpdateChannelConfig", err) }()
	l, err := s.writableChannelFor(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := l.UpdateConfigFields(configFromProto(req.Config), req.UpdateMask); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.UpdateChannelConfigResponse{Channel: describe(l)}, nil
}

func (s *service) Append(_ context.Context, req *storagev1.AppendRequest) (_ *storagev1.AppendResponse, err error) {
	defer func() { s.count("Append", err) }()
	l, err := s.writableChannelFor(req.Channel)
	if err != nil {
		return nil, toStatus(err)
	}
	if n := len(req.Records); n < 1 || n > maxAppendRecords {
		return nil, status.Errorf(codes.InvalidArgument, "append carries %d records; want 1..%d", n, maxAppendRecords)
	}
	recs := make([]store.NewRecord, len(req.Records))
	for i, r := range req.Records {
		if r.TimestampMs < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "record %d: negative timestamp %d", i, r.TimestampMs)
		}
		recs[i] = store.NewRecord{Timestamp: r.TimestampMs, Key: r.Key, Value: r.Value}
		if len(r.Headers) > 0 {
			hs := make([]store.Header, len(r.Headers))
			for j, h := range r.Headers {
				hs[j] = store.Header{Key: h.Key, Value: h.Value}
			}
			recs[i].Headers = hs
		}
	}
	var prod *store.Producer
	if p := req.Producer; p != nil {
		if p.ProducerId < 0 || p.ProducerEpoch < 0 || p.ProducerEpoch > math.MaxInt16 || p.BaseSequence < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "producer: id %d, epoch %d, base sequence %d; want id >= 0, epoch 0..%d, base sequence >= 0", p.ProducerId, p.ProducerEpoch, p.BaseSequence, math.MaxInt16)
		}
		prod = &store.Producer{ID: p.ProducerId, Epoch: int16(p.ProducerEpoch), BaseSequence: p.BaseSequence}
	}
	res, ts, err := l.AppendProduced(recs, prod)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.AppendResponse{FirstSequence: channel.OffsetToSequence(res.BaseOffset), LastSequence: channel.OffsetToSequence(res.LastOffset), TimestampMs: ts, Duplicate: res.Duplicate}, nil
}

func toProtoRecords(recs []store.Record) []*storagev1.Record {
	out := make([]*storagev1.Record, len(recs))
	for i := range recs {
		r := &recs[i]
		pr := &storagev1.Record{
			Sequence: channel.OffsetToSequence(r.Offset), TimestampMs: r.Timestamp, Key: r.Key, Value: r.Value,
			ProducerId: r.ProducerID, ProducerEpoch: int32(r.ProducerEpoch),
			Transactional: r.Transactional, Control: r.Control,
		}
		if len(r.Headers) > 0 {
			pr.Headers = make([]*storagev1.Header, len(r.Headers))
			for j, h := range r.Headers {
				pr.Headers[j] = &storagev1.Header{Key: h.Key, Value: h.Value}
			}
		}
		out[i] = pr
	}
	return out
}

func (s *service) Read(ctx context.Context, req *storagev1.ReadRequest) (_ *storagev1.ReadResponse, err error) {
	defer func() { s.count("Read", err) }()
	l, err := s.channelFor(req.Channel)
	if err != nil {
		return nil, toStatus(err)
	}
	if req.FromSequence < 0 || req.MaxRecords < 0 || req.MaxBytes < 0 || req.WaitMs < 0 {
		return nil, status.Error(codes.InvalidArgument, "from_sequence, max_records, max_bytes and wait_ms must not be negative")
	}
	if err := checkIsolation(req.IsolationLevel); err != nil {
		return nil, err
	}
	maxRecs := int(req.MaxRecords)
	if maxRecs == 0 {
		maxRecs = defaultReadRecords
	}
	maxRecs = min(maxRecs, maxReadRecords)
	maxBytes := int(req.MaxBytes)
	if maxBytes == 0 {
		maxBytes = defaultReadBytes
	}
	off := channel.SequenceToOffset(req.FromSequence)
	if req.FromSequence == 0 {
		off = l.LogStart()
	}
	if off < l.LogStart() || off > l.HighWatermark() {
		return nil, status.Errorf(codes.OutOfRange, "sequence %d outside [%d, %d]", channel.OffsetToSequence(off), channel.OffsetToSequence(l.LogStart()), channel.OffsetToSequence(l.HighWatermark()))
	}
	read, wait, end := l.ReadRecords, l.Wait, l.HighWatermark
	if req.IsolationLevel == storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
		read, wait, end = l.ReadCommitted, l.WaitStable, l.LastStable
	}
	if req.WaitMs > 0 && off >= end() {
		wctx, cancel := s.waitCtx(ctx)
		wait(wctx, off, min(time.Duration(req.WaitMs)*time.Millisecond, maxWait))
		cancel()
	}
	recs, next, err := read(off, maxRecs, maxBytes)
	if err != nil {
		return nil, toStatus(err)
	}
	hw := l.HighWatermark()
	return &storagev1.ReadResponse{
		Records: toProtoRecords(recs), HighWatermark: hw, LogStartSequence: channel.OffsetToSequence(l.LogStart()),
		LastStableSequence: min(l.LastStable(), hw), NextSequence: channel.OffsetToSequence(next),
	}, nil
}

// checkIsolation refuses an isolation level the API does not define with
// InvalidArgument: read as READ_UNCOMMITTED, as the reads did before, a client asking
// for a stricter level this server does not know would be handed open and aborted
// transactions' records.
func checkIsolation(l storagev1.IsolationLevel) error {
	if _, ok := storagev1.IsolationLevel_name[int32(l)]; !ok {
		return status.Errorf(codes.InvalidArgument, "isolation_level %d is none of UNSPECIFIED, READ_UNCOMMITTED (1), READ_COMMITTED (2)", l)
	}
	return nil
}

// waitCtx is ctx, also cancelled at shutdown.
func (s *service) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (s *service) Subscribe(req *storagev1.SubscribeRequest, stream storagev1.StorageService_SubscribeServer) (err error) {
	defer func() { s.count("Subscribe", err) }()
	l, err := s.channelFor(req.Channel)
	if err != nil {
		return toStatus(err)
	}
	if req.MaxRecordsPerMessage < 0 {
		return status.Error(codes.InvalidArgument, "max_records_per_message must not be negative")
	}
	if err := checkIsolation(req.IsolationLevel); err != nil {
		return err
	}
	per := int(req.MaxRecordsPerMessage)
	if per == 0 {
		per = defaultSubscribeRecs
	}
	per = min(per, maxReadRecords)
	var off int64
	switch st := req.Start.(type) {
	case *storagev1.SubscribeRequest_First:
		off = l.LogStart()
	case *storagev1.SubscribeRequest_Sequence:
		off = channel.SequenceToOffset(st.Sequence)
		if st.Sequence < 1 || off < l.LogStart() || off > l.HighWatermark() {
			return status.Errorf(codes.OutOfRange, "sequence %d outside [%d, %d]", st.Sequence, channel.OffsetToSequence(l.LogStart()), channel.OffsetToSequence(l.HighWatermark()))
		}
	case *storagev1.SubscribeRequest_TimeMs:
		o, _, found, err := l.LookupTime(st.TimeMs)
		if err != nil {
			return toStatus(err)
		}
		off = l.HighWatermark()
		if found {
			off = o
		}
	case *storagev1.SubscribeRequest_LastN:
		if st.LastN < 0 {
			return status.Error(codes.InvalidArgument, "last_n must not be negative")
		}
		off = max(l.LogStart(), l.HighWatermark()-st.LastN)
	default: // new, or unset
		off = l.HighWatermark()
	}
	read := l.ReadRecords
	if req.IsolationLevel == storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
		read = l.ReadCommitted
	}
	ctx, cancel := s.waitCtx(stream.Context())
	defer cancel()
	for {
		changed := l.Changed()
		recs, next, err := read(off, per, subscribeMaxBytes)
		if err != nil {
			return toStatus(err)
		}
		off = next
		if len(recs) > 0 {
			if err := stream.Send(&storagev1.SubscribeResponse{Records: toProtoRecords(recs), HighWatermark: l.HighWatermark()}); err != nil {
				return err
			}
			continue
		}
		select {
		case <-changed:
			if _, err := s.st.Get(req.Channel); err != nil {
				return toStatus(err)
			}
		case <-ctx.Done():
			if stream.Context().Err() != nil {
				return status.FromContextError(stream.Context().Err()).Err()
			}
			return status.Error(codes.Unavailable, "server shutting down")
		}
	}
}

func (s *service) LookupSequence(_ context.Context, req *storagev1.LookupSequenceRequest) (_ *storagev1.LookupSequenceResponse, err error) {
	defer func() { s.count("LookupSequence", err) }()
	l, err := s.channelFor(req.Channel)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := checkIsolation(req.IsolationLevel); err != nil {
		return nil, err
	}
	// At read_committed (Kafka ListOffsets isolation_level 1) a lookup answers
	// nothing at or past the last stable offset, and -1 answers it.
	committed := req.IsolationLevel == storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	end, limit := l.HighWatermark(), int64(math.MaxInt64)
	if committed {
		end = min(l.LastStable(), end)
		limit = end
	}
	switch ts := req.TimestampMs; {
	case ts == -1:
		return &storagev1.LookupSequenceResponse{Sequence: channel.OffsetToSequence(end), TimestampMs: -1, Found: true}, nil
	case ts == -2:
		return &storagev1.LookupSequenceResponse{Sequence: channel.OffsetToSequence(l.LogStart()), TimestampMs: -1, Found: true}, nil
	case ts == -3:
		off, rts, found, err := l.LookupMaxTime()
		if err != nil {
			return nil, toStatus(err)
		}
		if !found || off >= limit {
			return &storagev1.LookupSequenceResponse{Sequence: channel.OffsetToSequence(end), TimestampMs: -1}, nil
		}
		return &storagev1.LookupSequenceResponse{Sequence: channel.OffsetToSequence(off), TimestampMs: rts, Found: true}, nil
	case ts < 0:
		return nil, status.Errorf(codes.InvalidArgument, "timestamp_ms %d: want -1, -2, -3 or a time >= 0", ts)
	default:
		off, rts, found, err := l.LookupTime(ts)
		if err != nil {
			return nil, toStatus(err)
		}
		if !found || off >= limit {
			return &storagev1.LookupSequenceResponse{Sequence: channel.OffsetToSequence(end), TimestampMs: -1}, nil
		}
		return &storagev1.LookupSequenceResponse{Sequence: channel.OffsetToSequence(off), TimestampMs: rts, Found: true}, nil
	}
}

func (s *service) OffsetForLeaderEpoch(_ context.Context, req *storagev1.OffsetForLeaderEpochRequest) (_ *storagev1.OffsetForLeaderEpochResponse, err error) {
	defer func() { s.count("OffsetForLeaderEpoch", err) }()
	l, err := s.channelFor(req.Channel)
	if err != nil {
		return nil, toStatus(err)
	}
	e, err := l.OffsetForLeaderEpoch(req.LeaderEpoch)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.OffsetForLeaderEpochResponse{LeaderEpoch: e.Epoch, EndSequence: e.EndOffset, CurrentLeaderEpoch: e.Current}, nil
}

func (s *service) DeleteRecords(_ context.Context, req *storagev1.DeleteRecordsRequest) (_ *storagev1.DeleteRecordsResponse, err error) {
	defer func() { s.count("DeleteRecords", err) }()
	l, err := s.writableChannelFor(req.Channel)
	if err != nil {
		return nil, toStatus(err)
	}
	before := int64(-1)
	if req.BeforeSequence != -1 {
		if req.BeforeSequence < 1 {
			return nil, status.Errorf(codes.OutOfRange, "before_sequence %d: want -1 or >= 1", req.BeforeSequence)
		}
		before = channel.SequenceToOffset(req.BeforeSequence)
	}
	start, err := l.DeleteRecords(before)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.DeleteRecordsResponse{LogStartSequence: channel.OffsetToSequence(start)}, nil
}

func (s *service) AppendBatches(_ context.Context, req *storagev1.AppendBatchesRequest) (_ *storagev1.AppendBatchesResponse, err error) {
	defer func() { s.count("AppendBatches", err) }()
	resp := &storagev1.AppendBatchesResponse{Results: make([]*storagev1.ChannelAppendResult, len(req.Channels))}
	if len(req.Channels) == 1 {
		resp.Results[0] = s.beginAppend(req.Channels[0]).result(s)
		return resp, nil
	}
	var wg sync.WaitGroup
	for i, cb := range req.Channels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp.Results[i] = s.beginAppend(cb).result(s)
		}()
	}
	wg.Wait()
	return resp, nil
}

// maxStreamInFlight bounds the requests of one AppendStream that are written but not
// yet answered; the stream stops reading (and HTTP/2 flow control pushes back on the
// caller) until one is answered.
const maxStreamInFlight = 64

// AppendStream applies each request's appends in stream order (the write phase,
// BeginAppend, of every channel of a request completes before the next request is
// read) and answers each one from its own goroutine once it is durable, so the fsyncs
// of pipelined requests are shared (group commit). Sends are serialized. The stream
// ends when the caller closes its side (after every answer is sent), on a receive
// error, or at shutdown (UNAVAILABLE, after answering what was begun).
func (s *service) AppendStream(stream storagev1.StorageService_AppendStreamServer) (err error) {
	defer func() { s.count("AppendStream", err) }()
	ctx := stream.Context()
	reqs := make(chan *appendRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			// Received into an appendRequest (not stream.Recv) so that grpcx.Codec
			// leaves the batches in one pooled buffer instead of copying them out.
			a := &appendRequest{}
			if err := stream.RecvMsg(a); err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- a:
			case <-ctx.Done():
				a.release()
				return
			}
		}
	}()
	var (
		wg     sync.WaitGroup
		sendMu sync.Mutex
		sem    = make(chan struct{}, maxStreamInFlight)
	)
	defer wg.Wait()
	for {
		select {
		case a := <-reqs:
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				a.release()
				return status.FromContextError(ctx.Err()).Err()
			}
			m := &a.req
			pend := s.beginAppends(m.Channels)
			a.release() // written: the batches are no longer needed
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp := &storagev1.AppendStreamResponse{Id: m.Id, Results: results(s, pend)}
				sendMu.Lock()
				if err := stream.Send(resp); err != nil {
					s.log.Debug("append stream send failed", zap.Error(err))
				}
				sendMu.Unlock()
				<-sem
			}()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			if st, ok := status.FromError(err); ok {
				return st.Err()
			}
			return status.Error(codes.Unavailable, err.Error())
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.done:
			return status.Error(codes.Unavailable, "storage-core is shutting down")
		}
	}
}

// beginAppends runs the write phase of every channel of one request, concurrently
// when there are several, and returns when all are written.
func (s *service) beginAppends(cbs []*storagev1.ChannelBatches) []*chanAppend {
	out := make([]*chanAppend, len(cbs))
	if len(cbs) == 1 {
		out[0] = s.beginAppend(cbs[0])
		return out
	}
	var wg sync.WaitGroup
	for i, cb := range cbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.beginAppend(cb)
		}()
	}
	wg.Wait()
	return out
}

// results waits for every channel's durability, concurrently (each log has its own
// fsync), and returns their results in request order.
func results(s *service, pend []*chanAppend) []*storagev1.ChannelAppendResult {
	out := make([]*storagev1.ChannelAppendResult, len(pend))
	if len(pend) == 1 {
		out[0] = pend[0].result(s)
		return out
	}
	var wg sync.WaitGroup
	for i, p := range pend {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = p.result(s)
		}()
	}
	wg.Wait()
	return out
}

// chanAppend is one channel's append after its write phase.
type chanAppend struct {
	cb   *storagev1.ChannelBatches
	l    *store.Log
	pend *store.PendingAppend
	err  error
}

func (s *service) beginAppend(cb *storagev1.ChannelBatches) *chanAppend {
	a := &chanAppend{cb: cb}
	a.l, a.err = s.writableChannelFor(cb.Channel)
	if a.err == nil {
		a.pend = a.l.BeginAppendWith(cb.Batches, store.AppendOptions{SingleBatch: cb.SingleBatch, ValidateOnly: cb.ValidateOnly})
	}
	return a
}

// result waits for the append's durability and builds its result.
func (a *chanAppend) result(s *service) *storagev1.ChannelAppendResult {
	r := &storagev1.ChannelAppendResult{Channel: a.cb.Channel, LogAppendTimeMs: -1}
	err := a.err
	if err == nil {
		var res store.AppendResult
		res, err = a.pend.Wait()
		if err == nil {
			r.FirstSequence = channel.OffsetToSequence(res.BaseOffset)
			r.LogAppendTimeMs = res.LogAppendTime
		}
		r.LogStartSequence = channel.OffsetToSequence(a.l.LogStart())
	}
	if err != nil {
		r.Error = errorCode(err)
		r.ErrorMessage = err.Error()
		if re := (*store.RecordError)(nil); errors.As(err, &re) {
			r.RecordErrorIndex = &re.Index
		}
		if r.Error == storagev1.ErrorCode_ERROR_CODE_NOT_LEADER {
			r.LeaderId, r.LeaderAddress = leaderOf(err)
		}
		if r.Error == storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE {
			s.log.Warn("append failed", zap.String("channel", a.cb.Channel), zap.Error(err))
		}
	}
	return r
}

func (s *service) Fetch(ctx context.Context, req *storagev1.FetchRequest) (_ *storagev1.FetchResponse, err error) {
	defer func() { s.count("Fetch", err) }()
	if req.MaxWaitMs < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_wait_ms must not be negative")
	}
	if err := checkIsolation(req.IsolationLevel); err != nil {
		return nil, err
	}
	logs := make([]*store.Log, len(req.Channels))
	errs := make([]error, len(req.Channels))
	for i, fc := range req.Channels {
		logs[i], errs[i] = s.channelFor(fc.Channel)
	}
	deadline := time.Now().Add(min(time.Duration(req.MaxWaitMs)*time.Millisecond, maxWait))
	alloc := readAlloc(ctx)
	var wctx context.Context
	for {
		waits := make([]<-chan struct{}, 0, len(logs))
		for _, l := range logs {
			if l != nil {
				waits = append(waits, l.Changed())
			}
		}
		resp, total, anyErr := s.fetchOnce(req, logs, errs, alloc)
		if anyErr || total >= int(req.MinBytes) || total > 0 && req.MinBytes <= 0 || !time.Now().Before(deadline) || len(waits) == 0 {
			return resp, nil
		}
		if wctx == nil {
			var cancel context.CancelFunc
			wctx, cancel = s.waitCtx(ctx)
			defer cancel()
		}
		if !waitAny(wctx, waits, time.Until(deadline)) {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			resp, _, _ = s.fetchOnce(req, logs, errs, alloc)
			return resp, nil
		}
	}
}

// abortedTransactions lists l's aborted transactions overlapping the fetch of data
// (whole frames) from offset from, in sequences (Kafka's upper bound: the offset after
// the last frame).
func abortedTransactions(l *store.Log, from int64, data []byte) []*storagev1.AbortedTransaction {
	upper := store.FramesEnd(data)
	ab := l.AbortedTxns(from, upper)
	if len(ab) == 0 {
		return nil
	}
	out := make([]*storagev1.AbortedTransaction, len(ab))
	for i, a := range ab {
		out[i] = &storagev1.AbortedTransaction{ProducerId: a.ProducerID, FirstSequence: channel.OffsetToSequence(a.FirstOffset)}
	}
	return out
}

// waitAny waits until one of chs is closed (true), or timeout or ctx ends (false).
func waitAny(ctx context.Context, chs []<-chan struct{}, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	if len(chs) == 1 {
		select {
		case <-chs[0]:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
		return false
	}
	cases := make([]reflect.SelectCase, 0, len(chs)+2)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, c := range chs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	i, _, _ := reflect.Select(cases)
	return i >= 2
}

func (s *service) fetchOnce(req *storagev1.FetchRequest, logs []*store.Log, errs []error, alloc func(int) []byte) (*storagev1.FetchResponse, int, bool) {
	resp := &storagev1.FetchResponse{Results: make([]*storagev1.FetchChannelResult, len(req.Channels))}
	remaining := int(req.MaxBytes)
	if remaining <= 0 || remaining > maxFetchTotalBytes {
		remaining = maxFetchTotalBytes // stay well below the gRPC message limit
	}
	total := 0
	anyErr := false
	committed := req.IsolationLevel == storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	for i, fc := range req.Channels {
		r := &storagev1.FetchChannelResult{Channel: fc.Channel}
		resp.Results[i] = r
		l := logs[i]
		if l == nil {
			r.Error = errorCode(errs[i])
			anyErr = true
			continue
		}
		hw := l.HighWatermark()
		lso := min(l.LastStable(), hw)
		r.HighWatermark, r.LastStableSequence, r.LogStartSequence = hw, lso, channel.OffsetToSequence(l.LogStart())
		budget := int(fc.MaxBytes)
		if budget <= 0 {
			budget = defaultFetchBytes
		}
		budget = min(budget, remaining)
		if budget <= 0 && total > 0 {
			continue
		}
		var data []byte
		var err error
		if committed {
			data, err = l.ReadRawUpTo(channel.SequenceToOffset(fc.FromSequence), max(budget, 1), lso, alloc)
		} else {
			data, err = l.ReadRawTo(channel.SequenceToOffset(fc.FromSequence), max(budget, 1), alloc)
		}
		if err != nil {
			r.Error = errorCode(err)
			anyErr = true
			continue
		}
		r.Batches = data
		if committed && len(data) > 0 {
			r.AbortedTransactions = abortedTransactions(l, channel.SequenceToOffset(fc.FromSequence), data)
		}
		total += len(data)
		remaining -= len(data)
	}
	return resp, total, anyErr
}
