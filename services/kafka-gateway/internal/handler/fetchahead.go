package handler

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Fetch-ahead. A consumer that is behind sends one Fetch per broker at a time and asks
// for the next offsets only after the previous answer arrived, so every fetch paid a
// full storage-core round trip. After answering a Fetch whose every partition returned
// data and has more available, the gateway asks storage-core for the next range of the
// same partitions at once (same byte limits and isolation, no wait) and keeps the answer
// for a short time; the consumer's next Fetch, if it asks exactly for those ranges,
// is answered from it, or joins the call still in flight. The log is append-only, so
// the prefetched bytes are what a fresh read would return; only the offsets reported
// with them (high watermark, log start) are up to fetchAheadTTL older.
const (
	fetchAheadTTL = time.Second
	// fetchAheadMaxBytes bounds the bytes prefetched and not yet taken, over all
	// connections (counted by the requests' limits).
	fetchAheadMaxBytes = 256 << 20
)

// fetchAheadKey identifies one prefetched partition range.
type fetchAheadKey struct {
	channel  string
	from     int64
	maxBytes int32
	iso      storagev1.IsolationLevel
}

// aheadCall is one prefetch call to storage-core, shared by the entries it fills. Its
// answer's buffer goes back to the pool when the last of its holders lets go: each
// entry while held, each Fetch that took one until its response is written, and the
// call itself until it finished.
type aheadCall struct {
	done    chan struct{}
	results map[fetchAheadKey]*storagev1.FetchChannelResult // complete when done closes; nil on error
	buf     *fetchBuf                                       // the results' buffer, set before done closes
	refs    atomic.Int32
	per     int64 // bytes accounted per entry
	at      time.Time
}

// release drops one holder of c.
func (c *aheadCall) release() {
	if c.refs.Add(-1) == 0 {
		c.buf.release()
	}
}

// fetchAhead holds prefetched ranges until they are taken or expire.
type fetchAhead struct {
	mu      sync.Mutex
	entries map[fetchAheadKey]*aheadCall
	bytes   int64
}

func newFetchAhead() *fetchAhead { return &fetchAhead{entries: map[fetchAheadKey]*aheadCall{}} }

// take removes and returns the prefetched results for exactly keys, waiting (up to ctx)
// for a call still in flight; ok is false unless every key was prefetched and every
// result has data and no error, and they hold at least minBytes in all (the caller
// then reads from storage-core as usual, which waits for min_bytes). When ok, release
// must be called once nothing reads the results any more (they view pooled buffers).
func (f *fetchAhead) take(ctx context.Context, keys []fetchAheadKey, minBytes int32) (res []*storagev1.FetchChannelResult, release func(), ok bool) {
	f.mu.Lock()
	calls := make([]*aheadCall, len(keys))
	now := time.Now()
	for i, k := range keys {
		c := f.entries[k]
		if c == nil || now.Sub(c.at) > fetchAheadTTL {
			f.mu.Unlock()
			return nil, nil, false
		}
		calls[i] = c
	}
	for _, k := range keys {
		f.removeLocked(k, false) // the entry's hold passes to us
	}
	f.mu.Unlock()
	release = func() {
		for _, c := range calls {
			c.release()
		}
	}
	res = make([]*storagev1.FetchChannelResult, len(keys))
	total := 0
	for i, c := range calls {
		select {
		case <-c.done:
		case <-ctx.Done():
			release()
			return nil, nil, false
		}
		r := c.results[keys[i]]
		if r == nil || r.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED || len(r.GetBatches()) == 0 {
			release()
			return nil, nil, false
		}
		res[i] = r
		total += len(r.GetBatches())
	}
	if total < int(minBytes) {
		release()
		return nil, nil, false
	}
	return res, release, true
}

