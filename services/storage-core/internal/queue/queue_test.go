package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *clock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

type env struct {
	t   *testing.T
	dir string
	clk *clock
	st  *store.Store
	m   *Manager
	// opts: the window bounds (MaxLoaded, MaxUnleased, MaxLoadedBytes) and CatchUpMax
	// each open passes to the Manager, so they hold from its start, across restarts too.
	opts Options
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOpts(t, Options{})
}

// newEnvOpts is newEnv with the window bounds of opts (env.opts).
func newEnvOpts(t *testing.T, opts Options) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clk: &clock{}, opts: opts}
	e.clk.ms.Store(1_700_000_000_000)
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	// No checkpoint loop (WAL mode, -tags walmode): copyDir copies a live store, and
	// only a checkpoint moving under the walk would make the copy one no crash leaves.
	st, err := store.Open(filepath.Join(e.dir, "store"), store.Options{RetentionInterval: -1, CheckpointInterval: -1, Now: e.clk.now}, zaptest.NewLogger(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	opts := Options{Now: e.clk.now, MaintenanceInterval: -1,
		MaxLoaded: e.opts.MaxLoaded, MaxUnleased: e.opts.MaxUnleased, MaxLoadedBytes: e.opts.MaxLoadedBytes,
		CatchUpMax: e.opts.CatchUpMax}
	m, err := Open(st, filepath.Join(e.dir, "store", "queues.db"), opts, zaptest.NewLogger(e.t))
	if err != nil {
		_ = st.Close()
		e.t.Fatal(err)
	}
	e.st, e.m = st, m
}

func (e *env) close() {
	if e.m != nil {
		if err := e.m.Close(); err != nil {
			e.t.Error(err)
		}
		if err := e.st.Close(); err != nil {
			e.t.Error(err)
		}
		e.m, e.st = nil, nil
	}
}

func (e *env) restart() {
	e.close()
	e.open()
}

func (e *env) log(name string) *store.Log {
	e.t.Helper()
	l, _, err := e.st.Create(name, store.ChannelConfig{}, true)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) queue(name string, cfg Config, bs ...Binding) *Queue {
	e.t.Helper()
	q, created, err := e.m.Create(name, cfg, bs, false)
	if err != nil || !created {
		e.t.Fatalf("create %s: %v %v", name, created, err)
	}
	return q
}

// publish appends records with the given values (and headers "k=v" pairs) to l.
func publish(t *testing.T, l *store.Log, values ...string) {
	t.Helper()
	recs := make([]store.NewRecord, len(values))
	for i, v := range values {
		recs[i] = store.NewRecord{Value: []byte(v), Headers: []store.Header{{Key: "v", Value: []byte(v)}}}
	}
	if _, _, err := l.Append(recs); err != nil {
		t.Fatal(err)
	}
}

func publishWith(t *testing.T, l *store.Log, value string, hs ...string) {
	t.Helper()
	r := store.NewRecord{Value: []byte(value)}
	for i := 0; i+1 < len(hs); i += 2 {
		r.Headers = append(r.Headers, store.Header{Key: hs[i], Value: []byte(hs[i+1])})
	}
	if _, _, err := l.Append([]store.NewRecord{r}); err != nil {
		t.Fatal(err)
	}
}

// receive long-polls up to 5 s for at least want messages (fewer when want is 0).
func receive(t *testing.T, q *Queue, maxMsgs int, want int) []Delivery {
	t.Helper()
	var out []Delivery
	deadline := time.Now().Add(5 * time.Second)
	for {
		ds, err := q.Receive(context.Background(), maxMsgs-len(out), 0, 0, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
		if len(out) >= want && (want > 0 || len(out) == 0) || time.Now().After(deadline) || len(out) >= maxMsgs {
			break
		}
	}
	if len(out) != want {
		t.Fatalf("received %d messages, want %d: %v", len(out), want, values(out))
	}
	return out
}

func values(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Record.Value)
	}
	return out
}

func ackIDs(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.AckID
	}
	return out
}

