package handler

// Helpers shared by the API files that work partition by partition (ListOffsets, Fetch,
// DeleteRecords, OffsetForLeaderEpoch, DescribeConfigs, ...): the bound on storage-core
// calls and their concurrency, and the leader epoch check.

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
// epoch, which is 0 forever here (Metadata reports 0). -1 means "not given" and is never
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
