package handler

// Helpers shared by the API files that work partition by partition (ListOffsets, Fetch,
// DeleteRecords, OffsetForLeaderEpoch, DescribeConfigs, ...): the bound on storage-core
// calls and their concurrency, the leader epoch check, and the partition check and
// result mapping of the APIs that batch their partitions into one storage-core call
// (WriteTxnMarkers, DescribeProducers).

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tributary/tributary/libs/channel"
)

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

// leaderEpochCode checks a request's current_leader_epoch against the partition's leader
// epoch with one storage node, which is 0 forever (Metadata reports 0; with several,
// Router.epochCode checks against the Raft term). -1 means "not given" and is never
// checked; otherwise, as Kafka's Partition.checkCurrentLeaderEpoch: an epoch above ours
// is UNKNOWN_LEADER_EPOCH (the client knows an epoch we have not reached), one below it
// is FENCED_LEADER_EPOCH (the client's metadata is stale).
func leaderEpochCode(current int32) int16 {
	switch {
	case current == -1 || current == 0:
		return 0
	case current > 0:
		return kerr.UnknownLeaderEpoch.Code
	default:
		return kerr.FencedLeaderEpoch.Code
	}
}

// unknownPartition reports whether partition p of topic is UNKNOWN_TOPIC_OR_PARTITION
// before a storage-core call: an invalid topic name, a partition outside
// [0, channel.MaxPartitions), a topic the coordinator does not know (info nil, coordErr
// nil) or a partition at or beyond the topic's count. info and coordErr come from
// resolveTopics; with the coordinator down (info nil, coordErr set) the partition is
// not refused here and storage-core decides.
func unknownPartition(topic string, p int32, info *topicInfo, coordErr error) bool {
	switch {
	case !validTopicName(topic) || p < 0 || p >= channel.MaxPartitions:
		return true
	case info == nil && coordErr == nil, info != nil && p >= info.Partitions:
		return true
	}
	return false
}

// batchFailCode is the code of the i-th partition of a batched storage-core call that
// answered n results or failed with err: dataCode(err) for a failed call,
// KAFKA_STORAGE_ERROR when the answer has no i-th result, and ok false when result i
// is there to read.
func batchFailCode(err error, i, n int) (code int16, failed bool) {
	switch {
	case err != nil:
		return dataCode(err), true
	case i >= n:
		return kerr.KafkaStorageError.Code, true
	}
	return 0, false
}
