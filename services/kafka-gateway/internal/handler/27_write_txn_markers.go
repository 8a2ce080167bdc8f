package handler

// WriteTxnMarkers (API key 27), versions 0-2.
//
// Behaviour: in Kafka the transaction coordinator sends this to partition leaders; here
// the coordinator writes markers through storage-core itself, and the gateway serves
// the API for what admin tools send it for: kafka-transactions.sh abort (Admin
// abortTransaction), which ends a hanging transaction on a partition. Every marker of
// the request goes to storage-core in one WriteTxnMarkers call (COMMIT or ABORT control
// batch for the producer id and epoch, through the durable append path); per-partition
// codes are storage-core's (a producer without an open transaction there: NONE,
// nothing written; an epoch older than the producer's: INVALID_PRODUCER_EPOCH; the
// coordinator epoch is not checked). Unknown topics or
// partitions: UNKNOWN_TOPIC_OR_PARTITION; storage outage: NOT_LEADER_OR_FOLLOWER. The
// coordinator's record of the transaction is not changed: it is for transactions the
// coordinator no longer tracks. With the authorizer on: CLUSTER_ACTION on the cluster
// (as Kafka asks of the brokers that send it), else CLUSTER_AUTHORIZATION_FAILED for
// every partition.
//
// KIPs: KIP-98, KIP-664 (abort), KIP-482 (flexible v1+), KIP-890 (v2 transaction
// version: ignored).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.WriteTxnMarkers.Int16(), 0, 2, (*Handler).handleWriteTxnMarkers) }

func (h *Handler) handleWriteTxnMarkers(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	allowed := h.access(ctx, r).cluster(kafkaacl.OpClusterAction)
	var names []string
	for _, m := range req.Markers {
		if !allowed {
			break
		}
		for _, t := range m.Topics {
			if validTopicName(t.Topic) {
				names = append(names, t.Topic)
			}
		}
	}
	infos, _, coordErr := h.resolveTopics(ctx, names, false, nil)
	type slot struct{ m, t, p int }
	var (
		markers []*storagev1.TxnMarker
		at      []slot
	)
	for mi, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for ti, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			info := infos[t.Topic]
			for pi, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = p
				if !allowed {
					rp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				} else if unknownPartition(t.Topic, p, info, coordErr) {
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else {
					markers = append(markers, &storagev1.TxnMarker{Channel: channel.KafkaPartition(t.Topic, p),
						ProducerId: m.ProducerID, ProducerEpoch: int32(m.ProducerEpoch), Commit: m.Committed,
						CoordinatorEpoch: m.CoordinatorEpoch})
					at = append(at, slot{mi, ti, pi})
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	if len(markers) == 0 {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, storageCallTimeout)
	defer cancel()
	out, err := h.storage.WriteTxnMarkers(cctx, &storagev1.WriteTxnMarkersRequest{Markers: markers})
	results := out.GetResults()
	for i, s := range at {
		rp := &resp.Markers[s.m].Topics[s.t].Partitions[s.p]
		if code, failed := batchFailCode(err, i, len(results)); failed {
			rp.ErrorCode = code
		} else {
			rp.ErrorCode = int16(results[i].GetErrorCode())
		}
	}
	return resp, nil
}