func mustAck(t *testing.T, q *Queue, ids ...string) []AckResult {
	t.Helper()
	rs, err := q.Ack(ids)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestReceiveAck(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	publish(t, src, "before") // before the binding: not delivered (start at the high watermark)
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c")
	ds := receive(t, q, 10, 3)
	if got := values(ds); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("values %v", got)
	}
	for i, d := range ds {
		if d.Attempt != 1 || d.Source != "gcp.t" || d.SourceSeq != int64(i+2) || d.Record.Offset != int64(i) {
			t.Fatalf("delivery %d: %+v", i, d)
		}
		if len(d.Record.Headers) != 1 || d.Record.Headers[0].Key != "v" {
			t.Fatalf("headers %v", d.Record.Headers)
		}
	}
	in := q.Info()
	if in.Backlog != 3 || in.Leased != 3 || in.Bindings[0].Cursor != 5 || in.Bindings[0].StartSequence != 2 {
		t.Fatalf("info %+v", in)
	}
	if rs := mustAck(t, q, ackIDs(ds)...); fmt.Sprint(rs) != "[0 0 0]" {
		t.Fatalf("ack %v", rs)
	}
	receive(t, q, 10, 0)
	if in := q.Info(); in.Backlog != 0 || in.Leased != 0 {
		t.Fatalf("info %+v", in)
	}
	// The queue's own log holds the copies with their source headers.
	recs, _, err := q.log.ReadRecords(0, 10, 1<<20)
	if err != nil || len(recs) != 3 {
		t.Fatalf("queue log %v %v", recs, err)
	}
	if h := recs[2].Headers; len(h) != 3 || h[1].Key != HeaderSource || string(h[2].Value) != "4" {
		t.Fatalf("queue record headers %v", h)
	}
}

