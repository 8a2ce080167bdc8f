// Command pubsubbench measures Pub/Sub delivery with the Go client
// (cloud.google.com/go/pubsub/v2) at its default settings: N messages of 1 KiB are
// published, then a StreamingPull subscriber (Subscriber.Receive, acking each message)
// takes them all; a second case publishes at a fixed rate while Receive runs (from the
// moment a warm-up message arrived), for the publish→receive latency. Targets: against a Tributary stack started from the real binaries (storage-core
// with fsync on, one pubsub-gateway), against pstest (the Go client's in-process fake)
// and, when gcloud is installed, against Google's official emulator, side by side in one
// run. It prints the StreamingPull messages/s, the latency p50/p99 and the unary
// Pull+Acknowledge rate of each (pstest's StreamingPull is slow: its case is cut after
// -stream-timeout and reports the rate of what arrived).
//
// Tributary holds a stream to the client's flow control as Google does (at most
// MaxOutstandingMessages unacked), and the Go client sends acks every 100 ms, so one
// stream at the default limit of 1,000 delivers at most about 10,000 msgs/s: that
// ceiling (limit / ack interval) is printed beside the default case (bar: ≥ 0.9 × it).
// A second Tributary case sets MaxOutstandingMessages to -wide-limit (20,000), where
// the limit does not bind, on -wide-streams streams (the client's NumGoroutines, 4),
// and is compared with pstest's unary Pull+Acknowledge (bar:
// ≥ 3×). The cases the bars compare (both Tributary StreamingPull cases and pstest's
// Pull+Acknowledge) run -rounds times in turn, and the table shows their medians.
//
// CPU time per message is printed for each process, for the default case and for the
// wide one apart; -profile DIR also writes pprof CPU and allocs profiles of
// pubsub-gateway and storage-core taken during each round's wide case.
//
// Run from tests/e2e: go run ./cmd/pubsubbench [-messages 50000] [-targets tributary,pstest,emulator]
// It needs the test Postgres and NATS (TRIBUTARY_TEST_POSTGRES_URL,
// TRIBUTARY_TEST_NATS_URL); TRIBUTARY_BIN_DIR reuses prebuilt binaries.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

const project = "bench"

type config struct {
	messages, bytes int
	pullMessages    int
	targets         string
	fsync           string
	timeout         time.Duration
	streamTimeout   time.Duration
	rate            int
	latencyDur      time.Duration
	rounds          int
	wideLimit       int
	wideStreams     int
	// profileDir, when set, receives CPU and allocation profiles of pubsub-gateway
	// and storage-core taken over profileFor from the start of each round's wide case.
	profileDir string
	profileFor time.Duration
}

// The Go client's defaults behind the default case's ceiling (cloud.google.com/go/
// pubsub/v2: DefaultReceiveSettings.MaxOutstandingMessages, and the iterator's
// ackInterval).
const (
	clientDefaultLimit = 1000
	clientAckInterval  = 100 * time.Millisecond
)

type target struct {
	name string
	addr string
	// pids are the server processes whose CPU time the StreamingPull case reports
	// (none: the server runs in this process).
	pids []int
	// httpAddrs are the pids' /debug/pprof addresses (-profile).
	httpAddrs []string
	// start, when set, starts the server just before the target's cases and returns
	// its address and its stop.
	start func(context.Context) (string, func(), error)
	// fresh, when set, starts a new server for each case and returns its address and
	// its close (pstest keeps every message of earlier cases in its heap, which slowed
	// its later cases several times over).
	fresh func() (string, func())
}

// cpuNames names the entries of result.cpu.
func (tg target) cpuNames() []string {
	switch {
	case tg.start != nil:
		return []string{"this process (client; the emulator's JVM not counted)"}
	case len(tg.pids) == 0:
		return []string{"this process (client and server)"}
	}
	return []string{"pubsub-gateway", "storage-core", "this process (client)"}
}

