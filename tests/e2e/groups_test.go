package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// groupSessionTimeout is the smallest session timeout the coordinator accepts (Kafka's
// group.min.session.timeout.ms): a killed member's partitions move within it.
const groupSessionTimeout = 6 * time.Second

// keyCounter counts how often each key was processed, overall and per member.
type keyCounter struct {
	mu     sync.Mutex
	total  map[string]int
	member map[string]map[string]int
}

func newKeyCounter() *keyCounter {
	return &keyCounter{total: map[string]int{}, member: map[string]map[string]int{}}
}

func (k *keyCounter) add(member, key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.total[key]++
	if k.member[member] == nil {
		k.member[member] = map[string]int{}
	}
	k.member[member][key]++
}

func (k *keyCounter) distinct() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.total)
}

func (k *keyCounter) of(member string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.member[member])
}

// groupConsumer runs a kgo group member (cooperative-sticky, autocommit) that counts
// every record it gets until ctx ends.
func groupConsumer(t *testing.T, ctx context.Context, wg *sync.WaitGroup, addrs []string, group, topic, name string, counts *keyCounter) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(groupSessionTimeout),
		kgo.HeartbeatInterval(time.Second), kgo.AutoCommitInterval(time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(name))
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cl.Close() // commits what was polled and leaves the group
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) {
				if ctx.Err() == nil {
					t.Logf("%s: fetch error %s/%d: %v", name, topic, p, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) { counts.add(name, string(r.Key)) })
		}
	}()
}

// startKcatMember starts `kcat -G` as a fourth group member and counts the keys it
// prints (unbuffered, one per line). It returns the process, to kill it.
func startKcatMember(t *testing.T, kcat, addr, group, topic string, counts *keyCounter) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(kcat, "-b", addr, "-G", group, topic, "-u", "-q", "-f", "%k\n",
		"-X", "partition.assignment.strategy=cooperative-sticky",
		"-X", fmt.Sprintf("session.timeout.ms=%d", groupSessionTimeout.Milliseconds()),
		"-X", "heartbeat.interval.ms=1000", "-X", "auto.offset.reset=earliest",
		"-X", "auto.commit.interval.ms=1000", "-X", "client.id=kcat-member")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kcat: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				counts.add("kcat", line)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kcat stderr:\n%s", tailString(stderr.String(), 3000))
		}
	})
	return cmd, done
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestGroupSharedConsumeWithKill: three kgo members (cooperative-sticky) and one kcat -G
// member share a 6-partition topic while 100,000 records are produced; the kcat member
// is killed (kill -9) mid-run. Every record is processed; a key processed twice was
// processed by the killed member (its uncommitted tail), never skipped.
func TestGroupSharedConsumeWithKill(t *testing.T) {
	kcat := testenv.RequireBinary(t, "kcat")
	s := stack.StartT(t, stack.Options{})
	topic, group := topicName("grp"), topicName("group")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 6, nil)
	const total = 100000

	counts := newKeyCounter()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 3 {
		groupConsumer(t, ctx, &wg, s.KafkaAddrs, group, topic, fmt.Sprintf("kgo-%d", i), counts)
	}
	kc, kcatDone := startKcatMember(t, kcat, s.KafkaAddrs[0], group, topic, counts)

	prod := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	produced := make(chan error, 1)
	var sent sync.WaitGroup
	go func() {
		var firstErr error
		var mu sync.Mutex
		// Paced over about 10 s, so the kill below lands while records are produced.
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := range total {
			if i%500 == 0 && i > 0 {
				select {
				case <-tick.C:
				case <-ctx.Done():
				}
			}
			sent.Add(1)
			prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%06d", i), Value: []byte("v")}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				sent.Done()
			})
		}
		sent.Wait()
		produced <- firstErr
	}()

	// Kill the kcat member once it has processed records and committed some of them, so
	// the kill leaves both a committed part and an uncommitted tail.
	waitFor(t, 2*time.Minute, "the kcat member to process records", func() bool { return counts.of("kcat") >= 2000 })
	adm := newAdmin(t, s.KafkaAddrs)
	kcatParts := kcatPartitions(t, adm, group)
	base := committedOn(t, adm, group, topic, kcatParts)
	waitFor(t, time.Minute, "the kcat member to commit", func() bool {
		now := committedOn(t, adm, group, topic, kcatParts)
		for p, o := range now {
			if o > base[p] {
				return true
			}
		}
		return false
	})
	if err := kc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill kcat: %v", err)
	}
	<-kcatDone
	killedAt := time.Now()
	processedByKilled := counts.of("kcat")
	t.Logf("killed the kcat member (partitions %v) after it processed %d keys", kcatParts, processedByKilled)
	waitFor(t, time.Minute, "the killed member's partitions to move to the others", func() bool {
		dg, err := adm.DescribeGroups(ctxT(t, 10*time.Second), group)
		if err != nil || dg[group].State != "Stable" || len(dg[group].Members) != 3 {
			return false
		}
		n := 0
		for _, m := range dg[group].Members {
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range c.Topics {
					n += len(tp.Partitions)
				}
			}
		}
		return n == 6
	})
	t.Logf("partitions reassigned %v after the kill (session timeout %v)", time.Since(killedAt).Round(time.Millisecond), groupSessionTimeout)

	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	waitFor(t, 3*time.Minute, "every record to be processed", func() bool { return counts.distinct() == total })
	t.Logf("all %d records processed %v after the kill", total, time.Since(killedAt).Round(time.Millisecond))

	counts.mu.Lock()
	defer counts.mu.Unlock()
	killed := counts.member["kcat"]
	dups := 0
	for k, n := range counts.total {
		if n > 1 {
			dups++
			if killed[k] == 0 {
				t.Errorf("key %s processed %d times, but not by the killed member", k, n)
			}
		}
	}
	for i := range total {
		if counts.total[fmt.Sprintf("k%06d", i)] == 0 {
			t.Fatalf("key k%06d never processed", i)
		}
	}
	for m, ks := range counts.member {
		t.Logf("member %s processed %d keys", m, len(ks))
	}
	t.Logf("%d keys processed twice (all by the killed member, which processed %d)", dups, processedByKilled)
	if dups >= processedByKilled {
		t.Errorf("every key of the killed member was processed again: its commits were lost")
	}
}

