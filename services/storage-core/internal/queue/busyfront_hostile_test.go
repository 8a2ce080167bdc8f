package queue

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// TestHostileBusyFrontMatchesFullScan: over random acks, nacks, deadline changes
// (shorter and longer), lease lengths and clock steps, every Receive (wait 0) returns
// exactly the first deliverable messages a scan of the whole window from its front
// finds: the busy front (busyTo/busyMin) never hides a message that can be leased.
func TestHostileBusyFrontMatchesFullScan(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		for _, retry := range []bool{false, true} {
			for dl := 0; dl < 3; dl++ {
				t.Run(fmt.Sprintf("seed=%d/retry=%v/dl=%d", seed, retry, dl), func(t *testing.T) { runBusyFront(t, seed, retry, dl) })
			}
		}
	}
}

// dl: 0 no dead-letter policy, 1 one to an existing log, 2 one whose appends fail
// (its channel is missing), so dead-lettered messages come back after a second.
func runBusyFront(t *testing.T, seed int64, retry bool, dl int) {
	rnd := rand.New(rand.NewSource(seed))
	e := newEnv(t)
	src := e.log("gcp.t")
	cfg := Config{}
	if retry {
		cfg.Retry = &RetryPolicy{MinBackoffMs: 10_000, MaxBackoffMs: 20_000}
	}
	switch dl {
	case 1:
		e.log("gcp.dead")
		cfg.DeadLetter = &DeadLetterPolicy{Channel: "gcp.dead", MaxDeliveryAttempts: 3}
	case 2:
		cfg.DeadLetter = &DeadLetterPolicy{Channel: "gcp.missing", MaxDeliveryAttempts: 3}
	}
	q := e.queue("gcp.sub.s", cfg, Binding{Source: "gcp.t", StartSequence: 1})
	const n = 60
	vals := make([]string, n)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	publish(t, src, vals...)
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.fill()
		q.mu.Lock()
		loaded := len(q.pending)
		q.mu.Unlock()
		if loaded == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("loaded %d of %d", loaded, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var held []string // ack ids handed out, not acked by the test
	for step := 0; step < 300; step++ {
		switch op := rnd.Intn(10); {
		case op < 4:
			max := rnd.Intn(6) + 1
			now := e.m.nowMs()
			q.mu.Lock()
			var want []int64
			for _, m := range q.pending {
				if len(want) == max {
					break
				}
				switch {
				case m.state == stAvailable && m.notBefore <= now:
					want = append(want, m.off)
				case m.state == stLeased && m.deadline <= now && q.meta.Config.backoffMs(m.attempts) == 0 &&
					(q.meta.Config.DeadLetter == nil || m.attempts < q.meta.Config.DeadLetter.MaxDeliveryAttempts):
					want = append(want, m.off)
				}
			}
			busyTo, busyMin := q.busyTo, q.busyMin
			q.mu.Unlock()
			lease := int64(MinAckDeadlineMs + rnd.Intn(50_000))
			ds, err := q.Receive(context.Background(), max, 0, lease, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, d := range ds {
				got = append(got, d.Record.Offset)
				held = append(held, d.AckID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: receive(%d) at %d got offsets %v, a full scan gives %v (busyTo %d busyMin %d)", step, max, now, got, want, busyTo, busyMin)
			}
		case op < 6 && len(held) > 0:
			i := rnd.Intn(len(held))
			if _, err := q.Ack([]string{held[i]}); err != nil {
				t.Fatal(err)
			}
			held = slices.Delete(held, i, i+1)
		case op < 8 && len(held) > 0:
			i := rnd.Intn(len(held))
			ms := []int64{0, 1_000, 5_000, 10_000, 30_000, 120_000}[rnd.Intn(6)]
			if _, err := q.ModifyAckDeadline([]string{held[i]}, ms); err != nil {
				t.Fatal(err)
			}
		default:
			e.clk.add(time.Duration(rnd.Intn(15_000)) * time.Millisecond)
		}
	}
}
