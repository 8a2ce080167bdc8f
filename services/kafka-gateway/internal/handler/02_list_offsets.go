package handler

// ListOffsets (API key 2), versions 1-10.
//
// Behaviour, per partition (one storage-core LookupSequence each, run concurrently):
//   - -1 latest: the high watermark (read_committed: the last stable offset, equal
//     without transactions); timestamp -1.
//   - -2 earliest and -4 earliest-local (v8+, KIP-405; no tiering here): the log start
//     offset; timestamp -1.
//   - -3 max timestamp (v7+, KIP-734): the record with the largest timestamp; offset -1,
//     timestamp -1 on an empty log.
//   - -5 latest-tiered (v9+, KIP-1005): nothing is tiered: offset -1, timestamp -1.
//   - t >= 0: the first record with timestamp >= t; offset -1, timestamp -1 when none
//     (as Kafka).
//   - Leader epoch 0 on answers with an offset, -1 otherwise. Unknown topic/partition:
//     UNKNOWN_TOPIC_OR_PARTITION; storage outage: NOT_LEADER_OR_FOLLOWER (retriable).
//
// KIPs: KIP-79 (v1 timestamps), KIP-98 (v2 isolation), KIP-207 (v5), KIP-320 (v4
// epochs), KIP-482 (flexible v6+), KIP-734, KIP-405, KIP-1005, KIP-1075 (v10 timeout).

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.ListOffsets.Int16(), 1, 10, (*Handler).handleListOffsets) }

// storageCallTimeout bounds one single-channel storage-core call.
const storageCallTimeout = 10 * time.Second

// maxParallel bounds concurrent per-partition storage calls of one request.
const maxParallel = 16

// forEach runs fn(i) for i in 0..n-1 on at most maxParallel goroutines.
func forEach(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}

func (h *Handler) handleListOffsets(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)

	type job struct {
		rp    *kmsg.ListOffsetsResponseTopicPartition
		ch    string
		ts    int64
		topic string
	}
	var jobs []job
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(t.Partitions))
		resp.Topics = append(resp.Topics, rt)
	}
	for ti, t := range req.Topics {
		valid := validTopicName(t.Topic)
		for pi, p := range t.Partitions {
			rp := &resp.Topics[ti].Partitions[pi]
			*rp = kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			switch {
			case !valid, p.Partition < 0, p.Partition >= channel.MaxPartitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case p.Timestamp == -5:
				// Nothing is tiered.
			default:
				ts := p.Timestamp
				if ts == -4 {
					ts = -2
				}
				jobs = append(jobs, job{rp: rp, ch: channel.KafkaPartition(t.Topic, p.Partition), ts: ts, topic: t.Topic})
			}
		}
	}
	forEach(len(jobs), func(i int) {
		j := jobs[i]
		cctx, cancel := context.WithTimeout(ctx, storageCallTimeout)
		defer cancel()
		out, err := h.storage.LookupSequence(cctx, &storagev1.LookupSequenceRequest{Channel: j.ch, TimestampMs: j.ts})
		if err != nil {
			j.rp.ErrorCode = dataCode(err)
			return
		}
		if !out.GetFound() {
			return
		}
		j.rp.Offset = out.GetSequence() - 1
		j.rp.LeaderEpoch = 0
		if j.ts >= 0 || j.ts == -3 {
			j.rp.Timestamp = out.GetTimestampMs()
		}
	})
	return resp, nil
}
