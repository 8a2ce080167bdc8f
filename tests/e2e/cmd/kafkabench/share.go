package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// shareParts and shareConsumers shape the share-group case (issue 17's benchmark).
const shareParts, shareConsumers = 6, 3

// shareResult is one round of the share-group case.
type shareResult struct {
	// consume counts the records accepted, over the time from the first record
	// delivered to the last consumer's FlushAcks returning; its cpu covers the
	// consumers' whole run (join included).
	consume result
	// joined is the time from the consumers' start to the first record delivered.
	joined time.Duration
	// dups counts deliveries of a record already delivered in the round, redelivered
	// those with a delivery count above 1; both must be 0 on an honest target.
	dups, redelivered int64
}

// medianShare returns the round with the median consume rate.
func medianShare(rs []shareResult) shareResult {
	rs = append([]shareResult(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].consume.perSec() < rs[j].consume.perSec() })
	return rs[len(rs)/2]
}

// share pre-produces cfg.shareRecords records (rounded down to a multiple of 6, record
// i to partition i % 6) to a fresh 6-partition topic, sets a fresh share group's start
// offsets to 0 (AlterShareGroupOffsets while it is empty; with cfg.shareStartFirst
// before the produce, so a target that copies records into share state does it while
// they are produced, as for a running group), then has 3 kgo share
// consumers of that group read it, accepting each record (Record.Ack(AckAccept)) until
// every record was delivered, and flush their acknowledgements. It fails unless every
// acknowledgement succeeded (ShareAckCallback), every share partition's start offset
// is then at its high watermark with lag 0 (DescribeShareGroupOffsets: every record
// accepted and committed), and a fresh consumer of the group, after the three left, is
// delivered nothing but a sentinel record produced after them. Duplicate deliveries
// are counted, not failed. With profile set, CPU profiles of the consume go to profile-*.pprof.
func share(ctx context.Context, cfg config, tg target, profile string) (shareResult, error) {
	var out shareResult
	addrs, closeFn, err := tg.fresh()
	if err != nil {
		return out, err
	}
	defer closeFn()
	topic, err := newTopic(ctx, tg, addrs, shareParts)
	if err != nil {
		return out, err
	}
	per := cfg.shareRecords / shareParts
	n := per * shareParts
	if per == 0 {
		return out, errors.New("-share-records below 6")
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	acl, err := tg.client(addrs)
	if err != nil {
		return out, err
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)
	group := topic + "-share"
	startAt := kadm.Offsets{}
	for p := range int32(shareParts) {
		startAt.Add(kadm.Offset{Topic: topic, Partition: p, At: 0})
	}
	setStart := func() error {
		if res, err := adm.AlterShareGroupOffsets(cctx, group, startAt); err != nil || !res.Ok() {
			return fmt.Errorf("AlterShareGroupOffsets: %v %v", res, err)
		}
		return nil
	}
	if cfg.shareStartFirst {
		if err := setStart(); err != nil {
			return out, err
		}
	}

	pcl, err := tg.client(addrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProduceRequestTimeout(30*time.Second),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return out, err
	}
	value := randomValue(cfg.recordBytes)
	var (
		firstMu sync.Mutex
		first   error
	)
	for i := 0; i < n && cctx.Err() == nil; i++ {
		pcl.Produce(cctx, &kgo.Record{Partition: int32(i % shareParts), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				firstMu.Lock()
				if first == nil {
					first = err
				}
				firstMu.Unlock()
			}
		})
	}
	err = pcl.Flush(cctx)
	pcl.Close()
	if err == nil {
		err = first
	}
	if err != nil {
		return out, fmt.Errorf("produce: %w", err)
	}
	if !cfg.shareStartFirst {
		if err := setStart(); err != nil {
			return out, err
		}
	}

	// seen[p][o] counts the deliveries of partition p's offset o.
	seen := make([][]atomic.Int32, shareParts)
	for p := range seen {
		seen[p] = make([]atomic.Int32, per)
	}
	var (
		distinct, dups, redelivered, foreign atomic.Int64
		firstAt                              atomic.Int64 // ns since start of the first delivery
		ackMu                                sync.Mutex
		ackErrs                              []error
		allIn                                = make(chan struct{})
		allOnce                              sync.Once
	)
	onAck := func(_ *kgo.Client, res kgo.ShareAckResults) {
		for _, r := range res {
			if r.Err != nil {
				ackMu.Lock()
				ackErrs = append(ackErrs, fmt.Errorf("%s/%d: %w", r.Topic, r.Partition, r.Err))
				ackMu.Unlock()
			}
		}
	}
	consumers := make([]*kgo.Client, shareConsumers)
	for i := range consumers {
		if consumers[i], err = tg.client(addrs, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ShareAckCallback(onAck)); err != nil {
			return out, err
		}
	}
	closed := false
	closeConsumers := func() {
		if !closed {
			closed = true
			for _, cl := range consumers {
				cl.Close()
			}
		}
	}
	defer closeConsumers()
	stopProfiles := func() {}
	if profile != "" {
		if stopProfiles, err = startProfiles(profile, cfg.profileSecs, tg.procs); err != nil {
			return out, err
		}
	}
	defer stopProfiles()

	pollCtx, stopPolling := context.WithCancel(cctx)
	defer stopPolling()
	var wg sync.WaitGroup
	pollErrs := make([]error, shareConsumers)
	cpu0 := cpuNow(tg.procs)
	start := time.Now()
	for i, cl := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pollCtx.Err() == nil {
				fs := cl.PollFetches(pollCtx)
				if pollCtx.Err() != nil {
					return
				}
				if e := fs.Errors(); len(e) > 0 {
					pollErrs[i] = fmt.Errorf("consumer %d: %s/%d: %w", i, e[0].Topic, e[0].Partition, e[0].Err)
					return
				}
				fs.EachRecord(func(r *kgo.Record) {
					firstAt.CompareAndSwap(0, int64(time.Since(start)))
					if r.Topic != topic || r.Partition < 0 || r.Partition >= shareParts || r.Offset < 0 || r.Offset >= int64(per) {
						foreign.Add(1)
					} else if seen[r.Partition][r.Offset].Add(1) == 1 {
						if distinct.Add(1) == int64(n) {
							allOnce.Do(func() { close(allIn) })
						}
					} else {
						dups.Add(1)
					}
					if r.DeliveryCount() > 1 {
						redelivered.Add(1)
					}
					r.Ack(kgo.AckAccept)
				})
			}
		}()
	}
	pollDone := make(chan struct{})
	go func() { wg.Wait(); close(pollDone) }()
	select {
	case <-allIn:
	case <-pollDone:
		return out, fmt.Errorf("consume: %w (%d of %d records)", errors.Join(pollErrs...), distinct.Load(), n)
	case <-cctx.Done():
		return out, fmt.Errorf("consume: %d of %d records delivered: %w", distinct.Load(), n, cctx.Err())
	}
	stopPolling()
	<-pollDone
	for _, cl := range consumers {
		if err := cl.FlushAcks(cctx); err != nil {
			return out, fmt.Errorf("FlushAcks: %w", err)
		}
	}
	end := time.Since(start)
	out.joined = time.Duration(firstAt.Load())
	out.consume = result{records: n, elapsed: end - out.joined, cpu: cpuSince(tg.procs, cpu0)}
	out.dups, out.redelivered = dups.Load(), redelivered.Load()
	stopProfiles()
	if f := foreign.Load(); f > 0 {
		return out, fmt.Errorf("%d deliveries outside the %d records produced", f, n)
	}
	ackMu.Lock()
	err = errors.Join(ackErrs...)
	ackMu.Unlock()
	if err != nil {
		return out, fmt.Errorf("acknowledge: %w", err)
	}

	// Every record accepted and committed: each start offset at the high watermark.
	offs, err := adm.DescribeShareGroupOffsets(cctx, group)
	if err != nil {
		return out, fmt.Errorf("DescribeShareGroupOffsets: %w", err)
	}
	for p := range int32(shareParts) {
		o, ok := offs[group].Offsets[topic][p]
		if !ok || o.Err != nil || o.StartOffset != int64(per) || o.Lag != 0 {
			return out, fmt.Errorf("after the acks partition %d: %+v, want start offset %d, lag 0", p, o, per)
		}
	}
	// Nothing comes back once the three have left (a record whose accept did not
	// commit would be released by their leaving and delivered again): one sentinel
	// record per partition, at offset per, is produced, and a fresh consumer of the
	// group reads until it has all six; any other record it gets is a redelivery.
	closeConsumers()
	scl, err := tg.client(addrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return out, err
	}
	var sentinels []*kgo.Record
	for p := range int32(shareParts) {
		sentinels = append(sentinels, &kgo.Record{Partition: p, Value: []byte("sentinel")})
	}
	err = scl.ProduceSync(cctx, sentinels...).FirstErr()
	scl.Close()
	if err != nil {
		return out, fmt.Errorf("produce sentinels: %w", err)
	}
	probe, err := tg.client(addrs, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	if err != nil {
		return out, err
	}
	defer probe.Close()
	got, again := map[int32]bool{}, 0
	for len(got) < shareParts {
		fs := probe.PollFetches(cctx)
		if cctx.Err() != nil {
			return out, fmt.Errorf("probe: %d of %d sentinels: %w", len(got), shareParts, cctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset == int64(per) && string(r.Value) == "sentinel" {
				got[r.Partition] = true
			} else {
				again++
			}
			r.Ack(kgo.AckAccept)
		})
	}
	if err := probe.FlushAcks(cctx); err != nil {
		return out, fmt.Errorf("probe FlushAcks: %w", err)
	}
	if again > 0 {
		return out, fmt.Errorf("%d records redelivered to a fresh consumer after every record was accepted", again)
	}
	return out, nil
}

// shareProfile is the profile prefix of round's share case on tg ("" for none).
func shareProfile(cfg config, tg target, round int) string {
	if cfg.profileDir == "" || round != 0 || len(tg.procs) == 0 {
		return ""
	}
	return filepath.Join(cfg.profileDir, tg.name+"-share")
}
