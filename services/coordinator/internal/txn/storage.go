package txn

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tributary/tributary/libs/grpcx"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// coordinatorEpoch is the coordinator epoch written into every marker. Any replica
// serves any transactional id and the row lock orders the finishers, so there is no
// coordinator fencing by epoch: it stays 0.
const coordinatorEpoch = 0

// StorageMarkers writes markers through storage-core's WriteTxnMarkers: one call for
// all the partitions of a transaction, channel names from libs/channel. With routed
// (a storage-core cluster in raft mode behind a grpcx.LeaderConn) it sends one call per
// marker, concurrently, each routed to its channel's leader and resent on retriable
// answers (writeEach), a transaction of one marker included.
func StorageMarkers(c storagev1.StorageServiceClient, routed bool) MarkerWriter {
	return storageMarkers{c: c, routed: routed}
}

type storageMarkers struct {
	c      storagev1.StorageServiceClient
	routed bool
}

func (s storageMarkers) WriteMarkers(ctx context.Context, ms []Marker) ([]int16, error) {
	req := &storagev1.WriteTxnMarkersRequest{Markers: make([]*storagev1.TxnMarker, len(ms))}
	for i, m := range ms {
		req.Markers[i] = &storagev1.TxnMarker{Channel: channel.KafkaPartition(m.Topic, m.Partition),
			ProducerId: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Commit, CoordinatorEpoch: coordinatorEpoch}
	}
	if s.routed {
		// One marker too: a transaction of one partition is the common case, and
		// an election under it must be resent like any other marker's.
		return s.writeEach(ctx, req.Markers)
	}
	return s.write(ctx, req)
}

// write sends one WriteTxnMarkers call and returns its codes in order.
func (s storageMarkers) write(ctx context.Context, req *storagev1.WriteTxnMarkersRequest) ([]int16, error) {
	if s.routed {
		ctx = grpcx.WithRequestKey(ctx, req.Markers[0].GetChannel())
	}
	resp, err := s.c.WriteTxnMarkers(ctx, req)
	if err != nil {
		return nil, err
	}
	codes := make([]int16, len(req.Markers))
	rs := resp.GetResults()
	for i := range codes {
		if i >= len(rs) {
			return nil, ErrMarkers
		}
		codes[i] = int16(rs[i].GetErrorCode())
	}
	return codes, nil
}

// maxMarkerCalls bounds the marker calls of one WriteMarkers in flight at once (one
// transaction's markers, or a finish batch's of several; each is a Raft proposal on
// its channel's leader).
const maxMarkerCalls = 16

// markerRetries is how many times writeEach resends one marker whose answer is
// retriable (no leader yet, no quorum, node unreachable) before the transaction's
// finish fails and is redone by a later sweep; markerBackoff is the first pause
// between tries, doubled each time.
const (
	markerRetries = 4
	markerBackoff = 50 * time.Millisecond
)

// writeEach writes every marker in a call of its own (routed to its channel's leader),
// at most maxMarkerCalls at once. A marker answered NOT_LEADER_OR_FOLLOWER or
// NOT_ENOUGH_REPLICAS, or whose call is UNAVAILABLE, is resent (markers are idempotent)
// up to markerRetries times, so one election does not redo the whole set. A marker
// whose call still fails answers NOT_LEADER_OR_FOLLOWER (not written) when another
// call answered, so that one unreachable leader leaves only the transactions with a
// marker there unfinished, not every transaction of a finish batch; only when every
// call failed does the whole fail, with the first error.
func (s storageMarkers) writeEach(ctx context.Context, markers []*storagev1.TxnMarker) ([]int16, error) {
	codes := make([]int16, len(markers))
	errs := make([]error, len(markers))
	sem := make(chan struct{}, maxMarkerCalls)
	var wg sync.WaitGroup
	for i, m := range markers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			codes[i], errs[i] = s.writeOne(ctx, m)
		}()
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			codes[i] = codeNotLeaderOrFollower
		}
	}
	if failed == len(markers) {
		return nil, errors.Join(errs...)
	}
	return codes, nil
}

// writeOne writes marker m in a call of its own, resending it on retriable answers.
func (s storageMarkers) writeOne(ctx context.Context, m *storagev1.TxnMarker) (int16, error) {
	pause := markerBackoff
	for try := 0; ; try++ {
		c, err := s.write(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{m}})
		retriable := status.Code(err) == codes.Unavailable ||
			(err == nil && (c[0] == codeNotLeaderOrFollower || c[0] == codeNotEnoughReplicas))
		if !retriable || try == markerRetries {
			if err != nil {
				return 0, err
			}
			return c[0], nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return 0, err
			}
			return c[0], nil
		case <-time.After(pause):
		}
		pause *= 2
	}
}
