package handler

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHostileStreamBookConcurrent: streams of one queue track leases, acks settle
// them in batches mixing the streams' ids (and ids nobody tracks), and streams end
// meanwhile (drop), all concurrently (run with -race): every tracked lease is
// settled at most once, each stream's counters match its outstanding map, and an id
// is reported untracked only when no live stream holds it.
func TestHostileStreamBookConcurrent(t *testing.T) {
	h := New(Deps{}).Subscriber
	const streams, perStream = 8, 400
	var ss []*stream
	for i := 0; i < streams; i++ {
		s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 1 << 20, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
		h.streams.add(s)
		ss = append(ss, s)
	}
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]string, perStream)
			sizes := make([]int64, perStream)
			for j := range ids {
				ids[j] = fmt.Sprintf("s%d.%d", i, j)
				sizes[j] = int64(j + 1)
			}
			for j := 0; j < perStream; j += 50 {
				s.trackAll(ids[j:j+50], sizes[j:j+50], time.Unix(100, 0), 0, 0)
			}
		}()
	}
	wg.Wait()
	var settledTotal atomic.Int64
	for a := 0; a < 6; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := a; j < perStream; j += 6 {
				var batch []string
				for i := range streams {
					batch = append(batch, fmt.Sprintf("s%d.%d", i, j), fmt.Sprintf("nobody.%d.%d", a, j))
				}
				un := h.streams.done("gcp.sub.s", batch)
				settledTotal.Add(int64(len(batch) - len(un)))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < streams; i += 3 {
			h.streams.drop(ss[i])
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	var left int64
	for _, s := range ss {
		s.mu.Lock()
		var bytes int64
		for _, l := range s.outstanding {
			bytes += l.bytes
		}
		if int64(len(s.outstanding)) != int64(s.count) || bytes != s.bytes {
			t.Errorf("stream counters %d msgs %d bytes, outstanding %d msgs %d bytes", s.count, s.bytes, len(s.outstanding), bytes)
		}
		left += int64(len(s.outstanding))
		s.mu.Unlock()
	}
	if got := settledTotal.Load() + left; got != streams*perStream {
		t.Fatalf("settled %d + left %d = %d, want %d", settledTotal.Load(), left, got, streams*perStream)
	}
}
