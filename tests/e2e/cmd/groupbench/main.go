// Command groupbench measures Kafka consumer groups against a Tributary stack started
// from the real binaries and against franz-go's in-memory kfake, side by side in one run:
//
//   - group consume throughput: three kgo members (cooperative-sticky) of one group read
//     a 6-partition topic holding -records records, from the first join to the last
//     record;
//   - rebalance time: while the three members consume a steady produce stream, one
//     member is killed (its connections are cut, as a crash would: no LeaveGroup); the
//     time until every one of its partitions is consumed again by a survivor. This is
//     dominated by the session timeout (-session, Kafka's minimum 6 s by default), so it
//     is printed beside it.
//
// Run from tests/e2e: go run ./cmd/groupbench [-records 200000] [-session 6s]
// It needs the test Postgres and NATS (TRIBUTARY_TEST_POSTGRES_URL,
// TRIBUTARY_TEST_NATS_URL); TRIBUTARY_BIN_DIR reuses prebuilt binaries.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

type config struct {
	records     int
	recordBytes int
	session     time.Duration
	targets     string
}

// target is a Kafka endpoint under test; fresh returns addresses for a new case.
type target struct {
	name  string
	fresh func() ([]string, func(), error)
}

type result struct {
	consumeRate float64       // records/s, first join to last record
	joined      time.Duration // start to first record
	rebalance   time.Duration // kill to every orphaned partition consumed again
}

