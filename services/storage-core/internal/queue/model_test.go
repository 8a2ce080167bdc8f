package queue

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// modelMsg is the expected state of one queue message (offset = its index).
type modelMsg struct {
	key      string
	acked    bool
	attempts int32
	lease    string // the current lease's ack id ("": none)
	// notBefore (ms): a retry backoff.
	notBefore int64
	deadline  int64 // ms; the lease's end
}

// TestQueueModel drives a queue with random publishes, receives, acks (current and
// stale ack ids), nacks, expiries, restarts, seeks and purges, with and without
// ordering keys, a dead-letter policy and a small window, and checks every delivery
// (never an acked or leased message, never out of its key's order, its delivery
// attempt) and the counts against a model. Delivery counts must survive restarts
// whichever way they are stored (delivered mark or records).
func TestQueueModel(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runQueueModel(t, seed) })
	}
}

func runQueueModel(t *testing.T, seed int64) {
	rnd := rand.New(rand.NewSource(seed))
	ordered, deadLetter, small := seed%2 == 0, seed%3 != 0, seed%4 < 2
	e := newEnv(t)
	src := e.log("gcp.t")
	e.log("gcp.dead")
	cfg := Config{}
	if ordered {
		cfg.OrderingKeyHeader = "k"
	}
	const maxAttempts = 3
	if seed%5 == 0 {
		cfg.Retry = &RetryPolicy{MinBackoffMs: 1000, MaxBackoffMs: 3000}
	}
	if deadLetter {
		cfg.DeadLetter = &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: maxAttempts}
	}
	q := e.queue("gcp.sub.s", cfg, Binding{Source: "gcp.t"})
	setOpts := func() {
		if small {
			e.m.opts.MaxLoaded = 4
		}
	}
	setOpts()
	var msgs []*modelMsg
	idOff := map[string]int64{}
	var ids []string
	var trace []string
	type modelSnap struct {
		name  string
		acked []bool
	}
	var snaps []modelSnap
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (ordered %v, dead letter %v, small %v), after %v: %s", seed, ordered, deadLetter, small, trace, fmt.Sprintf(format, args...))
	}
	waitCopied := func() {
		for deadline := time.Now().Add(5 * time.Second); q.log.HighWatermark() < int64(len(msgs)); {
			if time.Now().After(deadline) {
				fail("queue log at %d of %d", q.log.HighWatermark(), len(msgs))
			}
			time.Sleep(time.Millisecond)
		}
	}
	endLease := func(m *modelMsg) {
		m.lease = ""
		if deadLetter && m.attempts >= maxAttempts {
			m.acked = true
		} else if d := cfg.backoffMs(m.attempts); d > 0 {
			m.notBefore = e.m.nowMs() + d
		}
	}
	check := func() {
		t.Helper()
		checkLanes(t, q)
		var unacked, leased int64
		for _, m := range msgs {
			if !m.acked {
				unacked++
			}
			if m.lease != "" {
				leased++
			}
		}
		if in := q.Info(); in.Backlog != unacked || in.Leased != leased {
			fail("info backlog %d leased %d, want %d %d", in.Backlog, in.Leased, unacked, leased)
		}
	}
	receiveSome := func(n int, wait time.Duration) int {
		if wait == 0 {
			q.fill() // what the bindings copied is loaded (their own fill may be running)
		}
		ds, err := q.Receive(context.Background(), n, 0, 0, wait)
		if err != nil {
			fail("receive: %v", err)
		}
		for _, d := range ds {
			off := d.Record.Offset
			if off < 0 || off >= int64(len(msgs)) {
				fail("delivered offset %d of %d", off, len(msgs))
			}
			m := msgs[off]
			switch {
			case m.acked:
				fail("delivered acked message %d", off)
			case m.lease != "":
				fail("delivered leased message %d", off)
			case m.notBefore > e.m.nowMs():
				fail("message %d delivered %d ms before its backoff ends", off, m.notBefore-e.m.nowMs())
			case d.Attempt != m.attempts+1:
				fail("message %d delivered with attempt %d, want %d", off, d.Attempt, m.attempts+1)
			}
			if ordered && m.key != "" {
				for j := int64(0); j < off; j++ {
					if msgs[j].key == m.key && !msgs[j].acked {
						fail("message %d (key %s) delivered before unacked %d", off, m.key, j)
					}
				}
			}
			m.attempts++
			m.lease = d.AckID
			m.notBefore = 0
			m.deadline = e.m.nowMs() + cfg.ackDeadline()
			idOff[d.AckID] = off
			ids = append(ids, d.AckID)
		}
		if len(ds) < n && wait == 0 {
			// Nothing deliverable is left behind: a Receive that got fewer than it
			// asked for leased every message of the window (the lowest unacked ones)
			// that heads its ordering lane, is not leased and is past its backoff.
			window, lanes := 0, map[string]bool{}
			for off, m := range msgs {
				if m.acked {
					continue
				}
				if small && window == 4 {
					break
				}
				window++
				head := !ordered || m.key == "" || !lanes[m.key]
				lanes[m.key] = true
				if head && m.lease == "" && m.notBefore <= e.m.nowMs() {
					fail("receive of %d got %d, leaving deliverable message %d", n, len(ds), off)
				}
			}
		}
		return len(ds)
	}
	pick := func() []string {
		var out []string
		seen := map[string]bool{}
		for i := rnd.Intn(6); i >= 0 && len(ids) > 0; i-- {
			id := ids[len(ids)-1-rnd.Intn(min(len(ids), 20))]
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		return out
	}
	for step := 0; step < 300; step++ {
		switch r := rnd.Intn(100); {
		case r < 20:
			n := 1 + rnd.Intn(5)
			for i := 0; i < n; i++ {
				k := ""
				if ordered {
					k = []string{"", "a", "b", "c"}[rnd.Intn(4)]
				}
				publishWith(t, src, fmt.Sprint(len(msgs)), "k", k)
				msgs = append(msgs, &modelMsg{key: k})
			}
			trace = append(trace, fmt.Sprintf("pub%d", n))
			waitCopied()
		case r < 50:
			n := 1 + rnd.Intn(8)
			got := receiveSome(n, 0)
			trace = append(trace, fmt.Sprintf("recv%d:%d", n, got))
		case r < 70:
			// A stale ack id of a message nobody leases acks it only when it is loaded
			// (not modelled): those are left out.
			batch := slices.DeleteFunc(pick(), func(id string) bool {
				m := msgs[idOff[id]]
				return !m.acked && m.lease == ""
			})
			rs, err := q.Ack(batch)
			if err != nil {
				fail("ack: %v", err)
			}
			for i, id := range batch {
				if rs[i] != AckOK {
					fail("ack %s: %v", id, rs[i])
				}
				m := msgs[idOff[id]]
				if !m.acked && m.lease == id {
					m.acked, m.lease = true, ""
				}
			}
			trace = append(trace, fmt.Sprintf("ack%d", len(batch)))
		case r < 78:
			batch := pick()
			if _, err := q.ModifyAckDeadline(batch, 0); err != nil {
				fail("nack: %v", err)
			}
			for _, id := range batch {
				if m := msgs[idOff[id]]; !m.acked && m.lease == id {
					endLease(m)
				}
			}
			trace = append(trace, fmt.Sprintf("nack%d", len(batch)))
		case r < 82:
			e.clk.add(time.Second)
			e.m.Sweep()
			for _, m := range msgs {
				if m.lease != "" && m.deadline <= e.m.nowMs() {
					endLease(m)
				}
			}
			trace = append(trace, "tick")
		case r < 86:
			e.clk.add(11 * time.Second)
			e.m.Sweep()
			for _, m := range msgs {
				if m.lease != "" {
					endLease(m)
				}
			}
			trace = append(trace, "expire")
		case r < 92:
			e.restart()
			setOpts()
			var err error
			if q, err = e.m.Get("gcp.sub.s"); err != nil {
				fail("get: %v", err)
			}
			src = e.mustGet("gcp.t")
			for _, m := range msgs {
				m.lease = ""
			}
			trace = append(trace, "restart")
		case r < 95:
			name := fmt.Sprint("snap", step)
			if _, err := q.CreateSnapshot(name); err != nil {
				fail("create snapshot: %v", err)
			}
			snap := make([]bool, len(msgs))
			for i, m := range msgs {
				snap[i] = m.acked
			}
			snaps = append(snaps, modelSnap{name, snap})
			trace = append(trace, "snap")
		case r < 96 && len(snaps) > 0:
			s := snaps[rnd.Intn(len(snaps))]
			if err := q.SeekSnapshot(s.name); err != nil {
				fail("seek to %s: %v", s.name, err)
			}
			for i, m := range msgs {
				*m = modelMsg{key: m.key, acked: i < len(s.acked) && s.acked[i]}
			}
			trace = append(trace, "seek-"+s.name)
		case r < 97:
			// Every other seek replays acked messages; the others leave them acked
			// (no retain_acked) and only make the unacked ones new again.
			replay := step%2 == 0
			if err := q.SeekTime(0, replay); err != nil {
				fail("seek: %v", err)
			}
			for _, m := range msgs {
				*m = modelMsg{key: m.key, acked: m.acked && !replay}
			}
			trace = append(trace, fmt.Sprint("seek-replay-", replay))
		default:
			if err := q.Purge(); err != nil {
				fail("purge: %v", err)
			}
			for _, m := range msgs {
				m.acked, m.lease = true, ""
			}
			trace = append(trace, "purge")
		}
		check()
	}
	// Drain: everything is delivered (with the right attempt) and acked in the end,
	// and no delivery record is left behind.
	for round := 0; ; round++ {
		left := 0
		for _, m := range msgs {
			if !m.acked {
				left++
			}
		}
		if left == 0 {
			break
		}
		if round > 200 {
			fail("%d messages not delivered", left)
		}
		e.clk.add(11 * time.Second)
		e.m.Sweep()
		for _, m := range msgs {
			if m.lease != "" {
				endLease(m)
			}
		}
		e.clk.add(3 * time.Second) // past the backoffs
		// Every message of the window (the lowest unacked ones) that heads its
		// ordering lane is delivered now, and no other.
		want := map[int64]bool{}
		window, lanes := 0, map[string]bool{}
		for off, m := range msgs {
			if m.acked {
				continue
			}
			if small && window == 4 {
				break
			}
			window++
			if !ordered || m.key == "" || !lanes[m.key] {
				want[int64(off)] = true
			}
			lanes[m.key] = true
		}
		before := len(ids)
		for receiveSome(100, 20*time.Millisecond) > 0 {
		}
		got := map[int64]bool{}
		for _, id := range ids[before:] {
			got[idOff[id]] = true
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			fail("drain round %d delivered %v, want %v", round, got, want)
		}
		var live []string
		for _, m := range msgs {
			if m.lease != "" {
				live = append(live, m.lease)
			}
		}
		if len(live) > 0 {
			mustAck(t, q, live...)
			for _, id := range live {
				msgs[idOff[id]].acked, msgs[idOff[id]].lease = true, ""
			}
		}
		check()
	}
	if n := e.attemptsRecords("gcp.sub.s"); n != 0 {
		fail("%d attempts records with everything acked", n)
	}
}
