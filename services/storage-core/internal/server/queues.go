package server

import (
	"context"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// queueService serves tributary.storage.v1.QueueService over internal/queue.
type queueService struct {
	storagev1.UnimplementedQueueServiceServer
	s  *service
	qm *queue.Manager
}

func queueConfigFromProto(c *storagev1.QueueConfig) queue.Config {
	if c == nil {
		return queue.Config{}
	}
	out := queue.Config{
		AckDeadlineMs: c.AckDeadlineMs, MessageRetentionMs: c.MessageRetentionMs, RetainAcked: c.RetainAcked,
		OrderingKeyHeader: c.OrderingKeyHeader, ExactlyOnce: c.ExactlyOnce,
	}
	if d := c.DeadLetter; d != nil {
		out.DeadLetter = &queue.DeadLetterPolicy{
			Channel: d.Channel, MaxDeliveryAttempts: d.MaxDeliveryAttempts, Headers: headersFromProto(d.Headers),
			DeliveryCountHeader: d.DeliveryCountHeader, SourceTimestampHeader: d.SourceTimestampHeader,
			DropHeaders: append([]string(nil), d.DropHeaders...),
		}
	}
	if r := c.Retry; r != nil {
		out.Retry = &queue.RetryPolicy{MinBackoffMs: r.MinBackoffMs, MaxBackoffMs: r.MaxBackoffMs}
	}
	return out
}

func queueConfigToProto(c queue.Config) *storagev1.QueueConfig {
	out := &storagev1.QueueConfig{
		AckDeadlineMs: c.AckDeadlineMs, MessageRetentionMs: c.MessageRetentionMs, RetainAcked: c.RetainAcked,
		OrderingKeyHeader: c.OrderingKeyHeader, ExactlyOnce: c.ExactlyOnce,
	}
	if d := c.DeadLetter; d != nil {
		out.DeadLetter = &storagev1.DeadLetterPolicy{
			Channel: d.Channel, MaxDeliveryAttempts: d.MaxDeliveryAttempts, Headers: headersToProto(d.Headers),
			DeliveryCountHeader: d.DeliveryCountHeader, SourceTimestampHeader: d.SourceTimestampHeader,
			DropHeaders: d.DropHeaders,
		}
	}
	if r := c.Retry; r != nil {
		out.Retry = &storagev1.RetryPolicy{MinBackoffMs: r.MinBackoffMs, MaxBackoffMs: r.MaxBackoffMs}
	}
	return out
}

func headersFromProto(hs []*storagev1.Header) []store.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]store.Header, len(hs))
	for i, h := range hs {
		out[i] = store.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

func headersToProto(hs []store.Header) []*storagev1.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*storagev1.Header, len(hs))
	for i, h := range hs {
		out[i] = &storagev1.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

// queueToProto describes a queue; config is the effective one (defaults filled).
func queueToProto(in queue.Info) *storagev1.Queue {
	q := &storagev1.Queue{
		Name: in.Name, Config: queueConfigToProto(in.Config.Effective()), Detached: in.Detached,
		Backlog: in.Backlog, Leased: in.Leased, CreatedMs: in.CreatedMs,
	}
	for _, b := range in.Bindings {
		q.Bindings = append(q.Bindings, &storagev1.Binding{Source: b.Source, Filter: b.Filter, StartSequence: b.StartSequence, Cursor: b.Cursor})
	}
	return q
}

func (qs *queueService) CreateQueue(_ context.Context, req *storagev1.CreateQueueRequest) (_ *storagev1.CreateQueueResponse, err error) {
	defer func() { qs.s.count("CreateQueue", err) }()
	bs := make([]queue.Binding, len(req.Bindings))
	for i, b := range req.Bindings {
		if b == nil {
			return nil, status.Errorf(codes.InvalidArgument, "binding %d is empty", i)
		}
		bs[i] = queue.Binding{Source: b.Source, Filter: b.Filter, StartSequence: b.StartSequence}
	}
	q, created, err := qs.qm.Create(req.Name, queueConfigFromProto(req.Config), bs, req.IfNotExists)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.CreateQueueResponse{Queue: queueToProto(q.Info()), Created: created}, nil
}

func (qs *queueService) GetQueue(_ context.Context, req *storagev1.GetQueueRequest) (_ *storagev1.GetQueueResponse, err error) {
	defer func() { qs.s.count("GetQueue", err) }()
	q, err := qs.qm.Get(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.GetQueueResponse{Queue: queueToProto(q.Info())}, nil
}

func (qs *queueService) DeleteQueue(_ context.Context, req *storagev1.DeleteQueueRequest) (_ *storagev1.DeleteQueueResponse, err error) {
	defer func() { qs.s.count("DeleteQueue", err) }()
	if err := qs.qm.Delete(req.Name, req.IfExists); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.DeleteQueueResponse{}, nil
}

func (qs *queueService) Receive(ctx context.Context, req *storagev1.ReceiveRequest) (_ *storagev1.ReceiveResponse, err error) {
	defer func() { qs.s.count("Receive", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	if req.WaitMs < 0 {
		return nil, status.Error(codes.InvalidArgument, "wait_ms must not be negative")
	}
	wctx, cancel := qs.s.waitCtx(ctx)
	defer cancel()
	ds, tooBig, err := q.ReceiveWith(wctx, queue.ReceiveArgs{
		MaxMsgs: int(req.MaxMessages), MaxBytes: req.MaxBytes, LeaseMs: int64(req.AckDeadlineMs),
		Wait: min(time.Duration(req.WaitMs)*time.Millisecond, maxWait), CatchUp: req.CatchUp, ExactBytes: req.ExactMaxBytes,
	})
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, status.Error(codes.Unavailable, "storage-core is shutting down")
		}
		return nil, toStatus(err)
	}
	if tooBig > 0 {
		return &storagev1.ReceiveResponse{NextBytes: tooBig}, nil
	}
	if holdDeliveries(ctx, ds) {
		return &storagev1.ReceiveResponse{}, nil // receiveDirect answers
	}
	resp := &storagev1.ReceiveResponse{Messages: make([]*storagev1.ReceivedMessage, len(ds))}
	for i := range ds {
		d := &ds[i]
		recs := toProtoRecords([]store.Record{d.Record})
		resp.Messages[i] = &storagev1.ReceivedMessage{AckId: d.AckID, Record: recs[0], Source: d.Source, SourceSequence: d.SourceSeq, DeliveryAttempt: d.Attempt}
	}
	return resp, nil
}

func ackResults(rs []queue.AckResult) []storagev1.AckResult {
	out := make([]storagev1.AckResult, len(rs))
	for i, r := range rs {
		out[i] = storagev1.AckResult(r)
	}
	return out
}

func (qs *queueService) Ack(_ context.Context, req *storagev1.AckRequest) (_ *storagev1.AckResponse, err error) {
	defer func() { qs.s.count("Ack", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	rs, err := q.Ack(req.AckIds)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.AckResponse{Results: ackResults(rs)}, nil
}

func (qs *queueService) ModifyAckDeadline(_ context.Context, req *storagev1.ModifyAckDeadlineRequest) (_ *storagev1.ModifyAckDeadlineResponse, err error) {
	defer func() { qs.s.count("ModifyAckDeadline", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	rs, err := q.ModifyAckDeadline(req.AckIds, int64(req.AckDeadlineMs))
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.ModifyAckDeadlineResponse{Results: ackResults(rs)}, nil
}

func (qs *queueService) GetLeases(_ context.Context, req *storagev1.GetLeasesRequest) (_ *storagev1.GetLeasesResponse, err error) {
	defer func() { qs.s.count("GetLeases", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	ds, err := q.Leases(req.AckIds)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.GetLeasesResponse{DeadlinesMs: ds}, nil
}

func (qs *queueService) SweepLeases(_ context.Context, _ *storagev1.SweepLeasesRequest) (_ *storagev1.SweepLeasesResponse, err error) {
	defer func() { qs.s.count("SweepLeases", err) }()
	if err := qs.qm.Ready(); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.SweepLeasesResponse{Queues: qs.qm.Sweep()}, nil
}

func (qs *queueService) UpdateQueueConfig(_ context.Context, req *storagev1.UpdateQueueConfigRequest) (_ *storagev1.UpdateQueueConfigResponse, err error) {
	defer func() { qs.s.count("UpdateQueueConfig", err) }()
	q, err := qs.qm.Get(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	in, err := q.UpdateConfig(queueConfigFromProto(req.Config), req.UpdateMask)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.UpdateQueueConfigResponse{Queue: queueToProto(in)}, nil
}

func (qs *queueService) Detach(_ context.Context, req *storagev1.DetachRequest) (_ *storagev1.DetachResponse, err error) {
	defer func() { qs.s.count("Detach", err) }()
	if err := qs.qm.Detach(req.Name); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.DetachResponse{}, nil
}

func (qs *queueService) Seek(_ context.Context, req *storagev1.SeekRequest) (_ *storagev1.SeekResponse, err error) {
	defer func() { qs.s.count("Seek", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	switch t := req.Target.(type) {
	case *storagev1.SeekRequest_TimeMs:
		if t.TimeMs < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "time_ms %d is negative", t.TimeMs)
		}
		err = q.SeekTime(t.TimeMs, req.ReplayAcked)
	case *storagev1.SeekRequest_Snapshot:
		err = q.SeekSnapshot(t.Snapshot)
	default:
		return nil, status.Error(codes.InvalidArgument, "seek needs time_ms or snapshot")
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.SeekResponse{}, nil
}

func (qs *queueService) CreateSnapshot(_ context.Context, req *storagev1.CreateSnapshotRequest) (_ *storagev1.CreateSnapshotResponse, err error) {
	defer func() { qs.s.count("CreateSnapshot", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	ms, err := q.CreateSnapshot(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.CreateSnapshotResponse{CreatedMs: ms}, nil
}

func (qs *queueService) DeleteSnapshot(_ context.Context, req *storagev1.DeleteSnapshotRequest) (_ *storagev1.DeleteSnapshotResponse, err error) {
	defer func() { qs.s.count("DeleteSnapshot", err) }()
	if err := qs.qm.DeleteSnapshot(req.Name); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.DeleteSnapshotResponse{}, nil
}

func (qs *queueService) Purge(_ context.Context, req *storagev1.PurgeRequest) (_ *storagev1.PurgeResponse, err error) {
	defer func() { qs.s.count("Purge", err) }()
	q, err := qs.qm.Get(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := q.Purge(); err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.PurgeResponse{}, nil
}

func (qs *queueService) Unbind(_ context.Context, req *storagev1.UnbindRequest) (_ *storagev1.UnbindResponse, err error) {
	defer func() { qs.s.count("Unbind", err) }()
	removed, err := qs.qm.Unbind(req.Queue, req.Source)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storagev1.UnbindResponse{Removed: removed}, nil
}