func main() {
	var cfg config
	flag.IntVar(&cfg.records, "records", 200000, "records in the throughput topic")
	flag.IntVar(&cfg.recordBytes, "record-bytes", 256, "value size in bytes")
	flag.DurationVar(&cfg.session, "session", 6*time.Second, "member session timeout")
	flag.StringVar(&cfg.targets, "targets", "tributary,kfake", "targets (tributary, kfake), comma separated")
	flag.Parse()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "groupbench:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var targets []target
	for _, name := range splitComma(cfg.targets) {
		switch name {
		case "tributary":
			if err := testenv.Check(ctx); err != nil {
				return err
			}
			defer stack.RemoveBinaries()
			fmt.Println("starting tributary...")
			s, err := stack.Start(ctx, stack.Options{LogLevel: "warn"})
			if err != nil {
				return err
			}
			defer func() {
				if err := s.Close(); err != nil {
					fmt.Fprintln(os.Stderr, "close stack:", err)
				}
			}()
			targets = append(targets, target{name: name, fresh: func() ([]string, func(), error) { return s.KafkaAddrs, func() {}, nil }})
		case "kfake":
			targets = append(targets, target{name: name, fresh: func() ([]string, func(), error) {
				c, err := kfake.NewCluster(kfake.NumBrokers(1))
				if err != nil {
					return nil, nil, err
				}
				return c.ListenAddrs(), c.Close, nil
			}})
		default:
			return fmt.Errorf("unknown target %q", name)
		}
	}
	if len(targets) == 0 {
		return errors.New("no target")
	}
	results := make([]result, len(targets))
	for i, tg := range targets {
		r, err := measure(ctx, cfg, tg)
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
		results[i] = r
		fmt.Printf("  %-9s consume %9.0f rec/s (first record after %v), rebalance after a kill %v\n",
			tg.name, r.consumeRate, r.joined.Round(time.Millisecond), r.rebalance.Round(time.Millisecond))
	}
	fmt.Printf("\nKafka consumer-group benchmark: 3 kgo members, cooperative-sticky, 6 partitions, %d B records, session timeout %v\n", cfg.recordBytes, cfg.session)
	fmt.Printf("%-34s", "case")
	for _, tg := range targets {
		fmt.Printf(" %14s", tg.name)
	}
	fmt.Println()
	fmt.Printf("%-34s", "group consume (records/s)")
	for _, r := range results {
		fmt.Printf(" %14.0f", r.consumeRate)
	}
	fmt.Println()
	fmt.Printf("%-34s", "rebalance after member kill")
	for _, r := range results {
		fmt.Printf(" %14v", r.rebalance.Round(time.Millisecond))
	}
	fmt.Println()
	return nil
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

var seq atomic.Int64

func newTopic(ctx context.Context, addrs []string) (string, error) {
	name := fmt.Sprintf("gbench-%d-%d", time.Now().UnixNano(), seq.Add(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 6, -1, nil, name); err != nil {
		return "", fmt.Errorf("create topic: %w", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil && md.Topics[name].Err == nil && len(md.Topics[name].Partitions) == 6 {
			return name, nil
		}
		if time.Now().After(deadline) {
			return "", errors.New("topic not ready")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

func produce(ctx context.Context, addrs []string, topic string, n, size int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	val := make([]byte, size)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i := range n {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// killableDialer dials normally until kill, which closes every connection it made and
// refuses new ones: to the cluster the member has crashed.
type killableDialer struct {
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func (d *killableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.killed {
		return nil, errors.New("member killed")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.killed = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// member is one kgo group member; it reports every record's partition.
type member struct {
	cl     *kgo.Client
	dialer *killableDialer
	cancel context.CancelFunc
	done   chan struct{}
	parts  sync.Map // partition -> true, partitions it consumed from

	mu    sync.Mutex
	owned map[int32]bool // current assignment (cooperative: grows and shrinks)
}

func (m *member) assigned(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, parts := range ps {
		for _, p := range parts {
			m.owned[p] = true
		}
	}
}

func (m *member) revoked(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, parts := range ps {
		for _, p := range parts {
			delete(m.owned, p)
		}
	}
}

func (m *member) ownedNow() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int32
	for p := range m.owned {
		out = append(out, p)
	}
	return out
}

func startMember(addrs []string, group, topic string, session time.Duration, onRecord func(m *member, r *kgo.Record)) (*member, error) {
	m := &member{dialer: &killableDialer{}, done: make(chan struct{}), owned: map[int32]bool{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(session), kgo.HeartbeatInterval(session/6),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Dialer(m.dialer.dial),
		kgo.OnPartitionsAssigned(m.assigned), kgo.OnPartitionsRevoked(m.revoked), kgo.OnPartitionsLost(m.revoked))
	if err != nil {
		return nil, err
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				m.parts.Store(r.Partition, true)
				onRecord(m, r)
			})
		}
	}()
	return m, nil
}

func (m *member) stop() {
	m.cancel()
	<-m.done
	m.cl.Close()
}

func measure(ctx context.Context, cfg config, tg target) (result, error) {
	var res result
	addrs, closeTarget, err := tg.fresh()
	if err != nil {
		return res, err
	}
	defer closeTarget()

	// Throughput: the topic is full before the members start.
	topic, err := newTopic(ctx, addrs)
	if err != nil {
		return res, err
	}
	if err := produce(ctx, addrs, topic, cfg.records, cfg.recordBytes); err != nil {
		return res, fmt.Errorf("produce: %w", err)
	}
	var consumed atomic.Int64
	var first atomic.Int64
	allDone := make(chan struct{})
	var once sync.Once
	start := time.Now()
	group := fmt.Sprintf("gbench-group-%d", seq.Add(1))
	var members []*member
	for range 3 {
		m, err := startMember(addrs, group, topic, cfg.session, func(_ *member, _ *kgo.Record) {
			first.CompareAndSwap(0, time.Since(start).Nanoseconds())
			if consumed.Add(1) == int64(cfg.records) {
				once.Do(func() { close(allDone) })
			}
		})
		if err != nil {
			return res, err
		}
		members = append(members, m)
	}
	select {
	case <-allDone:
	case <-time.After(5 * time.Minute):
		return res, fmt.Errorf("consumed %d of %d records in 5 minutes", consumed.Load(), cfg.records)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	elapsed := time.Since(start)
	res.joined = time.Duration(first.Load())
	res.consumeRate = float64(cfg.records) / (elapsed - res.joined).Seconds()
	for _, m := range members {
		m.stop()
	}

	// Rebalance: a steady stream, then one member is killed.
	topic, err = newTopic(ctx, addrs)
	if err != nil {
		return res, err
	}
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return res, err
	}
	defer pcl.Close()
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for pctx.Err() == nil {
			<-t.C
			pcl.Produce(pctx, &kgo.Record{Value: []byte("x")}, nil)
		}
	}()
	group = fmt.Sprintf("gbench-group-%d", seq.Add(1))
	var (
		mu       sync.Mutex
		victim   *member
		orphans  map[int32]bool
		killedAt time.Time
		regained = make(chan struct{})
	)
	members = members[:0]
	for range 3 {
		m, err := startMember(addrs, group, topic, cfg.session, func(m *member, r *kgo.Record) {
			mu.Lock()
			defer mu.Unlock()
			if orphans == nil || m == victim || !orphans[r.Partition] {
				return
			}
			delete(orphans, r.Partition)
			if len(orphans) == 0 {
				close(regained)
			}
		})
		if err != nil {
			return res, err
		}
		members = append(members, m)
	}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	// Wait until all three consume (every partition seen by some member).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := 0
		for _, m := range members {
			m.parts.Range(func(_, _ any) bool { n++; return true })
		}
		if n >= 6 && countParts(members[0]) > 0 && countParts(members[1]) > 0 && countParts(members[2]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return res, errors.New("members did not all start consuming")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	// The victim's current partitions: those it owns now.
	mu.Lock()
	victim = members[2]
	orphans = map[int32]bool{}
	for _, p := range victim.ownedNow() {
		orphans[p] = true
	}
	if len(orphans) == 0 {
		mu.Unlock()
		return res, errors.New("the member to kill owns no partition")
	}
	killedAt = time.Now()
	victim.dialer.kill()
	mu.Unlock()
	select {
	case <-regained:
	case <-time.After(2 * time.Minute):
		return res, errors.New("orphaned partitions not consumed again within 2 minutes")
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.rebalance = time.Since(killedAt)
	return res, nil
}

func countParts(m *member) int {
	n := 0
	m.parts.Range(func(_, _ any) bool { n++; return true })
	return n
}
