package queue

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// waitLog waits until the queue log holds n records (the bindings copy them).
func waitLog(t *testing.T, q *Queue, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); q.log.HighWatermark() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("queue log at %d of %d", q.log.HighWatermark(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// loadedCount is the number of unacked messages in the window.
func loadedCount(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) - q.tombs
}

// receiveNow fills the window and receives what is deliverable now, without waiting.
func receiveNow(t *testing.T, q *Queue, maxMsgs int) []Delivery {
	t.Helper()
	q.fill()
	ds, err := q.Receive(context.Background(), maxMsgs, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// publishKeys publishes one message per key (header "k"; "" = none), valued key and
// source offset ("a7").
func publishKeys(t *testing.T, l *store.Log, keys ...string) {
	t.Helper()
	recs := make([]store.NewRecord, len(keys))
	for i, k := range keys {
		hw := l.HighWatermark()
		recs[i] = store.NewRecord{Value: []byte(fmt.Sprint(k, hw+int64(i))), Headers: []store.Header{{Key: "k", Value: []byte(k)}}}
	}
	if _, _, err := l.Append(recs); err != nil {
		t.Fatal(err)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// checkLanes compares the window's maintained counts (lanes, laneMsgs, tombs, leased,
// pendingBytes: fill's room is made of them) with a recount over pending, and each
// message's ordering key with the one its headers give.
func checkLanes(t *testing.T, q *Queue) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	want, msgs, tombs, leased, bytes := map[string]int32{}, 0, 0, 0, int64(0)
	for _, m := range q.pending {
		if k := orderingKey(q.meta.Config.OrderingKeyHeader, m.rec.Headers); k != m.key {
			t.Fatalf("message %d has key %q, its headers say %q", m.off, m.key, k)
		}
		switch {
		case m.state == stAcked:
			tombs++
			continue
		case m.state == stLeased:
			leased++
		}
		bytes += m.size
		if m.key != "" {
			want[m.key]++
			msgs++
		}
	}
	if !maps.Equal(q.lanes, want) || q.laneMsgs != msgs {
		t.Fatalf("lanes %v (%d messages), recount %v (%d)", q.lanes, q.laneMsgs, want, msgs)
	}
	if q.tombs != tombs || q.leased != leased || q.pendingBytes != bytes {
		t.Fatalf("tombs %d leased %d bytes %d, recount %d %d %d", q.tombs, q.leased, q.pendingBytes, tombs, leased, bytes)
	}
}

// TestOrderingKeyBacklogDoesNotBlockOthers: a backlog of one ordering key at the
// window's front does not hold other keys' messages or unkeyed ones back. The key's
// later messages wait behind its first one and do not count against MaxUnleased, so
// the window loads past them (Pub/Sub delivers each ordering key independently of the
// others' backlogs).
func TestOrderingKeyBacklogDoesNotBlockOthers(t *testing.T) {
	e := newEnvOpts(t, Options{MaxUnleased: 10, MaxLoaded: 100})
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{OrderingKeyHeader: "k"}, Binding{Source: "gcp.t", StartSequence: 1})
	publishKeys(t, src, repeat("a", 50)...)
	publishKeys(t, src, "b")
	waitLog(t, q, 51)
	first := receiveNow(t, q, 10)
	if got := values(first); fmt.Sprint(got) != "[a0 b50]" {
		t.Fatalf("first receive %v, want [a0 b50]", got)
	}
	if n := loadedCount(q); n != 51 {
		t.Fatalf("%d loaded, want all 51 (49 of them blocked behind a0)", n)
	}
	checkLanes(t, q)
	// An unkeyed message and a key behind a longer backlog, past the scan's usual
	// stopping point: each still heads its lane.
	publishKeys(t, src, repeat("a", 30)...)
	publishKeys(t, src, "", "c", "b")
	waitLog(t, q, 84)
	if got := values(receiveNow(t, q, 10)); fmt.Sprint(got) != "[81 c82]" {
		t.Fatalf("second receive %v, want [81 c82]", got)
	}
	checkLanes(t, q)
	// Acks move each lane on by one.
	mustAck(t, q, ackIDs(first)...)
	checkLanes(t, q)
	if got := values(receiveNow(t, q, 10)); fmt.Sprint(got) != "[a1 b83]" {
		t.Fatalf("after the acks %v, want [a1 b83]", got)
	}
	checkLanes(t, q)
}

// TestOrderedWindowBounds: messages blocked behind their key still count against
// MaxLoaded and MaxLoadedBytes, and messages that head their lane (distinct keys,
// unkeyed) against MaxUnleased, consumer or not.
func TestOrderedWindowBounds(t *testing.T) {
	const maxUnleased, maxLoaded = 10, 100
	setup := func(t *testing.T, opts Options) (*Queue, *store.Log) {
		e := newEnvOpts(t, opts)
		src := e.log("gcp.t")
		return e.queue("gcp.sub.s", Config{OrderingKeyHeader: "k"}, Binding{Source: "gcp.t", StartSequence: 1}), src
	}
	t.Run("one key", func(t *testing.T) {
		q, src := setup(t, Options{MaxUnleased: maxUnleased, MaxLoaded: maxLoaded})
		publishKeys(t, src, repeat("a", 300)...)
		waitLog(t, q, 300)
		q.fill()
		if n := loadedCount(q); n != maxLoaded {
			t.Fatalf("%d loaded, want MaxLoaded %d", n, maxLoaded)
		}
		if got := values(receiveNow(t, q, 10)); fmt.Sprint(got) != "[a0]" {
			t.Fatalf("receive %v, want [a0]", got)
		}
		if n := loadedCount(q); n != maxLoaded {
			t.Fatalf("%d loaded with a0 leased, want MaxLoaded %d", n, maxLoaded)
		}
		checkLanes(t, q)
	})
	t.Run("one key bytes", func(t *testing.T) {
		const maxBytes = 20 << 10
		q, src := setup(t, Options{MaxUnleased: maxUnleased, MaxLoaded: maxLoaded, MaxLoadedBytes: maxBytes})
		recs := make([]store.NewRecord, 300)
		for i := range recs {
			recs[i] = store.NewRecord{Value: []byte(strings.Repeat("x", 1000)), Headers: []store.Header{{Key: "k", Value: []byte("a")}}}
		}
		if _, _, err := src.Append(recs); err != nil {
			t.Fatal(err)
		}
		waitLog(t, q, 300)
		q.fill()
		q.mu.Lock()
		n, size := len(q.pending)-q.tombs, q.pendingBytes
		q.mu.Unlock()
		// At most one message past the bound: the one crossing it (fillStage.take).
		if size > maxBytes+1002 || n < maxBytes/1002 {
			t.Fatalf("%d messages, %d bytes loaded; want about MaxLoadedBytes %d", n, size, maxBytes)
		}
	})
	t.Run("distinct keys", func(t *testing.T) {
		q, src := setup(t, Options{MaxUnleased: maxUnleased, MaxLoaded: maxLoaded})
		keys := make([]string, 200)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
		publishKeys(t, src, keys...)
		waitLog(t, q, 200)
		q.fill()
		if n := loadedCount(q); n != maxUnleased {
			t.Fatalf("%d loaded with no consumer, want MaxUnleased %d", n, maxUnleased)
		}
		receiveNow(t, q, 5)
		q.fill()
		if n := loadedCount(q); n != maxUnleased+5 {
			t.Fatalf("%d loaded with 5 leased, want %d", n, maxUnleased+5)
		}
		checkLanes(t, q)
	})
	t.Run("unkeyed", func(t *testing.T) {
		q, src := setup(t, Options{MaxUnleased: maxUnleased, MaxLoaded: maxLoaded})
		publishKeys(t, src, repeat("", 200)...)
		waitLog(t, q, 200)
		q.fill()
		if n := loadedCount(q); n != maxUnleased {
			t.Fatalf("%d loaded with no consumer, want MaxUnleased %d", n, maxUnleased)
		}
	})
	t.Run("few keys", func(t *testing.T) {
		// Three backlogs interleaved: three heads unleased, the rest blocked, up to
		// MaxLoaded.
		q, src := setup(t, Options{MaxUnleased: maxUnleased, MaxLoaded: maxLoaded})
		var keys []string
		for i := 0; i < 100; i++ {
			keys = append(keys, "a", "b", "c")
		}
		publishKeys(t, src, keys...)
		waitLog(t, q, 300)
		q.fill()
		if n := loadedCount(q); n != maxLoaded {
			t.Fatalf("%d loaded, want MaxLoaded %d", n, maxLoaded)
		}
		if got := values(receiveNow(t, q, 10)); fmt.Sprint(got) != "[a0 b1 c2]" {
			t.Fatalf("receive %v, want [a0 b1 c2]", got)
		}
	})
}

// TestLaneCountsStayExact drives ordered queues with random publishes (keys, several
// per key, unkeyed), receives, acks (current and stale ack ids), nacks, expiries,
// dead-letters, retention drops, purges, seeks (time, snapshot), ordering key header
// changes and restarts, with a small window, and after each step compares the
// window's maintained counts with a recount over it (a drift would stall lanes or
// unbound the window). In the end every message is delivered and acked.
func TestLaneCountsStayExact(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runLaneCounts(t, seed) })
	}
}

