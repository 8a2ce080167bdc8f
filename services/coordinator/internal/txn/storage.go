package txn

import (
	"context"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// coordinatorEpoch is the coordinator epoch written into every marker. Any replica
// serves any transactional id and the row lock orders the finishers, so there is no
// coordinator fencing by epoch: it stays 0.
const coordinatorEpoch = 0

// StorageMarkers writes markers through storage-core's WriteTxnMarkers (one call for
// all the partitions of a transaction, channel names from libs/channel).
func StorageMarkers(c storagev1.StorageServiceClient) MarkerWriter { return storageMarkers{c: c} }

type storageMarkers struct {
	c storagev1.StorageServiceClient
}

func (s storageMarkers) WriteMarkers(ctx context.Context, ms []Marker) ([]int16, error) {
	req := &storagev1.WriteTxnMarkersRequest{Markers: make([]*storagev1.TxnMarker, len(ms))}
	for i, m := range ms {
		req.Markers[i] = &storagev1.TxnMarker{Channel: channel.KafkaPartition(m.Topic, m.Partition),
			ProducerId: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Commit, CoordinatorEpoch: coordinatorEpoch}
	}
	resp, err := s.c.WriteTxnMarkers(ctx, req)
	if err != nil {
		return nil, err
	}
	codes := make([]int16, len(ms))
	rs := resp.GetResults()
	for i := range codes {
		if i >= len(rs) {
			return nil, ErrMarkers
		}
		codes[i] = int16(rs[i].GetErrorCode())
	}
	return codes, nil
}