// TestGroupResumesAfterKill9: a group commits, every process is killed with SIGKILL and
// started again, and the group resumes exactly at its committed offsets.
func TestGroupResumesAfterKill9(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic, group := topicName("resume"), topicName("group")
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 3, nil)
	prod := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	produceKeyed(t, prod, topic, "first", 3000)
	prod.Close()

	// Consume everything there is, commit, leave.
	cons := newClient(t, s.KafkaAddrs, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(groupSessionTimeout))
	got := 0
	for got < 3000 {
		fs := cons.PollFetches(ctxT(t, 30*time.Second))
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		got += fs.NumRecords()
	}
	if err := cons.CommitUncommittedOffsets(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cons.Close()
	committed, err := adm.FetchOffsets(ctxT(t, 20*time.Second), group)
	if err != nil || committed.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, committed.Error())
	}
	ends := endOffsets(t, adm, topic)
	for p, end := range ends {
		if o, ok := committed.Lookup(topic, p); !ok || o.At != end {
			t.Fatalf("partition %d committed %+v, want %d", p, o, end)
		}
	}

	// The coordinator exports the committed offset and the lag (0: all consumed).
	metrics := scrape(t, s.Coordinator.HTTPAddr)
	for p, end := range ends {
		labels := fmt.Sprintf(`{group=%q,partition="%d",topic=%q}`, group, p, topic)
		if !strings.Contains(metrics, "tributary_group_committed_offset"+labels+" "+fmt.Sprint(end)) ||
			!strings.Contains(metrics, "tributary_group_lag"+labels+" 0") {
			t.Errorf("coordinator /metrics lacks committed offset %d and lag 0 for partition %d", end, p)
		}
	}
	// The coordinator's native API shows the same positions, read-only, as channels and
	// sequences.
	native, err := groupsClient(t, s.CoordinatorAddr).GetCommittedOffsets(ctxT(t, 20*time.Second),
		&coordinatorv1.GetCommittedOffsetsRequest{Group: group, Topic: topic})
	if err != nil {
		t.Fatalf("coordinator GetCommittedOffsets: %v", err)
	}
	if len(native.GetPositions()) != len(ends) {
		t.Fatalf("coordinator reports %d positions, want %d: %v", len(native.GetPositions()), len(ends), native)
	}
	for _, pos := range native.GetPositions() {
		end := ends[pos.GetPartition()]
		if pos.GetChannel() != channel.KafkaPartition(topic, pos.GetPartition()) || pos.GetNextSequence() != end+1 || pos.GetLag() != 0 {
			t.Errorf("coordinator position %v, want channel %s, next sequence %d, lag 0", pos, channel.KafkaPartition(topic, pos.GetPartition()), end+1)
		}
	}

	for _, p := range s.Procs() {
		if err := s.Kill(p.Name, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %s: %v", p.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.StartAll(ctx); err != nil {
		t.Fatalf("start again: %v", err)
	}
	adm2 := newAdmin(t, s.KafkaAddrs)
	waitTopic(t, adm2, topic, 3)
	after, err := adm2.FetchOffsets(ctxT(t, 20*time.Second), group)
	if err != nil || after.Error() != nil {
		t.Fatalf("fetch offsets after restart: %v %v", err, after.Error())
	}
	for p := range ends {
		a, _ := after.Lookup(topic, p)
		b, _ := committed.Lookup(topic, p)
		if a.At != b.At {
			t.Fatalf("partition %d committed offset %d after kill -9, %d before", p, a.At, b.At)
		}
	}

	prod2 := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	more := produceKeyed(t, prod2, topic, "second", 600)
	want := map[string]bool{}
	for _, r := range more {
		want[string(r.Key)] = true
	}
	cons2 := newClient(t, s.KafkaAddrs, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(groupSessionTimeout))
	seen := 0
	firstOffset := map[int32]int64{}
	for seen < len(more) {
		fs := cons2.PollFetches(ctxT(t, 30*time.Second))
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll after restart: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := firstOffset[r.Partition]; !ok {
				firstOffset[r.Partition] = r.Offset
			}
			if !want[string(r.Key)] {
				t.Fatalf("record %s at %d/%d consumed again after the restart", r.Key, r.Partition, r.Offset)
			}
			seen++
		})
	}
	for p, o := range firstOffset {
		if o != ends[p] {
			t.Errorf("partition %d resumed at offset %d, committed %d", p, o, ends[p])
		}
	}
}