func runLaneCounts(t *testing.T, seed int64) {
	rnd := rand.New(rand.NewSource(seed))
	const maxUnleased, maxLoaded = 6, 24
	e := newEnvOpts(t, Options{MaxUnleased: maxUnleased, MaxLoaded: maxLoaded})
	src := e.log("gcp.t")
	e.log("gcp.dead")
	cfg := Config{OrderingKeyHeader: "k", MessageRetentionMs: 120_000,
		DeadLetter: &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 3}}
	if seed%2 == 0 {
		cfg.Retry = &RetryPolicy{MinBackoffMs: 1000, MaxBackoffMs: 3000}
	}
	q := e.queue("gcp.sub.s", cfg, Binding{Source: "gcp.t"})
	var ids, trace []string
	published, snaps := int64(0), 0
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, after %v: %s", seed, trace, fmt.Sprintf(format, args...))
	}
	check := func() {
		t.Helper()
		checkLanes(t, q)
		if n := loadedCount(q); n > maxLoaded {
			fail("%d loaded, over MaxLoaded %d", n, maxLoaded)
		}
	}
	pick := func() []string {
		var out []string
		for i := rnd.Intn(5); i >= 0 && len(ids) > 0; i-- {
			out = append(out, ids[len(ids)-1-rnd.Intn(min(len(ids), 30))])
		}
		return out
	}
	keys := []string{"", "a", "a", "a", "b", "b", "c", "d"}
	for step := 0; step < 400; step++ {
		switch r := rnd.Intn(100); {
		case r < 20:
			n := 1 + rnd.Intn(8)
			recs := make([]store.NewRecord, n)
			for i := range recs {
				recs[i] = store.NewRecord{Value: []byte(fmt.Sprint(published)), Headers: []store.Header{
					{Key: "k", Value: []byte(keys[rnd.Intn(len(keys))])}, {Key: "k2", Value: []byte(keys[rnd.Intn(len(keys))])}}}
				published++
			}
			if _, _, err := src.Append(recs); err != nil {
				fail("publish: %v", err)
			}
			waitLog(t, q, published)
			trace = append(trace, fmt.Sprint("pub", n))
		case r < 45:
			n := 1 + rnd.Intn(6)
			ds := receiveNow(t, q, n)
			ids = append(ids, ackIDs(ds)...)
			trace = append(trace, fmt.Sprintf("recv%d:%d", n, len(ds)))
		case r < 62:
			batch := pick()
			if _, err := q.Ack(batch); err != nil {
				fail("ack: %v", err)
			}
			trace = append(trace, fmt.Sprint("ack", len(batch)))
		case r < 72:
			batch := pick()
			if _, err := q.ModifyAckDeadline(batch, 0); err != nil {
				fail("nack: %v", err)
			}
			trace = append(trace, fmt.Sprint("nack", len(batch)))
		case r < 78:
			e.clk.add(time.Second)
			e.m.Sweep()
			trace = append(trace, "tick")
		case r < 84:
			e.clk.add(11 * time.Second)
			e.m.Sweep()
			trace = append(trace, "expire")
		case r < 87:
			e.clk.add(40 * time.Second)
			e.m.Maintain()
			trace = append(trace, "age")
		case r < 89:
			hdr := []string{"k", "k2", ""}[rnd.Intn(3)]
			if _, err := q.UpdateConfig(Config{OrderingKeyHeader: hdr}, []string{"ordering_key_header"}); err != nil {
				fail("update config: %v", err)
			}
			trace = append(trace, "header-"+hdr)
		case r < 92:
			snaps++
			if _, err := q.CreateSnapshot(fmt.Sprint("snap", snaps)); err != nil {
				fail("snapshot: %v", err)
			}
			trace = append(trace, "snap")
		case r < 94 && snaps > 0:
			name := fmt.Sprint("snap", 1+rnd.Intn(snaps))
			if err := q.SeekSnapshot(name); err != nil {
				fail("seek %s: %v", name, err)
			}
			trace = append(trace, "seek-"+name)
		case r < 96:
			ago := int64(rnd.Intn(100_000))
			if err := q.SeekTime(e.m.nowMs()-ago, ago%2 == 0); err != nil {
				fail("seek: %v", err)
			}
			trace = append(trace, "seek-time")
		case r < 98:
			e.restart()
			var err error
			if q, err = e.m.Get("gcp.sub.s"); err != nil {
				fail("get: %v", err)
			}
			src = e.mustGet("gcp.t")
			trace = append(trace, "restart")
		default:
			if err := q.Purge(); err != nil {
				fail("purge: %v", err)
			}
			trace = append(trace, "purge")
		}
		check()
	}
	// Drain: nothing stalls, and the counts are exact to the end.
	for round := 0; q.Info().Backlog > 0; round++ {
		if round > 500 {
			fail("backlog %d not drained", q.Info().Backlog)
		}
		e.clk.add(11 * time.Second)
		e.m.Sweep()
		ds := receiveNow(t, q, 100)
		check()
		if _, err := q.Ack(ackIDs(ds)); err != nil {
			fail("ack: %v", err)
		}
		check()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.lanes) != 0 || q.laneMsgs != 0 {
		fail("lanes %v (%d messages) with every message acked", q.lanes, q.laneMsgs)
	}
}