func TestBindingStartSequenceAndErrors(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	publish(t, src, "1", "2", "3")
	q := e.queue("gcp.sub.all", Config{}, Binding{Source: "gcp.t", StartSequence: 2})
	if got := values(receive(t, q, 10, 2)); fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("values %v", got)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		bs   []Binding
		want error
	}{
		{"gcp.sub.x", Config{}, []Binding{{Source: "gcp.missing"}}, store.ErrNotFound},
		{"gcp.sub.x", Config{}, []Binding{{Source: "gcp.t", StartSequence: 5}}, ErrInvalidArgument},
		{"gcp.sub.x", Config{}, []Binding{{Source: "gcp.t"}, {Source: "gcp.t"}}, ErrInvalidArgument},
		{"gcp.sub.x", Config{}, []Binding{{Source: "gcp.sub.all"}}, ErrInvalidArgument},
		{"gcp.sub.x", Config{AckDeadlineMs: 5000}, nil, ErrInvalidArgument},
		{"gcp.sub.x", Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.dl", MaxDeliveryAttempts: 0}}, nil, ErrInvalidArgument},
		{"gcp.sub.x", Config{DeadLetter: &DeadLetterPolicy{Channel: "_dl", MaxDeliveryAttempts: 5}}, nil, channel.ErrReserved},
		{"gcp.sub.x", Config{DeadLetter: &DeadLetterPolicy{Channel: "bad name", MaxDeliveryAttempts: 5}}, nil, channel.ErrInvalidName},
		{"gcp.sub.x", Config{Retry: &RetryPolicy{MinBackoffMs: 700_000}}, nil, ErrInvalidArgument},
		{"gcp.sub.all", Config{}, nil, ErrExists},
		{"gcp.t", Config{}, nil, ErrExists},
	} {
		if _, _, err := e.m.Create(tc.name, tc.cfg, tc.bs, false); !errors.Is(err, tc.want) {
			t.Errorf("create %s %+v %+v: %v, want %v", tc.name, tc.cfg, tc.bs, err, tc.want)
		}
	}
	if _, created, err := e.m.Create("gcp.sub.all", Config{}, nil, true); err != nil || created {
		t.Fatalf("if_not_exists: %v %v", created, err)
	}
	if _, err := q.Receive(context.Background(), 0, 0, 0, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("max 0: %v", err)
	}
	if _, err := q.Receive(context.Background(), MaxReceiveMessages+1, 0, 0, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("max %d: %v", MaxReceiveMessages+1, err)
	}
	if _, err := q.Receive(context.Background(), 1, 0, 9999, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("deadline 9999: %v", err)
	}
	if _, err := q.ModifyAckDeadline(nil, 600_001); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("modack 600001: %v", err)
	}
	if _, err := e.m.Get("gcp.t"); !errors.Is(err, ErrNotQueue) {
		t.Fatalf("get log: %v", err)
	}
	if err := e.m.Delete("gcp.sub.all", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get("gcp.sub.all"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := e.st.Get("gcp.sub.all"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("queue log kept: %v", err)
	}
	if err := e.m.Delete("gcp.sub.all", true); err != nil {
		t.Fatal(err)
	}
}

func TestLongPollWokenByPublish(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	got := make(chan []Delivery, 1)
	start := time.Now()
	go func() {
		ds, err := q.Receive(context.Background(), 10, 0, 0, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	time.Sleep(20 * time.Millisecond) // let the receive start waiting (not a readiness wait)
	publish(t, src, "x")
	ds := <-got
	if len(ds) != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("long poll: %v after %v", values(ds), time.Since(start))
	}
}

func TestExpiryRedeliveryAndAckIDs(t *testing.T) {
	for _, eod := range []bool{false, true} {
		t.Run("exactly_once="+strconv.FormatBool(eod), func(t *testing.T) {
			e := newEnv(t)
			src := e.log("gcp.t")
			q := e.queue("gcp.sub.s", Config{ExactlyOnce: eod}, Binding{Source: "gcp.t"})
			publish(t, src, "a")
			d1 := receive(t, q, 1, 1)[0]
			receive(t, q, 1, 0) // leased: nothing else
			e.clk.add(9 * time.Second)
			e.m.Sweep()
			receive(t, q, 1, 0)
			e.clk.add(time.Second + time.Millisecond)
			e.m.Sweep()
			d2 := receive(t, q, 1, 1)[0]
			if d2.Attempt != 2 || d2.AckID == d1.AckID || d2.Record.Offset != d1.Record.Offset {
				t.Fatalf("redelivery %+v after %+v", d2, d1)
			}
			// The first delivery's ack id no longer changes anything.
			stale := AckOK
			if eod {
				stale = AckExpired
			}
			if rs, _ := q.ModifyAckDeadline([]string{d1.AckID}, 0); rs[0] != stale {
				t.Fatalf("stale nack %v", rs)
			}
			if rs := mustAck(t, q, d1.AckID); rs[0] != stale {
				t.Fatalf("stale ack %v", rs)
			}
			if q.Info().Leased != 1 {
				t.Fatal("stale ack changed the lease")
			}
			bad := []string{"", "zz", "1.2", fmt.Sprintf("%x.0.1", q.meta.Incarnation+1), fmt.Sprintf("%x.ff.1", q.meta.Incarnation)}
			for _, id := range bad {
				if rs := mustAck(t, q, id); rs[0] != AckInvalid {
					t.Fatalf("ack %q: %v", id, rs)
				}
			}
			if rs := mustAck(t, q, d2.AckID, d2.AckID); rs[0] != AckOK || rs[1] != stale {
				t.Fatalf("ack %v", rs)
			}
			// Extending a lease keeps it past its first deadline.
			publish(t, src, "b")
			d3 := receive(t, q, 1, 1)[0]
			e.clk.add(8 * time.Second)
			if rs, _ := q.ModifyAckDeadline([]string{d3.AckID}, 60_000); rs[0] != AckOK {
				t.Fatalf("modack %v", rs)
			}
			e.clk.add(30 * time.Second)
			e.m.Sweep()
			receive(t, q, 1, 0)
			e.clk.add(31 * time.Second)
			if rs, _ := q.ModifyAckDeadline([]string{d3.AckID}, 60_000); rs[0] != stale {
				t.Fatalf("modack of an expired lease %v", rs)
			}
			if d := receive(t, q, 1, 1)[0]; d.Attempt != 2 {
				t.Fatalf("attempt %d", d.Attempt)
			}
		})
	}
}

func TestNackAndBackoff(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{Retry: &RetryPolicy{MinBackoffMs: 1000, MaxBackoffMs: 3000}}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b")
	ds := receive(t, q, 2, 2)
	if rs, err := q.ModifyAckDeadline([]string{ds[0].AckID}, 0); err != nil || rs[0] != AckOK {
		t.Fatalf("nack %v %v", rs, err)
	}
	receive(t, q, 2, 0) // in backoff (1 s)
	e.clk.add(time.Second)
	d := receive(t, q, 2, 1)[0]
	if string(d.Record.Value) != "a" || d.Attempt != 2 {
		t.Fatalf("%+v", d)
	}
	_, _ = q.ModifyAckDeadline([]string{d.AckID}, 0) // second failure: 2 s
	e.clk.add(1500 * time.Millisecond)
	receive(t, q, 2, 0)
	e.clk.add(500 * time.Millisecond)
	d = receive(t, q, 2, 1)[0]
	_, _ = q.ModifyAckDeadline([]string{d.AckID}, 0) // third: 4 s capped at 3 s
	e.clk.add(3 * time.Second)
	if d = receive(t, q, 2, 1)[0]; d.Attempt != 4 {
		t.Fatalf("attempt %d", d.Attempt)
	}
	// A nack's backoff is durable: a restart does not redeliver early.
	_, _ = q.ModifyAckDeadline([]string{d.AckID}, 0) // fourth: 3 s
	mustAck(t, q, ds[1].AckID)
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	receive(t, q, 2, 0)
	e.clk.add(3 * time.Second)
	if d = receive(t, q, 2, 1)[0]; d.Attempt != 5 || string(d.Record.Value) != "a" {
		t.Fatalf("after restart %+v", d)
	}
	cfg := Config{Retry: &RetryPolicy{MinBackoffMs: 10_000, MaxBackoffMs: 600_000}}
	if cfg.backoffMs(1) != 10_000 || cfg.backoffMs(3) != 40_000 || cfg.backoffMs(7) != 600_000 || (&Config{}).backoffMs(3) != 0 {
		t.Fatal("backoff")
	}
	if zero := (&Config{Retry: &RetryPolicy{}}); zero.backoffMs(5) != 0 || zero.Validate() != nil {
		t.Fatal("zero backoff")
	}
	if err := (&Config{Retry: &RetryPolicy{MinBackoffMs: 5000, MaxBackoffMs: 1000}}).Validate(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("min > max: %v", err)
	}
}

func TestOrderingLanes(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{OrderingKeyHeader: "_pubsub_ordering_key"}, Binding{Source: "gcp.t"})
	for i, k := range []string{"x", "y", "x", "", "y", "x"} {
		publishWith(t, src, fmt.Sprintf("%s%d", k, i), "_pubsub_ordering_key", k)
	}
	// One per key at a time; unkeyed messages are free.
	ds := receive(t, q, 10, 3)
	if got := values(ds); fmt.Sprint(got) != "[x0 y1 3]" {
		t.Fatalf("first round %v", got)
	}
	receive(t, q, 10, 0)
	mustAck(t, q, ds[1].AckID, ds[2].AckID) // y1 acked: y4 is next for y
	ds2 := receive(t, q, 10, 1)
	if got := values(ds2); fmt.Sprint(got) != "[y4]" {
		t.Fatalf("after ack %v", got)
	}
	// A nack of x0 holds x2 back until x0 is redelivered.
	_, _ = q.ModifyAckDeadline([]string{ds[0].AckID}, 0)
	d := receive(t, q, 10, 1)[0]
	if string(d.Record.Value) != "x0" || d.Attempt != 2 {
		t.Fatalf("redelivery %+v", d)
	}
	// Expiry holds the lane too.
	e.clk.add(11 * time.Second)
	e.m.Sweep()
	ds3 := receive(t, q, 10, 2) // x0 again and y4 again (both expired); never x2
	if got := values(ds3); fmt.Sprint(got) != "[x0 y4]" {
		t.Fatalf("after expiry %v", got)
	}
	mustAck(t, q, ackIDs(ds3)...)
	if got := values(receive(t, q, 10, 1)); fmt.Sprint(got) != "[x2]" {
		t.Fatalf("next in lane %v", got)
	}
}

func TestDeadLetter(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	dlq := e.log("gcp.dead")
	q := e.queue("gcp.sub.s", Config{DeadLetter: &DeadLetterPolicy{
		Channel: "gcp.dead", MaxDeliveryAttempts: 2,
		Headers:             []store.Header{{Key: "CloudPubSubDeadLetterSourceSubscription", Value: []byte("s")}},
		DeliveryCountHeader: "CloudPubSubDeadLetterSourceDeliveryCount", SourceTimestampHeader: "CloudPubSubDeadLetterSourceTopicPublishTime",
		DropHeaders: []string{"_pubsub_message_id"},
	}}, Binding{Source: "gcp.t"})
	if _, _, err := src.Append([]store.NewRecord{{Timestamp: 1234, Key: []byte("k"), Value: []byte("poison"),
		Headers: []store.Header{{Key: "_pubsub_message_id", Value: []byte("7")}, {Key: "attr", Value: []byte("1")}}}}); err != nil {
		t.Fatal(err)
	}
	d := receive(t, q, 1, 1)[0]
	_, _ = q.ModifyAckDeadline([]string{d.AckID}, 0) // attempt 1 failed
	d = receive(t, q, 1, 1)[0]
	e.clk.add(11 * time.Second) // attempt 2 expires: dead-lettered
	e.m.Sweep()
	receive(t, q, 1, 0)
	if in := q.Info(); in.Backlog != 0 {
		t.Fatalf("backlog %d", in.Backlog)
	}
	met := e.m.opts.Metrics
	if testutil.ToFloat64(met.DeadLettered) != 1 || testutil.ToFloat64(met.Deliveries) != 2 || testutil.ToFloat64(met.Nacks) != 1 || testutil.ToFloat64(met.Expired) != 1 {
		t.Fatalf("metrics: dead-lettered %v deliveries %v nacks %v expired %v", testutil.ToFloat64(met.DeadLettered),
			testutil.ToFloat64(met.Deliveries), testutil.ToFloat64(met.Nacks), testutil.ToFloat64(met.Expired))
	}
	recs, _, err := dlq.ReadRecords(0, 10, 1<<20)
	if err != nil || len(recs) != 1 {
		t.Fatalf("dead letters %v %v", recs, err)
	}
	r := recs[0]
	want := "[{attr [49]} {CloudPubSubDeadLetterSourceSubscription [115]} {CloudPubSubDeadLetterSourceDeliveryCount [50]} {CloudPubSubDeadLetterSourceTopicPublishTime [49 50 51 52]}]"
	if string(r.Value) != "poison" || string(r.Key) != "k" || fmt.Sprint(r.Headers) != want {
		t.Fatalf("dead letter %s %s %v", r.Key, r.Value, r.Headers)
	}
	// A missing dead-letter log keeps the message in the queue.
	q2 := e.queue("gcp.sub.s2", Config{DeadLetter: &DeadLetterPolicy{Channel: "gcp.nowhere", MaxDeliveryAttempts: 1}}, Binding{Source: "gcp.t"})
	publish(t, src, "z")
	d = receive(t, q2, 1, 1)[0]
	_, _ = q2.ModifyAckDeadline([]string{d.AckID}, 0)
	if in := q2.Info(); in.Backlog != 1 {
		t.Fatalf("backlog %d", in.Backlog)
	}
}

func TestConcurrentReceiversNeverShareALease(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	const n = 2000
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	publish(t, src, vals...)
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ds, err := q.Receive(context.Background(), 37, 0, 0, 200*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.Record.Offset]++
				}
				mu.Unlock()
				if w%2 == 0 {
					if _, err := q.Ack(ackIDs(ds)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}
	for off, c := range seen {
		if c != 1 {
			t.Fatalf("offset %d delivered %d times", off, c)
		}
	}
}

func TestRestartKeepsAcksAndCursors(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a", "b", "c", "d")
	ds := receive(t, q, 4, 4)
	mustAck(t, q, ds[0].AckID, ds[2].AckID) // a gap: b unacked below c
	e.restart()
	q, err := e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	if in := q.Info(); in.Backlog != 2 || in.Bindings[0].Cursor != 5 {
		t.Fatalf("info after restart %+v", in)
	}
	ds = receive(t, q, 10, 2) // leases are gone: b and d again, attempt 2
	if fmt.Sprint(values(ds)) != "[b d]" || ds[0].Attempt != 2 {
		t.Fatalf("after restart %v %+v", values(ds), ds[0])
	}
	mustAck(t, q, ackIDs(ds)...)
	publish(t, e.mustGet("gcp.t"), "e")
	if got := values(receive(t, q, 10, 1)); fmt.Sprint(got) != "[e]" {
		t.Fatalf("new record %v", got)
	}
}

func (e *env) mustGet(name string) *store.Log {
	e.t.Helper()
	l, err := e.st.Get(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// copyDir copies a data directory as it is on disk at this moment: what a crash
// (kill -9) leaves, for everything that was fsynced.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCrashKeepsAcks(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	vals := make([]string, 100)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	publish(t, src, vals...)
	ds := receive(t, q, 100, 100)
	var acked []string
	for i, d := range ds {
		if i%3 != 0 {
			acked = append(acked, d.AckID)
		}
	}
	mustAck(t, q, acked...)
	// Crash: the directory as it is now, without any close or flush.
	crashed := &env{t: t, dir: t.TempDir(), clk: e.clk}
	copyDir(t, e.dir, crashed.dir)
	crashed.open()
	defer crashed.close()
	q2, err := crashed.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, q2, 100, 34)
	for _, d := range got {
		if d.Record.Offset%3 != 0 || d.Attempt != 2 {
			t.Fatalf("redelivered %d (attempt %d) that was acked", d.Record.Offset, d.Attempt)
		}
	}
	// The binding goes on exactly after the last copied record.
	publish(t, crashed.mustGet("gcp.t"), "new")
	if got := values(receive(t, q2, 100, 1)); fmt.Sprint(got) != "[new]" {
		t.Fatalf("after crash %v", got)
	}
}

func TestBindingFilter(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.red", Config{}, Binding{Source: "gcp.t", Filter: `attributes.color = "red" AND NOT attributes:_pubsub_message_id`})
	publishWith(t, src, "r1", "color", "red", "_pubsub_message_id", "1") // system header: not an attribute
	publishWith(t, src, "b", "color", "blue")
	publishWith(t, src, "r2", "color", "blue", "color", "red") // repeated: the last value wins
	publishWith(t, src, "none")
	ds := receive(t, q, 10, 2)
	if got := values(ds); fmt.Sprint(got) != "[r1 r2]" {
		t.Fatalf("filtered %v", got)
	}
	if ds[1].SourceSeq != 3 || ds[1].Record.Offset != 1 {
		t.Fatalf("source sequence %+v", ds[1])
	}
	if _, _, err := e.m.Create("gcp.sub.bad", Config{}, []Binding{{Source: "gcp.t", Filter: "attributes.x ="}}, false); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad filter: %v", err)
	}
	// The cursor passes non-matching records durably enough: after a restart nothing is
	// copied twice.
	e.restart()
	q, _ = e.m.Get("gcp.sub.red")
	publishWith(t, e.mustGet("gcp.t"), "r3", "color", "red")
	ds = receive(t, q, 10, 3)
	if got := values(ds); fmt.Sprint(got) != "[r1 r2 r3]" {
		t.Fatalf("after restart %v", got)
	}
	if in := q.Info(); in.Bindings[0].Cursor != 6 || q.log.HighWatermark() != 3 {
		t.Fatalf("cursor %d, queue hw %d", in.Bindings[0].Cursor, q.log.HighWatermark())
	}
}