// forCase returns tg for one case, on a fresh server when tg has one, and its cleanup.
func (tg target) forCase() (target, func()) {
	if tg.fresh == nil {
		return tg, func() {}
	}
	addr, closeFn := tg.fresh()
	tg.addr = addr
	return tg, closeFn
}

type result struct {
	n        int
	elapsed  time.Duration
	p50, p99 time.Duration
	// rates are the StreamingPull messages/s (the Go client's defaults), wideRates
	// those with MaxOutstandingMessages -wide-limit (Tributary only), and pullRates the
	// Pull+Acknowledge messages/s of each round (see -rounds); the table shows their
	// medians.
	rates, wideRates, pullRates []float64
	// publish is how long publishing took.
	publish time.Duration
	// cpu is the CPU time each of the target's pids, then this process (the Go
	// client, and an in-process server), used during the StreamingPull receives of
	// cpuN messages in all.
	cpu  []time.Duration
	cpuN int
	// wideCPU, wideCPUN: the same for the receives at -wide-limit.
	wideCPU  []time.Duration
	wideCPUN int
	// pullCPU is this process's CPU time during the unary Pull+Acknowledge cases of
	// pullN messages in all.
	pullCPU time.Duration
	pullN   int
	// partial: the StreamingPull case timed out; the rate is of what was delivered.
	partial bool
	latErr  error
	err     error
}

