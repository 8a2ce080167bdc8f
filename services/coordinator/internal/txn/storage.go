package txn

import (
	"context"
	"errors"
	"sync"

	"github.com/tributary/tributary/libs/grpcx"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// coordinatorEpoch is the coordinator epoch written into every marker. Any replica
// serves any transactional id and the row lock orders the finishers, so there is no
// coordinator fencing by epoch: it stays 0.
const coordinatorEpoch = 0

// StorageMarkers writes markers through storage-core's WriteTxnMarkers: one call for
// all the partitions of a transaction, channel names from libs/channel. With routed
// (a storage-core cluster in raft mode behind a grpcx.LeaderConn) it sends one call per
// marker, concurrently, each routed to its channel's leader.
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
	if s.routed && len(ms) > 1 {
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

// writeEach writes every marker in a call of its own (routed to its channel's leader),
// concurrently; the first call error fails the whole.
func (s storageMarkers) writeEach(ctx context.Context, markers []*storagev1.TxnMarker) ([]int16, error) {
	codes := make([]int16, len(markers))
	errs := make([]error, len(markers))
	var wg sync.WaitGroup
	for i, m := range markers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.write(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{m}})
			if err == nil {
				codes[i] = c[0]
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return codes, nil
}