func TestExactlyOnceAckAfterDeadline(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{ExactlyOnce: true}, Binding{Source: "gcp.t"})
	publish(t, src, "a")
	d := receive(t, q, 1, 1)[0]
	e.clk.add(10 * time.Second) // the lease ends; no sweep ran
	if rs := mustAck(t, q, d.AckID); rs[0] != AckExpired {
		t.Fatalf("late ack %v", rs)
	}
	if d2 := receive(t, q, 1, 1)[0]; d2.Attempt != 2 {
		t.Fatalf("redelivery %+v", d2)
	}
}

// TestOrderingUnderConcurrency: receivers ack, nack or drop (let expire) messages of
// a few ordering keys at random while the clock moves; at no time are two messages
// of one key leased, and per key no message is delivered again once acked.
func TestOrderingUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	// Exactly-once, so an ack's result says whether it took (another receiver may
	// hold the message again once the clock passed its deadline).
	q := e.queue("gcp.sub.s", Config{OrderingKeyHeader: "k", ExactlyOnce: true}, Binding{Source: "gcp.t"})
	const n = 600
	keys := []string{"a", "b", "c", "d", "e"}
	recs := make([]store.NewRecord, n)
	for i := range recs {
		recs[i] = store.NewRecord{Value: []byte(strconv.Itoa(i)), Headers: []store.Header{{Key: "k", Value: []byte(keys[i%len(keys)])}}}
	}
	if _, _, err := src.Append(recs); err != nil {
		t.Fatal(err)
	}
	// A lease taken by a Receive that started at clock c lasts at least until c+10 s;
	// the checks only count what is certain despite the receivers' interleaving.
	type hold struct {
		off, until int64
	}
	type ackMark struct {
		off int64 // acked offset + 1
		seq int   // ack event number
	}
	var (
		mu      sync.Mutex
		held    = map[string]hold{}
		lastAck = map[string]ackMark{}
		events  int
		acked   int
		failed  error
	)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				mu.Lock()
				done := acked >= n || failed != nil
				seq0 := events
				mu.Unlock()
				if done {
					return
				}
				c := e.clk.ms.Load()
				ds, err := q.Receive(context.Background(), 3, 0, 0, 20*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				for j, d := range ds {
					k := string(d.Record.Headers[0].Value)
					now := e.clk.ms.Load()
					mu.Lock()
					if h, ok := held[k]; ok && h.until > now && h.off != d.Record.Offset {
						failed = fmt.Errorf("key %s: offset %d delivered while %d is leased", k, d.Record.Offset, h.off)
					}
					if a := lastAck[k]; a.seq <= seq0 && d.Record.Offset < a.off {
						failed = fmt.Errorf("key %s: offset %d delivered after %d was acked", k, d.Record.Offset, a.off-1)
					}
					held[k] = hold{d.Record.Offset, c + 10_000}
					mu.Unlock()
					switch (i + j + w) % 5 {
					case 0: // nack
						mu.Lock()
						if h := held[k]; h.off == d.Record.Offset {
							delete(held, k)
						}
						mu.Unlock()
						if _, err := q.ModifyAckDeadline([]string{d.AckID}, 0); err != nil {
							t.Error(err)
						}
					case 1: // drop: expires when the clock passes its deadline
					default:
						mu.Lock() // released before the ack: once acked, the next may go
						if h := held[k]; h.off == d.Record.Offset {
							delete(held, k)
						}
						mu.Unlock()
						rs, err := q.Ack([]string{d.AckID})
						if err != nil {
							t.Error(err)
							continue
						}
						mu.Lock()
						if rs[0] == AckOK {
							acked++
							events++
							lastAck[k] = ackMark{d.Record.Offset + 1, events}
						}
						mu.Unlock()
					}
				}
				if len(ds) == 0 {
					e.clk.add(11 * time.Second) // let dropped leases expire
					e.m.Sweep()
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	if in := q.Info(); in.Backlog != 0 {
		t.Fatalf("backlog %d", in.Backlog)
	}
}

// TestWindow: with a window of 3 messages (or 2 KiB), a backlog of 10 still flows as
// messages are acked, and one message that is never acked holds one slot only.
func TestWindow(t *testing.T) {
	for _, lim := range []Options{{MaxLoaded: 3}, {MaxLoadedBytes: 2048}} {
		t.Run(fmt.Sprintf("%d_%d", lim.MaxLoaded, lim.MaxLoadedBytes), func(t *testing.T) {
			e := newEnv(t)
			if lim.MaxLoaded > 0 {
				e.m.opts.MaxLoaded = lim.MaxLoaded
			} else {
				e.m.opts.MaxLoadedBytes = lim.MaxLoadedBytes
			}
			src := e.log("gcp.t")
			q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
			vals := make([]string, 10)
			for i := range vals {
				vals[i] = fmt.Sprintf("%04d%s", i, make([]byte, 900))
			}
			publish(t, src, vals...)
			first := receive(t, q, 1, 1)[0] // never acked
			var got []Delivery
			for deadline := time.Now().Add(5 * time.Second); len(got) < 9 && time.Now().Before(deadline); {
				ds, err := q.Receive(context.Background(), 10, 0, 0, 50*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				q.mu.Lock()
				n := len(q.pending)
				q.mu.Unlock()
				if n > 3 {
					t.Fatalf("window holds %d", n)
				}
				mustAck(t, q, ackIDs(ds)...)
				got = append(got, ds...)
			}
			if len(got) != 9 || got[0].Record.Offset != 1 || got[8].Record.Offset != 9 {
				t.Fatalf("got %d messages", len(got))
			}
			if in := q.Info(); in.Backlog != 1 || in.Leased != 1 {
				t.Fatalf("info %+v", in)
			}
			mustAck(t, q, first.AckID)
		})
	}
}

// A source deleted and created again is another log: the binding does not follow it.
func TestSourceRecreated(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a")
	receive(t, q, 10, 1)
	if err := e.st.Delete("gcp.t", false); err != nil {
		t.Fatal(err)
	}
	e.clk.add(time.Second)
	src = e.log("gcp.t")
	publish(t, src, "b", "c")
	receive(t, q, 10, 0)
	if c := q.Info().Bindings[0].Cursor; c != 2 {
		t.Fatalf("cursor %d", c)
	}
}

// A queue whose log is corrupt keeps its state (fenced, answering the store's error)
// until it is repaired or deleted; an empty queue log without state (a create cut
// short) is removed at start, a non-empty one kept.
func TestStartWithDamage(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	publish(t, src, "a")
	receive(t, q, 1, 1)
	seg := filepath.Join(e.dir, "store", "channels", "gcp.sub.s", "00000000000000000000.log")
	orphan, _, err := e.st.CreateKind("gcp.sub.orphan", store.KindQueue, queueLogConfig(), false)
	if err != nil {
		t.Fatal(err)
	}
	_ = orphan
	e.close()
	// A bit flip in the first batch with an intact one after it: the store fences the
	// channel instead of truncating.
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), data...)
	data = append(data, data...) // a second copy of the batch follows
	data[len(good)/2] ^= 0xff
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.open()
	if _, err := e.m.Get("gcp.sub.s"); !errors.Is(err, store.ErrStorage) {
		t.Fatalf("fenced queue: %v", err)
	}
	if _, err := e.st.Get("gcp.sub.orphan"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("orphan queue log: %v", err)
	}
	// Repaired: the state is still there.
	e.close()
	if err := os.WriteFile(seg, good, 0o644); err != nil {
		t.Fatal(err)
	}
	e.open()
	q, err = e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	if d := receive(t, q, 1, 1)[0]; d.Attempt != 2 {
		t.Fatalf("attempt %d", d.Attempt)
	}
}