func main() {
	var cfg config
	flag.IntVar(&cfg.messages, "messages", 50000, "messages per StreamingPull case")
	flag.IntVar(&cfg.bytes, "bytes", 1024, "message data size")
	flag.IntVar(&cfg.pullMessages, "pull-messages", 0, "messages for the unary Pull+Acknowledge case (0 = -messages: pstest's Pull walks its whole backlog on every call, so its rate depends on this count)")
	flag.StringVar(&cfg.targets, "targets", "tributary,pstest,emulator", "targets, comma separated (tributary, pstest, emulator)")
	flag.StringVar(&cfg.fsync, "fsync", "always", "storage-core --fsync")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "bound of all cases of one target")
	flag.DurationVar(&cfg.streamTimeout, "stream-timeout", 30*time.Second, "bound of the StreamingPull receive (pstest's is slow); a cut case reports the rate of what arrived")
	flag.IntVar(&cfg.rate, "rate", 2000, "messages/s of the latency case")
	flag.DurationVar(&cfg.latencyDur, "latency-duration", 5*time.Second, "publish time of the latency case")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of the cases the bars compare (tributary's StreamingPull at the defaults and at -wide-limit, pstest's Pull+Acknowledge), alternating; the table and the ratios use their medians")
	flag.IntVar(&cfg.wideLimit, "wide-limit", 20000, "MaxOutstandingMessages of tributary's second StreamingPull case, where the limit does not bind")
	flag.IntVar(&cfg.wideStreams, "wide-streams", 4, "streams (the Go client's NumGoroutines) of tributary's second StreamingPull case; each holds -wide-limit")
	flag.StringVar(&cfg.profileDir, "profile", "", "directory for CPU and allocs profiles of pubsub-gateway and storage-core, taken over -profile-for from the start of each of tributary's wide cases, one file per round (give -messages enough to last that long; go tool pprof merges the rounds' files)")
	flag.DurationVar(&cfg.profileFor, "profile-for", 3*time.Second, "length of the -profile window")
	flag.Parse()
	if cfg.pullMessages <= 0 {
		cfg.pullMessages = cfg.messages
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "pubsubbench:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	want := map[string]bool{}
	for _, t := range strings.Split(cfg.targets, ",") {
		want[strings.TrimSpace(t)] = true
	}
	var targets []target
	if want["tributary"] {
		if err := testenv.Check(ctx); err != nil {
			return err
		}
		defer stack.RemoveBinaries()
		fmt.Printf("starting tributary (fsync=%s)...\n", cfg.fsync)
		s, err := stack.Start(ctx, stack.Options{Fsync: cfg.fsync, LogLevel: "warn", PubSubGateways: 1})
		if err != nil {
			return err
		}
		defer func() {
			if err := s.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "close stack:", err)
			}
		}()
		targets = append(targets, target{name: "tributary", addr: s.PubSubAddrs[0], pids: []int{s.PubSub[0].Pid(), s.Storage.Pid()},
			httpAddrs: []string{s.PubSub[0].HTTPAddr, s.Storage.HTTPAddr}})
	}
	if want["pstest"] {
		targets = append(targets, target{name: "pstest", fresh: func() (string, func()) {
			srv := pstest.NewServer()
			return srv.Addr, func() { _ = srv.Close() }
		}})
	}
	if want["emulator"] {
		// Started when its turn comes: the JVM's start and warm-up took CPU from the
		// cases before it (our latency p99 rose from about 17 to 311 ms).
		targets = append(targets, target{name: "emulator", start: startEmulator})
	}
	results := map[string]result{}
	for i, tg := range targets {
		if tg.start != nil {
			addr, stop, err := tg.start(ctx)
			if err != nil {
				fmt.Printf("%s: not measured (%v)\n", tg.name, err)
				results[tg.name] = result{err: err}
				continue
			}
			defer stop()
			tg.addr = addr
			targets[i] = tg
		}
		fmt.Printf("%s: StreamingPull %d × %d B...\n", tg.name, cfg.messages, cfg.bytes)
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		one, done := tg.forCase()
		r := streaming(cctx, cfg, one, 0)
		done()
		if r.err == nil && tg.name == "tributary" {
			fmt.Printf("%s: StreamingPull %d × %d B, MaxOutstandingMessages %d on %d streams...\n", tg.name, cfg.messages, cfg.bytes, cfg.wideLimit, cfg.wideStreams)
			w := streaming(cctx, cfg, tg, cfg.wideLimit)
			if r.err = w.err; w.err == nil {
				r.wideRates = w.rates
				r.addWide(w)
			}
		}
		if r.err == nil {
			fmt.Printf("%s: latency at %d msgs/s for %v...\n", tg.name, cfg.rate, cfg.latencyDur)
			one, done = tg.forCase()
			r.p50, r.p99, r.latErr = latency(cctx, cfg, one)
			done()
			fmt.Printf("%s: Pull+Acknowledge %d...\n", tg.name, cfg.pullMessages)
			r.err = r.pullRound(cctx, cfg, tg)
		}
		cancel()
		results[tg.name] = r
	}
	// The machine's speed drifts (pstest's Pull+Acknowledge rate was seen to vary 2x
	// between runs), so the two cases the bar compares run again, in turn.
	for round := 2; round <= cfg.rounds; round++ {
		for _, tg := range targets {
			r := results[tg.name]
			if r.err != nil || (tg.name != "tributary" && tg.name != "pstest") {
				continue
			}
			fmt.Printf("round %d: %s...\n", round, tg.name)
			cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
			if tg.name == "tributary" {
				one, done := tg.forCase()
				s := streaming(cctx, cfg, one, 0)
				done()
				if r.err = s.err; s.err == nil {
					r.addStreaming(s)
					r.partial = r.partial || s.partial
					w := streaming(cctx, cfg, tg, cfg.wideLimit)
					if r.err = w.err; w.err == nil {
						r.wideRates = append(r.wideRates, w.rates...)
						r.addWide(w)
					}
				}
			} else {
				r.err = r.pullRound(cctx, cfg, tg)
			}
			cancel()
			results[tg.name] = r
		}
	}
	fmt.Printf("\n%-10s %16s %16s %14s %10s %10s %16s\n", "target", "StreamingPull/s", fmt.Sprintf("SP limit %d/s", cfg.wideLimit), "publish/s", "p50", "p99", "Pull+Ack msgs/s")
	for _, tg := range targets {
		r := results[tg.name]
		if r.err != nil {
			fmt.Printf("%-10s failed: %v (received %d)\n", tg.name, r.err, r.n)
			continue
		}
		mark := ""
		if r.partial {
			mark = fmt.Sprintf(" (%d in %v)", r.n, cfg.streamTimeout)
		}
		lat := fmt.Sprintf("%10v %10v", r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))
		if r.latErr != nil {
			lat = fmt.Sprintf("%21s", "latency: "+r.latErr.Error())
		}
		wide := "-"
		if len(r.wideRates) > 0 {
			wide = fmt.Sprintf("%.0f", median(r.wideRates))
		}
		fmt.Printf("%-10s %16.0f %16s %14.0f %s %16.0f%s\n", tg.name, median(r.rates), wide,
			float64(cfg.messages)/r.publish.Seconds(), lat, median(r.pullRates), mark)
	}
	fmt.Println("\nRounds (msgs/s):")
	for _, tg := range targets {
		if r := results[tg.name]; r.err == nil {
			wide := ""
			if len(r.wideRates) > 0 {
				wide = fmt.Sprintf("; StreamingPull at MaxOutstandingMessages %d %s", cfg.wideLimit, rateList(r.wideRates))
			}
			fmt.Printf("%-10s StreamingPull %s%s; Pull+Ack %s\n", tg.name, rateList(r.rates), wide, rateList(r.pullRates))
		}
	}
	fmt.Println("\nCPU per message (user+system µs): StreamingPull receive, and the unary Pull+Acknowledge case")
	for _, tg := range targets {
		r := results[tg.name]
		if r.err != nil || len(r.cpu) == 0 {
			continue
		}
		var parts []string
		for i, name := range tg.cpuNames() {
			parts = append(parts, fmt.Sprintf("%.1f %s", perMessage(r.cpu[i], r.cpuN), name))
		}
		fmt.Printf("%-10s %s; Pull+Ack %.1f this process\n", tg.name, strings.Join(parts, ", "), perMessage(r.pullCPU, r.pullN))
		if len(r.wideCPU) > 0 {
			parts = parts[:0]
			for i, name := range tg.cpuNames() {
				parts = append(parts, fmt.Sprintf("%.1f %s", perMessage(r.wideCPU[i], r.wideCPUN), name))
			}
			fmt.Printf("%-10s at MaxOutstandingMessages %d on %d streams: %s\n", "", cfg.wideLimit, cfg.wideStreams, strings.Join(parts, ", "))
		}
	}
	ours, ok1 := results["tributary"]
	ps, ok2 := results["pstest"]
	if ok1 && ours.err == nil {
		ceiling := float64(clientDefaultLimit) / clientAckInterval.Seconds()
		fmt.Printf("\n(a) tributary StreamingPull at the Go client's defaults (median of %d rounds): %.0f msgs/s = %.2f × the ceiling %.0f msgs/s (MaxOutstandingMessages %d / ack interval %v, one stream) (bar: ≥ 0.9 ×)\n",
			len(ours.rates), median(ours.rates), median(ours.rates)/ceiling, ceiling, clientDefaultLimit, clientAckInterval)
		fmt.Printf("    tributary latency p99 %v at %d msgs/s (bar: < 100ms)\n", ours.p99.Round(time.Millisecond), cfg.rate)
	}
	if ok1 && ok2 && ours.err == nil && ps.err == nil {
		fmt.Printf("(b) tributary StreamingPull at MaxOutstandingMessages %d on %d streams (ceiling %.0f msgs/s: it does not bind) / pstest unary Pull+Ack (medians of %d and %d rounds): %.0f / %.0f = %.2fx (bar: ≥ 3x)\n",
			cfg.wideLimit, cfg.wideStreams, float64(cfg.wideLimit*max(cfg.wideStreams, 1))/clientAckInterval.Seconds(), len(ours.wideRates), len(ps.pullRates),
			median(ours.wideRates), median(ps.pullRates), median(ours.wideRates)/median(ps.pullRates))
	}
	return nil
}