// removeLocked removes k's entry; drop releases the entry's hold on its call (false:
// the caller takes it over).
func (f *fetchAhead) removeLocked(k fetchAheadKey, drop bool) {
	if c, ok := f.entries[k]; ok {
		delete(f.entries, k)
		f.bytes -= c.per
		if drop {
			c.release()
		}
	}
}

// clear drops everything (topics changed: a recreated topic must not see old data).
func (f *fetchAhead) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.entries {
		f.removeLocked(k, true)
	}
}

// start prefetches the ranges following results, when every one of them returned data
// and has more available now. req is the storage request results answer.
func (f *fetchAhead) start(storage storagev1.StorageServiceClient, base context.Context, req *storagev1.FetchRequest, results []*storagev1.FetchChannelResult) {
	if len(results) != len(req.Channels) || len(results) == 0 {
		return
	}
	next := &storagev1.FetchRequest{MaxBytes: req.MaxBytes, IsolationLevel: req.IsolationLevel}
	keys := make([]fetchAheadKey, len(results))
	var size int64
	for i, r := range results {
		if r.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			return
		}
		end, ok := lastOffset(r.GetBatches())
		// Sequence end+1 is offset end; the next record is sequence end+2, available
		// when the high watermark (last durable sequence) is beyond end+1.
		if !ok || r.GetHighWatermark() <= end+1 {
			return
		}
		fc := req.Channels[i]
		next.Channels = append(next.Channels, &storagev1.FetchChannel{Channel: fc.Channel, FromSequence: end + 2, MaxBytes: fc.MaxBytes})
		keys[i] = fetchAheadKey{channel: fc.Channel, from: end + 2, maxBytes: fc.MaxBytes, iso: req.IsolationLevel}
		size += int64(fc.MaxBytes)
	}
	size = min(size, int64(req.MaxBytes))
	c := &aheadCall{done: make(chan struct{}), at: time.Now(), per: size / int64(len(keys)),
		results: map[fetchAheadKey]*storagev1.FetchChannelResult{}}
	f.mu.Lock()
	now := time.Now()
	for k, e := range f.entries {
		if now.Sub(e.at) > fetchAheadTTL {
			f.removeLocked(k, true)
		}
	}
	if f.bytes+size > fetchAheadMaxBytes {
		f.mu.Unlock()
		return
	}
	for _, k := range keys {
		if _, dup := f.entries[k]; dup {
			f.mu.Unlock()
			return
		}
	}
	c.refs.Store(int32(len(keys)) + 1) // the entries and the call
	for _, k := range keys {
		f.entries[k] = c
		f.bytes += c.per
	}
	f.mu.Unlock()
	// Drop what is not taken in time even if no other Fetch comes (idle gateway).
	time.AfterFunc(fetchAheadTTL, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range keys {
			if f.entries[k] == c {
				f.removeLocked(k, true)
			}
		}
	})
	go func() {
		defer c.release()
		defer close(c.done)
		ctx, cancel := context.WithTimeout(base, 15*time.Second)
		defer cancel()
		out, buf, err := fetchOwned(ctx, storage, next)
		if err != nil {
			c.results = nil
			return
		}
		c.buf = buf
		for i, r := range out.GetResults() {
			if i < len(keys) {
				c.results[keys[i]] = r
			}
		}
	}()
}

// lastOffset returns the last offset of the last whole RecordBatch v2 frame in b.
func lastOffset(b []byte) (int64, bool) {
	var last int64
	ok := false
	for len(b) >= 61 {
		n := int(int32(binary.BigEndian.Uint32(b[8:]))) + 12
		if n < 61 || n > len(b) {
			break
		}
		last = int64(binary.BigEndian.Uint64(b[0:])) + int64(int32(binary.BigEndian.Uint32(b[23:])))
		ok = true
		b = b[n:]
	}
	return last, ok
}

// has reports whether a range of channel from sequence from is held (tests).
func (f *fetchAhead) has(channel string, from int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.entries {
		if k.channel == channel && k.from == from {
			return true
		}
	}
	return false
}