// TestGroupBadInput: the coordinator's errors reach Kafka clients as Kafka error codes.
func TestGroupBadInput(t *testing.T) {
	s := sharedStack(t)
	topic, group := topicName("badgrp"), topicName("group")
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 1, nil)
	member := newClient(t, s.KafkaAddrs, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.SessionTimeout(groupSessionTimeout))
	var memberID string
	var gen int32
	waitFor(t, 30*time.Second, "the member to join", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		member.PollFetches(ctx)
		cancel()
		memberID, gen = member.GroupMetadata()
		return gen > 0
	})
	raw := newClient(t, s.KafkaAddrs)
	broker := raw.Broker(0)

	commit := func(group string, gen int32, memberID, metadata string) int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation, req.MemberID = group, gen, memberID
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.Metadata = 0, 1, &metadata
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 20*time.Second), broker)
		if err != nil {
			t.Fatalf("OffsetCommit: %v", err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	check := func(what string, got int16, want *kerr.Error) {
		t.Helper()
		if got != want.Code {
			t.Errorf("%s: %v, want %v", what, kerr.ErrorForCode(got), want)
		}
	}
	check("stale generation", commit(group, gen-1, memberID, ""), kerr.IllegalGeneration)
	check("unknown member", commit(group, gen, "no-such-member", ""), kerr.UnknownMemberID)
	check("empty group id", commit("", gen, memberID, ""), kerr.InvalidGroupID)
	check("oversize metadata", commit(group, gen, memberID, strings.Repeat("m", 4097)), kerr.OffsetMetadataTooLarge)
	if c := commit(group, gen, memberID, "ok"); c != 0 {
		t.Errorf("valid commit: %v", kerr.ErrorForCode(c))
	}

	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = "", 10000, 10000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	jr, err := join.RequestWith(ctxT(t, 20*time.Second), broker)
	if err != nil {
		t.Fatalf("JoinGroup: %v", err)
	}
	check("join with empty group id", jr.ErrorCode, kerr.InvalidGroupID)
	join.Group, join.SessionTimeoutMillis = group, 10
	jr, err = join.RequestWith(ctxT(t, 20*time.Second), broker)
	if err != nil {
		t.Fatalf("JoinGroup: %v", err)
	}
	check("join with a tiny session timeout", jr.ErrorCode, kerr.InvalidSessionTimeout)

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.Generation, hb.MemberID = group, gen, "no-such-member"
	hr, err := hb.RequestWith(ctxT(t, 20*time.Second), broker)
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	check("heartbeat of an unknown member", hr.ErrorCode, kerr.UnknownMemberID)

	dr, err := adm.DeleteGroups(ctxT(t, 20*time.Second), group)
	if err != nil {
		t.Fatalf("DeleteGroups: %v", err)
	}
	if r := dr[group]; !errorIs(r.Err, kerr.NonEmptyGroup) {
		t.Errorf("DeleteGroups on an active group: %v, want NON_EMPTY_GROUP", r.Err)
	}
	dg, err := adm.DescribeGroups(ctxT(t, 20*time.Second), group)
	if err != nil {
		t.Fatalf("DescribeGroups: %v", err)
	}
	if d := dg[group]; d.State != "Stable" || len(d.Members) != 1 || d.Protocol != "cooperative-sticky" {
		t.Errorf("DescribeGroups: state %s, %d members, protocol %s", d.State, len(d.Members), d.Protocol)
	}
	lg, err := adm.ListGroups(ctxT(t, 20*time.Second), "Stable")
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if _, ok := lg[group]; !ok {
		t.Errorf("ListGroups(Stable) does not list %s: %v", group, lg.Groups())
	}

	member.Close() // leaves: the group is Empty and can be deleted
	waitFor(t, 20*time.Second, "the group to be empty", func() bool {
		dg, err := adm.DescribeGroups(ctxT(t, 20*time.Second), group)
		return err == nil && dg[group].State == "Empty"
	})
	dr, err = adm.DeleteGroups(ctxT(t, 20*time.Second), group)
	if err != nil || dr[group].Err != nil {
		t.Fatalf("DeleteGroups on an empty group: %v %v", err, dr[group].Err)
	}
	dr, _ = adm.DeleteGroups(ctxT(t, 20*time.Second), group)
	if !errorIs(dr[group].Err, kerr.GroupIDNotFound) {
		t.Errorf("DeleteGroups on a deleted group: %v, want GROUP_ID_NOT_FOUND", dr[group].Err)
	}
}

// kcatPartitions returns the partitions assigned to the kcat member (client id
// kcat-member), waiting until the group is Stable with it.
func kcatPartitions(t *testing.T, adm *kadm.Client, group string) []int32 {
	t.Helper()
	var parts []int32
	waitFor(t, time.Minute, "the kcat member to hold partitions", func() bool {
		dg, err := adm.DescribeGroups(ctxT(t, 10*time.Second), group)
		if err != nil || dg[group].State != "Stable" {
			return false
		}
		parts = nil
		for _, m := range dg[group].Members {
			if m.ClientID != "kcat-member" {
				continue
			}
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range c.Topics {
					parts = append(parts, tp.Partitions...)
				}
			}
		}
		return len(parts) > 0
	})
	return parts
}