// pullRound runs the unary Pull+Acknowledge case once on tg (a fresh server when tg
// has one) and adds its rate and CPU time to r.
func (r *result) pullRound(ctx context.Context, cfg config, tg target) error {
	one, done := tg.forCase()
	defer done()
	rate, cpu, err := unaryPull(ctx, cfg, one)
	if err != nil {
		return err
	}
	r.pullRates = append(r.pullRates, rate)
	r.pullCPU += cpu
	r.pullN += cfg.pullMessages
	return nil
}

// addStreaming adds a later round's StreamingPull rate and CPU times to r.
func (r *result) addStreaming(s result) {
	r.rates = append(r.rates, s.rates...)
	for i := range r.cpu {
		r.cpu[i] += s.cpu[i]
	}
	r.cpuN += s.cpuN
}

// addWide adds the CPU time of a receive at -wide-limit to r.
func (r *result) addWide(w result) {
	if r.wideCPU == nil {
		r.wideCPU = make([]time.Duration, len(w.cpu))
	}
	for i := range r.wideCPU {
		r.wideCPU[i] += w.cpu[i]
	}
	r.wideCPUN += w.cpuN
}

// profiles counts the -profile windows taken (each round's wide case has one).
var profiles atomic.Int32

// profile starts taking a CPU and an allocs profile (over cfg.profileFor) of each of
// tg's processes into cfg.profileDir and returns a wait for them.
func profile(cfg config, tg target) func() {
	if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return nil
	}
	names := tg.cpuNames()
	round := profiles.Add(1)
	var wg sync.WaitGroup
	sec := max(1, int(cfg.profileFor.Seconds()))
	for i, addr := range tg.httpAddrs {
		for _, kind := range []string{"profile", "allocs"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := fmt.Sprintf("%s/%s.%s.%d.pb.gz", cfg.profileDir, names[i], kind, round)
				if err := stack.FetchProfile(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, sec), path); err != nil {
					fmt.Fprintln(os.Stderr, "profile:", err)
				}
			}()
		}
	}
	return wg.Wait
}

