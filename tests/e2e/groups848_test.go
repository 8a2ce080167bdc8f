package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// ownership records, from a member's own callbacks, when it held each partition.
type ownership struct {
	mu    sync.Mutex
	spans []ownSpan
	open  map[string]map[int32]int // member -> partition -> index in spans
}

type ownSpan struct {
	member    string
	partition int32
	from, to  time.Time // to is zero while held
}

func newOwnership() *ownership { return &ownership{open: map[string]map[int32]int{}} }

func (o *ownership) assigned(member string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if o.open[member] == nil {
		o.open[member] = map[int32]int{}
	}
	for _, p := range ps {
		if _, ok := o.open[member][p]; ok {
			continue
		}
		o.open[member][p] = len(o.spans)
		o.spans = append(o.spans, ownSpan{member: member, partition: p, from: now})
	}
}

func (o *ownership) released(member string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for _, p := range ps {
		if i, ok := o.open[member][p]; ok {
			o.spans[i].to = now
			delete(o.open[member], p)
		}
	}
}

// releaseAll ends every span of member (a killed member stops owning at once).
func (o *ownership) releaseAll(member string) {
	o.mu.Lock()
	var ps []int32
	for p := range o.open[member] {
		ps = append(ps, p)
	}
	o.mu.Unlock()
	o.released(member, ps)
}

// owners returns the current owners of each partition.
func (o *ownership) owners() map[int32][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[int32][]string{}
	for m, ps := range o.open {
		for p := range ps {
			out[p] = append(out[p], m)
		}
	}
	return out
}