// A long-polling Receive ends at once when its queue is deleted or the engine closes.
func TestLongPollEnds(t *testing.T) {
	e := newEnv(t)
	e.log("gcp.t")
	for _, how := range []string{"delete", "close"} {
		q := e.queue("gcp.sub."+how, Config{}, Binding{Source: "gcp.t"})
		errc := make(chan error, 1)
		go func() {
			_, err := q.Receive(context.Background(), 1, 0, 0, time.Minute)
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond) // let it wait (the outcome does not depend on it)
		start := time.Now()
		if how == "delete" {
			if err := e.m.Delete(q.Name(), false); err != nil {
				t.Fatal(err)
			}
		} else {
			e.close()
		}
		err := <-errc
		want := ErrNotFound
		if how == "close" {
			want = ErrClosed
		}
		if !errors.Is(err, want) || time.Since(start) > 5*time.Second {
			t.Fatalf("%s: %v after %v", how, err, time.Since(start))
		}
	}
}

// Acks above a message that is never acked are stored as one span, not one entry
// each, and survive a restart as such.
func TestAckedSpansStayCompact(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t"})
	vals := make([]string, 500)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	publish(t, src, vals...)
	ds := receive(t, q, 500, 500)
	for _, d := range ds[1:] { // one ack per call: the worst case for the bucket
		mustAck(t, q, d.AckID)
	}
	entries := func() int {
		n := 0
		_ = e.m.db.view(func(tx *bolt.Tx) error {
			n = stateBucket(tx, "gcp.sub.s").Bucket(bktAcked).Stats().KeyN
			return nil
		})
		return n
	}
	if n := entries(); n != 1 {
		t.Fatalf("%d acked entries", n)
	}
	e.restart()
	q, _ = e.m.Get("gcp.sub.s")
	if in := q.Info(); in.Backlog != 1 {
		t.Fatalf("backlog %d", in.Backlog)
	}
	d := receive(t, q, 10, 1)[0]
	if d.Record.Offset != 0 {
		t.Fatalf("redelivered %d", d.Record.Offset)
	}
	mustAck(t, q, d.AckID)
	if n := entries(); n != 0 {
		t.Fatalf("%d acked entries after the floor passed them", n)
	}
}