// median returns the median of xs (the mean of the middle two for an even count), or 0.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// rateList formats msgs/s figures, one per round.
func rateList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// cpuTimes returns stack.CPUTime of each pid.
func cpuTimes(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		out[i] = stack.CPUTime(p)
	}
	return out
}

// perMessage is d per message of n, in µs.
func perMessage(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

func client(ctx context.Context, addr string) (*pubsub.Client, error) {
	return pubsub.NewClient(ctx, project,
		option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
}

func newID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%x", prefix, b)
}

func setup(ctx context.Context, c *pubsub.Client) (topic, sub string, err error) {
	topic, sub = newID("bench"), newID("bench-sub")
	if _, err = c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/" + project + "/topics/" + topic}); err != nil {
		return "", "", fmt.Errorf("create topic: %w", err)
	}
	if _, err = c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/" + project + "/subscriptions/" + sub, Topic: "projects/" + project + "/topics/" + topic,
	}); err != nil {
		return "", "", fmt.Errorf("create subscription: %w", err)
	}
	return topic, sub, nil
}

// publishN publishes n messages of size bytes with indexes from0.. (the first 8 bytes:
// publish time in ns, the next 8: the index) and waits for every result.
func publishN(ctx context.Context, p *pubsub.Publisher, n, size int, pace time.Duration, from0 int) error {
	res := make([]*pubsub.PublishResult, n)
	next := time.Now()
	for i := range n {
		if pace > 0 {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(pace)
		}
		data := make([]byte, max(size, 16))
		binary.BigEndian.PutUint64(data, uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(data[8:], uint64(from0+i))
		res[i] = p.Publish(ctx, &pubsub.Message{Data: data})
	}
	for _, r := range res {
		if _, err := r.Get(ctx); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// receiveN runs Receive until n distinct messages (indexes 0..n-1, see publishN)
// arrived, acking each, or ctx ends, and returns how many arrived, when the last did,
// and their publish→receive latencies; first, when set, is closed when the first
// message of any index arrived. The callback takes no lock: the client runs it
// on many goroutines at once, and a shared mutex and map in it cost the client about a
// tenth of its CPU, which the unary Pull case it is compared with does not pay.
func receiveN(ctx context.Context, c *pubsub.Client, sub string, n, limit, streams int, first chan<- struct{}) (int, time.Time, []time.Duration, error) {
	var (
		seen      = make([]atomic.Bool, n)
		lat       = make([]time.Duration, n)
		count     atomic.Int64
		last      atomic.Int64 // UnixNano of the latest first arrival
		firstOnce sync.Once
	)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	s := c.Subscriber(sub)
	if limit > 0 {
		s.ReceiveSettings.MaxOutstandingMessages = limit
	}
	if streams > 0 {
		s.ReceiveSettings.NumGoroutines = streams
	}
	err := s.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		now := time.Now()
		m.Ack()
		if first != nil {
			firstOnce.Do(func() { close(first) })
		}
		if len(m.Data) < 16 {
			return
		}
		sent := int64(binary.BigEndian.Uint64(m.Data))
		seq := binary.BigEndian.Uint64(m.Data[8:])
		if seq >= uint64(n) || !seen[seq].CompareAndSwap(false, true) {
			return
		}
		lat[seq] = now.Sub(time.Unix(0, sent))
		storeMax(&last, now.UnixNano())
		if count.Add(1) == int64(n) {
			stop()
		}
	})
	got := int(count.Load())
	if got < n && err == nil {
		err = ctx.Err()
	}
	arrived := make([]time.Duration, 0, got)
	for i := range seen {
		if seen[i].Load() {
			arrived = append(arrived, lat[i])
		}
	}
	return got, time.Unix(0, last.Load()), arrived, err
}

// streaming publishes cfg.messages, then takes them with Receive (StreamingPull) at
// MaxOutstandingMessages limit (0: the client's default): the rate is messages over the
// time from Receive's start to the last message. A target that does not finish within
// cfg.streamTimeout reports the rate of what it delivered.
func streaming(ctx context.Context, cfg config, tg target, limit int) result {
	c, err := client(ctx, tg.addr)
	if err != nil {
		return result{err: err}
	}
	defer func() { _ = c.Close() }()
	topic, sub, err := setup(ctx, c)
	if err != nil {
		return result{err: err}
	}
	p := c.Publisher(topic)
	pstart := time.Now()
	err = publishN(ctx, p, cfg.messages, cfg.bytes, 0, 0)
	p.Stop()
	if err != nil {
		return result{err: err}
	}
	r := result{publish: time.Since(pstart)}
	sctx, cancel := context.WithTimeout(ctx, cfg.streamTimeout)
	defer cancel()
	pids := append(append([]int(nil), tg.pids...), os.Getpid())
	cpu0 := cpuTimes(pids)
	start := time.Now()
	streams := 0
	if limit == cfg.wideLimit {
		streams = cfg.wideStreams
	}
	var profiled func()
	if limit == cfg.wideLimit && cfg.profileDir != "" && len(tg.httpAddrs) > 0 {
		profiled = profile(cfg, tg)
	}
	n, last, _, err := receiveN(sctx, c, sub, cfg.messages, limit, streams, nil)
	if profiled != nil {
		profiled()
	}
	for i, t := range cpuTimes(pids) {
		r.cpu = append(r.cpu, t-cpu0[i])
	}
	r.n = n
	if n == 0 {
		r.err = fmt.Errorf("nothing received: %v", err)
		return r
	}
	r.elapsed = last.Sub(start)
	r.partial = n < cfg.messages
	r.rates = []float64{float64(n) / r.elapsed.Seconds()}
	r.cpuN = n
	return r
}

// latency publishes at cfg.rate messages/s for cfg.latencyDur while Receive runs and
// returns the publish→receive p50 and p99.
func latency(ctx context.Context, cfg config, tg target) (p50, p99 time.Duration, err error) {
	c, err := client(ctx, tg.addr)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = c.Close() }()
	topic, sub, err := setup(ctx, c)
	if err != nil {
		return 0, 0, err
	}
	n := int(float64(cfg.rate) * cfg.latencyDur.Seconds())
	lctx, cancel := context.WithTimeout(ctx, cfg.latencyDur+cfg.streamTimeout)
	defer cancel()
	first := make(chan struct{})
	type got struct {
		n   int
		lat []time.Duration
		err error
	}
	done := make(chan got, 1)
	go func() {
		k, _, lat, err := receiveN(lctx, c, sub, n, 0, 0, first)
		done <- got{k, lat, err}
	}()
	// The measured messages go out once the subscriber receives: a warm-up message
	// (index n, not counted) must have arrived first, so the latencies are those of a
	// running stream, not of its opening, which the first messages waited for.
	p := c.Publisher(topic)
	perr := publishN(lctx, p, 1, cfg.bytes, 0, n)
	if perr == nil {
		select {
		case <-first:
			perr = publishN(lctx, p, n, cfg.bytes, time.Second/time.Duration(cfg.rate), 0)
		case <-lctx.Done():
			perr = fmt.Errorf("warm-up message not received: %w", lctx.Err())
		}
	}
	p.Stop()
	g := <-done
	if perr != nil {
		return 0, 0, perr
	}
	if len(g.lat) == 0 {
		return 0, 0, fmt.Errorf("nothing received: %v", g.err)
	}
	sort.Slice(g.lat, func(i, j int) bool { return g.lat[i] < g.lat[j] })
	if g.n < n {
		err = fmt.Errorf("received %d of %d", g.n, n)
	}
	return g.lat[len(g.lat)/2], g.lat[len(g.lat)*99/100], err
}