// overlaps lists every pair of spans of one partition held by two members at once.
func (o *ownership) overlaps() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	far := time.Now().Add(time.Hour)
	var out []string
	for i, a := range o.spans {
		for _, b := range o.spans[i+1:] {
			if a.partition != b.partition || a.member == b.member {
				continue
			}
			aTo, bTo := a.to, b.to
			if aTo.IsZero() {
				aTo = far
			}
			if bTo.IsZero() {
				bTo = far
			}
			if a.from.Before(bTo) && b.from.Before(aTo) {
				out = append(out, fmt.Sprintf("partition %d: %s [%s, %s) and %s [%s, %s)", a.partition,
					a.member, a.from.Format("15:04:05.000"), a.to.Format("15:04:05.000"),
					b.member, b.from.Format("15:04:05.000"), b.to.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// killableDialer dials normally until killed; then every connection it made is
// closed and new dials fail, so to the cluster its client is a dead process.
type killableDialer struct {
	mu     sync.Mutex
	dead   bool
	conns  []net.Conn
	dialer net.Dialer
}

func (d *killableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errors.New("killed")
	}
	c, err := d.dialer.DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// Test848GroupKillAndAdd runs a KIP-848 group (ConsumerGroupHeartbeat, server-side
// uniform assignor) of four kgo consumers over 24 partitions while records keep
// arriving: one member is killed (its connections cut, no leave), and after its
// session times out a fifth member joins. From the members' own callbacks, no
// partition is ever owned by two members at once; the group ends Stable with 6
// partitions per member; committed offsets (polled throughout) never move back; and
// every record is consumed.
func Test848GroupKillAndAdd(t *testing.T) {
	testenv.Require(t)
	s, err := stack.Start(ctxT(t, 2*time.Minute), stack.Options{CoordinatorFlags: []string{"--group-consumer-session-timeout=8s",
		"--group-consumer-heartbeat-interval=1s"}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", s.LogTails(60))
		}
		_ = s.Close()
	})
	addrs := s.KafkaAddrs
	admCl := newClient(t, addrs)
	adm := kadm.NewClient(admCl)
	topic, group := topicName("g848"), topicName("grp848")
	const parts = 24
	createTopic(t, adm, topic, parts, nil)

	prod := newClient(t, addrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	var produced atomic.Int64
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; ; i++ {
			select {
			case <-stopProd:
				return
			default:
			}
			var batch []*kgo.Record
			for j := range parts {
				batch = append(batch, &kgo.Record{Key: fmt.Appendf(nil, "k%d-%d", i, j), Value: []byte("v")})
			}
			if err := prod.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			produced.Add(int64(len(batch)))
			time.Sleep(20 * time.Millisecond) // a steady trickle of records
		}
	}()

	own := newOwnership()
	var seenMu sync.Mutex
	seen := map[string]bool{}
	type consumer struct {
		name   string
		cl     *kgo.Client
		dialer *killableDialer
		done   chan struct{}
	}
	start := func(name string) *consumer {
		c := &consumer{name: name, dialer: &killableDialer{}, done: make(chan struct{})}
		toPs := func(m map[string][]int32) []int32 { return m[topic] }
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.Dialer(c.dialer.dial),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.AutoCommitInterval(500*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.assigned(name, toPs(m)) }),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
				_ = cl.CommitUncommittedOffsets(ctx)
				own.released(name, toPs(m))
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.released(name, toPs(m)) }),
		)
		if err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
		c.cl = cl
		go func() {
			defer close(c.done)
			for {
				fs := cl.PollFetches(context.Background())
				if fs.IsClientClosed() {
					return
				}
				fs.EachRecord(func(r *kgo.Record) {
					seenMu.Lock()
					seen[string(r.Key)] = true
					seenMu.Unlock()
				})
			}
		}()
		return c
	}
	// Committed offsets, polled: none may ever move back.
	var offMu sync.Mutex
	committed := map[int32]int64{}
	var backwards []string
	stopPoll := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(200 * time.Millisecond): // poll interval
			}
			os, err := adm.FetchOffsets(context.Background(), group)
			if err != nil {
				continue
			}
			offMu.Lock()
			os.Each(func(o kadm.OffsetResponse) {
				if o.Topic != topic || o.Err != nil {
					return
				}
				if prev, ok := committed[o.Partition]; ok && o.At < prev {
					backwards = append(backwards, fmt.Sprintf("partition %d: %d after %d", o.Partition, o.At, prev))
				}
				committed[o.Partition] = o.At
			})
			offMu.Unlock()
		}
	}()

	describe := func() *kmsg.ConsumerGroupDescribeResponseGroup {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctxT(t, 10*time.Second), admCl)
		if err != nil || len(resp.Groups) != 1 {
			return nil
		}
		return &resp.Groups[0]
	}
	// waitBalanced waits until members each own parts/n partitions by their own
	// callbacks, every partition has one owner, and ConsumerGroupDescribe says Stable.
	waitBalanced := func(members []string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var last string
		for time.Now().Before(deadline) {
			owners := own.owners()
			per := map[string]int{}
			ok := len(owners) == parts
			for p, ms := range owners {
				if len(ms) != 1 {
					ok = false
					last = fmt.Sprintf("partition %d owned by %v", p, ms)
				}
				per[ms[0]]++
			}
			for _, m := range members {
				if per[m] != parts/len(members) {
					ok = false
				}
			}
			g := describe()
			if g == nil || g.State != "Stable" || len(g.Members) != len(members) {
				ok = false
			}
			if ok {
				for _, m := range g.Members {
					if m.MemberEpoch != g.AssignmentEpoch {
						t.Errorf("member %s at epoch %d in a Stable group at assignment epoch %d", m.MemberID, m.MemberEpoch, g.AssignmentEpoch)
					}
				}
				return
			}
			if g != nil {
				last = fmt.Sprintf("%s; owners per member %v; group %s with %d members", last, per, g.State, len(g.Members))
			}
			time.Sleep(200 * time.Millisecond) // poll interval
		}
		t.Fatalf("group not balanced over %v: %s", members, last)
	}

	cs := []*consumer{start("c0"), start("c1"), start("c2"), start("c3")}
	waitBalanced([]string{"c0", "c1", "c2", "c3"})
	if g := describe(); g == nil || g.AssignorName != "uniform" {
		t.Errorf("assignor: %+v", g)
	}

	// Kill c0: its connections drop and it never leaves; its partitions move once
	// its session (8 s) times out.
	cs[0].dialer.kill()
	own.releaseAll("c0")
	killedAt := time.Now()
	waitBalanced([]string{"c1", "c2", "c3"})
	if d := time.Since(killedAt); d < 6*time.Second {
		t.Errorf("killed member's partitions moved after %s, before its 8 s session could end", d)
	}
	go cs[0].cl.Close()

	cs = append(cs, start("c4"))
	waitBalanced([]string{"c1", "c2", "c3", "c4"})

	close(stopProd)
	<-prodDone
	want := produced.Load()
	deadline := time.Now().Add(60 * time.Second)
	for {
		seenMu.Lock()
		n := len(seen)
		seenMu.Unlock()
		if int64(n) >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d distinct records of %d", n, want)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	for _, c := range cs[1:] {
		c.cl.Close()
		<-c.done
	}
	close(stopPoll)
	<-pollDone
	if ov := own.overlaps(); len(ov) > 0 {
		sort.Strings(ov)
		t.Errorf("%d partitions owned by two members at once:\n%s", len(ov), strings.Join(ov, "\n"))
	}
	offMu.Lock()
	defer offMu.Unlock()
	if len(backwards) > 0 {
		t.Errorf("committed offsets moved back: %v", backwards)
	}
	if len(committed) != parts {
		t.Errorf("committed offsets seen for %d partitions, want %d", len(committed), parts)
	}
	t.Logf("%d records over %d partitions; ownership spans %d", want, parts, len(own.spans))
}