// attemptsRecords counts the attempts records of queue name in the state file.
func (e *env) attemptsRecords(name string) int {
	e.t.Helper()
	n := 0
	err := e.m.db.view(func(tx *bolt.Tx) error {
		n = stateBucket(tx, name).Bucket(bktAttempts).Stats().KeyN
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestDeliveredMark: first deliveries in offset order are recorded by the delivered
// mark alone, with no attempts record each; a first delivery behind an undelivered
// message (an ordering lane held it) and a redelivery get records. Either way the
// counts survive a restart, and acks delete the records.
func TestDeliveredMark(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{OrderingKeyHeader: "k"}, Binding{Source: "gcp.t"})
	for i, k := range []string{"", "", "x", "x", ""} {
		publishWith(t, src, fmt.Sprint(i), "k", k)
	}
	// 0, 1, 2 in order; 3 is held behind 2 (key x); 4 is first delivered behind it.
	if got := values(receive(t, q, 10, 4)); fmt.Sprint(got) != "[0 1 2 4]" {
		t.Fatalf("first round %v", got)
	}
	if n := e.attemptsRecords("gcp.sub.s"); n != 1 {
		t.Fatalf("%d attempts records after first deliveries, want 1 (offset 4, behind held 3)", n)
	}
	e.restart()
	q, err := e.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	ds := receive(t, q, 10, 4) // leases gone: 0 1 2 4 again, attempt 2; 3 still held
	for _, d := range ds {
		if d.Attempt != 2 {
			t.Fatalf("after restart %s has attempt %d, want 2", d.Record.Value, d.Attempt)
		}
	}
	if n := e.attemptsRecords("gcp.sub.s"); n != 4 {
		t.Fatalf("%d attempts records after redeliveries, want 4", n)
	}
	mustAck(t, q, ackIDs(ds)...)
	d := receive(t, q, 10, 1)[0]
	if string(d.Record.Value) != "3" || d.Attempt != 1 {
		t.Fatalf("held message %s attempt %d, want 3 attempt 1", d.Record.Value, d.Attempt)
	}
	mustAck(t, q, d.AckID)
	if n := e.attemptsRecords("gcp.sub.s"); n != 0 {
		t.Fatalf("%d attempts records with everything acked", n)
	}
	// A seek back makes every message new again: the mark goes back with it.
	if err := q.SeekTime(0, true); err != nil {
		t.Fatal(err)
	}
	for _, d := range receive(t, q, 10, 4) {
		if d.Attempt != 1 {
			t.Fatalf("after a seek back %s has attempt %d, want 1", d.Record.Value, d.Attempt)
		}
	}
}

// TestUnleasedBound: a backlog with no consumer keeps only MaxUnleased messages
// loaded; leases (waiting for acks) let the window grow past it, up to MaxLoaded.
func TestUnleasedBound(t *testing.T) {
	e := newEnv(t)
	e.m.opts.MaxUnleased, e.m.opts.MaxLoaded = 10, 25
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	for i := 0; i < 40; i++ {
		publish(t, src, fmt.Sprint(i))
	}
	// The binding copies the source into the queue's log in the background: the bounds
	// below are about the window, so wait until the log holds all 40 first.
	for deadline := time.Now().Add(30 * time.Second); q.log.HighWatermark() < 40; {
		if time.Now().After(deadline) {
			t.Fatalf("binding copied %d of 40 records", q.log.HighWatermark())
		}
		time.Sleep(5 * time.Millisecond)
	}
	loaded := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.pending) - q.tombs
	}
	q.fill()
	if n := loaded(); n != 10 {
		t.Fatalf("%d messages loaded with no consumer, want MaxUnleased 10", n)
	}
	first := receive(t, q, 10, 10)
	q.fill()
	if n := loaded(); n != 20 {
		t.Fatalf("%d loaded with 10 leased, want 20", n)
	}
	receive(t, q, 15, 15) // 25 leased: MaxLoaded
	q.fill()
	if n := loaded(); n != 25 {
		t.Fatalf("%d loaded at MaxLoaded, want 25", n)
	}
	mustAck(t, q, ackIDs(first)...)
	q.fill()
	if n := loaded(); n != 25 {
		t.Fatalf("%d loaded after 10 acks, want 25 (15 leased + 10 unleased)", n)
	}
	if got := values(receive(t, q, 20, 10)); got[0] != "25" {
		t.Fatalf("next deliveries %v, want from 25 on", got)
	}
}