// unaryPull publishes cfg.pullMessages, then drains them with Pull (1000 at a time) and
// Acknowledge, and returns messages/s of the drain and the CPU time this process used in it.
func unaryPull(ctx context.Context, cfg config, tg target) (float64, time.Duration, error) {
	c, err := client(ctx, tg.addr)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = c.Close() }()
	topic, sub, err := setup(ctx, c)
	if err != nil {
		return 0, 0, err
	}
	p := c.Publisher(topic)
	res := make([]*pubsub.PublishResult, cfg.pullMessages)
	for i := range res {
		res[i] = p.Publish(ctx, &pubsub.Message{Data: make([]byte, cfg.bytes)})
	}
	for _, r := range res {
		if _, err := r.Get(ctx); err != nil {
			p.Stop()
			return 0, 0, fmt.Errorf("publish: %w", err)
		}
	}
	p.Stop()
	name := "projects/" + project + "/subscriptions/" + sub
	cpu0 := stack.CPUTime(os.Getpid())
	start := time.Now()
	got := 0
	for got < cfg.pullMessages {
		pr, err := c.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: name, MaxMessages: 1000})
		if err != nil {
			return 0, 0, fmt.Errorf("pull after %d: %w", got, err)
		}
		ids := make([]string, 0, len(pr.GetReceivedMessages()))
		for _, m := range pr.GetReceivedMessages() {
			ids = append(ids, m.GetAckId())
		}
		if len(ids) == 0 {
			continue
		}
		if err := c.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: name, AckIds: ids}); err != nil {
			return 0, 0, fmt.Errorf("acknowledge: %w", err)
		}
		got += len(ids)
	}
	return float64(got) / time.Since(start).Seconds(), stack.CPUTime(os.Getpid()) - cpu0, nil
}

// storeMax sets a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		t := a.Load()
		if t >= v || a.CompareAndSwap(t, v) {
			return
		}
	}
}

// startEmulator starts `gcloud beta emulators pubsub start` on a free port and waits
// until it accepts connections.
func startEmulator(ctx context.Context) (string, func(), error) {
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(gcloud, "beta", "emulators", "pubsub", "start", "--host-port="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stopEmu := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := client(ctx, addr)
		if err == nil {
			_, err = c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + project + "/topics/probe"})
			_ = c.Close()
			if err != nil && strings.Contains(err.Error(), "NotFound") || err != nil && strings.Contains(err.Error(), "not found") {
				return addr, stopEmu, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stopEmu()
			return "", nil, fmt.Errorf("emulator not ready on %s: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