// committedOn returns the group's committed offsets of topic's partitions parts (-1
// when none).
func committedOn(t *testing.T, adm *kadm.Client, group, topic string, parts []int32) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	resp, err := adm.FetchOffsets(ctxT(t, 10*time.Second), group)
	for _, p := range parts {
		out[p] = -1
		if err != nil {
			continue
		}
		if o, ok := resp.Lookup(topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// scrape returns the /metrics text of a process's HTTP address.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return string(b)
}

func errorIs(err error, want *kerr.Error) bool {
	ke, ok := err.(*kerr.Error)
	return ok && ke.Code == want.Code
}

// TestGroupSurvivesCoordinatorKill: three kgo members consume while the coordinator is
// killed (kill -9) and started again; group calls fail over as
// COORDINATOR_NOT_AVAILABLE meanwhile, then the group carries on from its state in
// Postgres and every record is processed.
func TestGroupSurvivesCoordinatorKill(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic, group := topicName("ckill"), topicName("group")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 6, nil)
	counts := newKeyCounter()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 3 {
		groupConsumer(t, ctx, &wg, s.KafkaAddrs, group, topic, fmt.Sprintf("kgo-%d", i), counts)
	}
	prod := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic))
	recs := produceKeyed(t, prod, topic, "a", 3000)
	waitFor(t, time.Minute, "the first records to be processed", func() bool { return counts.distinct() >= 1000 })

	if err := s.Kill(stack.Coordinator, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 coordinator: %v", err)
	}
	if err := s.Restart(ctxT(t, time.Minute), stack.Coordinator); err != nil {
		t.Fatalf("restart coordinator: %v", err)
	}
	recs = append(recs, produceKeyed(t, prod, topic, "b", 3000)...)
	waitFor(t, 2*time.Minute, "every record to be processed", func() bool { return counts.distinct() == len(recs) })
	dg, err := newAdmin(t, s.KafkaAddrs).DescribeGroups(ctxT(t, 20*time.Second), group)
	if err != nil || dg[group].State != "Stable" || len(dg[group].Members) != 3 {
		t.Fatalf("group after the coordinator restart: %v %+v", err, dg[group])
	}
}

