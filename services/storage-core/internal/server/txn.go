package server

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxTxnMarkers bounds one WriteTxnMarkers request.
const maxTxnMarkers = 10000

// Kafka error codes of WriteTxnMarkers results (storage.proto TxnMarkerResult).
const (
	kafkaUnknownTopicOrPartition  = 3
	kafkaNotLeaderOrFollower      = 6
	kafkaNotEnoughReplicas        = 19
	kafkaTopicAuthorizationFailed = 29
	kafkaInvalidRequest           = 42
	kafkaInvalidProducerEpoch     = 47
	kafkaStorageError             = 56
)

// markerCode maps a marker's error to its Kafka error code.
func markerCode(err error) int32 {
	switch {
	case errors.Is(err, channel.ErrReserved), errors.Is(err, ErrQueueChannel):
		return kafkaTopicAuthorizationFailed
	case errors.Is(err, channel.ErrInvalidName), errors.Is(err, store.ErrNotFound):
		return kafkaUnknownTopicOrPartition
	case errors.Is(err, store.ErrInvalidProducerEpoch):
		return kafkaInvalidProducerEpoch
	case errors.Is(err, store.ErrInvalidArgument):
		return kafkaInvalidRequest
	case errors.Is(err, store.ErrNotLeader):
		return kafkaNotLeaderOrFollower
	case errors.Is(err, store.ErrNotReplicated):
		return kafkaNotEnoughReplicas
	}
	return kafkaStorageError
}

// WriteTxnMarkers writes each marker's control batch (write phases in request order,
// so markers of one channel land in that order), then waits for their durability,
// each channel's concurrently, and answers per marker. In raft mode a request of one
// marker this node does not lead fails as a whole with the leader's FAILED_PRECONDITION
// (and trailers), so that grpcx.LeaderConn follows it as for Append; so does one for a
// channel this node does not hold when it does not lead the metadata group, which alone
// can tell a channel not yet applied here from one that does not exist (per-marker
// UNKNOWN_TOPIC_OR_PARTITION comes only from it). In a request of several markers
// these are per-marker NOT_LEADER_OR_FOLLOWER.
func (s *service) WriteTxnMarkers(_ context.Context, req *storagev1.WriteTxnMarkersRequest) (_ *storagev1.WriteTxnMarkersResponse, err error) {
	defer func() { s.count("WriteTxnMarkers", err) }()
	if n := len(req.Markers); n < 1 || n > maxTxnMarkers {
		return nil, status.Errorf(codes.InvalidArgument, "%d markers; want 1..%d", n, maxTxnMarkers)
	}
	resp := &storagev1.WriteTxnMarkersResponse{Results: make([]*storagev1.TxnMarkerResult, len(req.Markers))}
	pend := make([]*store.PendingAppend, len(req.Markers))
	errs := make([]error, len(req.Markers))
	// Every channel looked up first, together: in raft mode the absent ones cost one
	// metadata barrier for the request, not one each in turn.
	names := make([]string, len(req.Markers))
	for i, m := range req.Markers {
		names[i] = m.Channel
	}
	logs, lerrs := s.writableChannelsFor(names)
	for i, m := range req.Markers {
		r := &storagev1.TxnMarkerResult{Channel: m.Channel, ProducerId: m.ProducerId}
		resp.Results[i] = r
		if m.ProducerId < 0 || m.ProducerEpoch < 0 || m.ProducerEpoch > math.MaxInt16 {
			r.ErrorCode, r.ErrorMessage = kafkaInvalidRequest, "producer id must be >= 0 and epoch 0..32767"
			continue
		}
		l, err := logs[i], lerrs[i]
		if err != nil {
			errs[i] = err
			r.ErrorCode, r.ErrorMessage = markerCode(err), err.Error()
			continue
		}
		pend[i] = l.BeginTxnMarker(store.TxnMarker{
			ProducerID: m.ProducerId, ProducerEpoch: int16(m.ProducerEpoch),
			Commit: m.Commit, CoordinatorEpoch: m.CoordinatorEpoch,
		})
	}
	var wg sync.WaitGroup
	for i, p := range pend {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := resp.Results[i]
			res, err := p.Wait()
			errs[i] = err
			switch {
			case err != nil:
				r.ErrorCode, r.ErrorMessage = markerCode(err), err.Error()
				if r.ErrorCode == kafkaStorageError {
					s.log.Warn("transaction marker failed", zap.String("channel", r.Channel), zap.Error(err))
				}
			case !res.Duplicate:
				r.MarkerSequence = channel.OffsetToSequence(res.BaseOffset)
			}
		}()
	}
	wg.Wait()
	if len(pend) == 1 {
		if st, ok := notLeader(errs[0]); ok {
			return nil, st
		}
	}
	return resp, nil
}

// DescribeProducers lists each channel's producer state (Kafka DescribeProducers).
func (s *service) DescribeProducers(_ context.Context, req *storagev1.DescribeProducersRequest) (_ *storagev1.DescribeProducersResponse, err error) {
	defer func() { s.count("DescribeProducers", err) }()
	resp := &storagev1.DescribeProducersResponse{Results: make([]*storagev1.ChannelProducers, len(req.Channels))}
	for i, name := range req.Channels {
		r := &storagev1.ChannelProducers{Channel: name}
		resp.Results[i] = r
		l, err := s.channelFor(name)
		if err != nil {
			r.Error, r.ErrorMessage = errorCode(err), err.Error()
			continue
		}
		for _, p := range l.Producers() {
			ps := &storagev1.ProducerState{
				ProducerId: p.ID, ProducerEpoch: int32(p.Epoch), LastSequence: p.LastSequence,
				LastTimestampMs: p.LastMs, CoordinatorEpoch: p.CoordinatorEpoch, CurrentTxnStartSequence: -1,
			}
			if p.TxnFirstOffset >= 0 {
				ps.CurrentTxnStartSequence = channel.OffsetToSequence(p.TxnFirstOffset)
			}
			r.Producers = append(r.Producers, ps)
		}
	}
	return resp, nil
}