// TestGroupStaticMemberRestart (KIP-345): a static member (group.instance.id) that
// restarts within its session timeout gets its partitions back without a rebalance: the
// other member's generation does not change.
func TestGroupStaticMemberRestart(t *testing.T) {
	s := sharedStack(t)
	topic, group := topicName("static"), topicName("group")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 4, nil)
	prod := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	member := func(instance string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaAddrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.InstanceID(instance), kgo.SessionTimeout(30*time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	pollUntilJoined := func(cl *kgo.Client) int32 {
		var gen int32
		waitFor(t, time.Minute, "the member to join", func() bool {
			produceKeyed(t, prod, topic, "s", 8)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
			_, gen = cl.GroupMetadata()
			return gen > 0
		})
		return gen
	}
	s1, s2 := member("static-1"), member("static-2")
	defer s2.Close()
	pollUntilJoined(s1)
	pollUntilJoined(s2)
	waitFor(t, time.Minute, "both static members in one generation", func() bool {
		for _, cl := range []*kgo.Client{s1, s2} {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
		}
		_, g1 := s1.GroupMetadata()
		_, g2 := s2.GroupMetadata()
		return g1 == g2 && g1 > 0
	})
	_, gen := s2.GroupMetadata()
	s1.Close() // a static member does not send LeaveGroup: the group keeps its place
	s1b := member("static-1")
	defer s1b.Close()
	if g := pollUntilJoined(s1b); g != gen {
		t.Errorf("restarted static member joined generation %d, want the unchanged %d", g, gen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	s2.PollFetches(ctx)
	cancel()
	if _, g := s2.GroupMetadata(); g != gen {
		t.Errorf("the other member moved to generation %d: the restart caused a rebalance", g)
	}
}

// groupsClient dials the coordinator's GroupCoordinatorService as an outside user
// (lag tooling) would.
func groupsClient(t testing.TB, addr string) coordinatorv1.GroupCoordinatorServiceClient {
	t.Helper()
	return coordinatorv1.NewGroupCoordinatorServiceClient(dialGRPC(t, addr))
}
