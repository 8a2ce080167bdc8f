package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// extraProc is a service process started by a test beside a stack (the stack runs one
// coordinator; this adds a second replica and a gateway in front of it).
type extraProc struct {
	cmd     *exec.Cmd
	log     string
	http    string
	done    chan struct{}
	waitErr error
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startExtra runs binary name from the stack's binaries with args, logging to a file,
// and waits until its /readyz (at httpAddr) answers 200. It is killed at cleanup.
func startExtra(t *testing.T, name, httpAddr string, args ...string) *extraProc {
	t.Helper()
	dir, err := stack.Binaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := &extraProc{log: filepath.Join(t.TempDir(), name+".log"), http: httpAddr, done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(filepath.Join(dir, name), args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("%s log:\n%s", name, tailString(string(b), 4000))
		}
	})
	waitFor(t, time.Minute, name+" ready", func() bool {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited: %v\n%s", name, p.waitErr, tailString(string(b), 4000))
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// holdsSweepLock reports whether the log at path says its process holds the group sweep
// lock (acquired and not lost or released since).
func holdsSweepLock(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	held := false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"lock":"groups"`) {
			continue
		}
		switch {
		case strings.Contains(line, `"acquired sweep lock"`):
			held = true
		case strings.Contains(line, `"lost sweep lock"`), strings.Contains(line, `"released sweep lock"`):
			held = false
		}
	}
	return held
}

// pinnedDialer sends every connection of a kgo client to addr, so a member talks only to
// one gateway (and through it to one coordinator replica).
func pinnedDialer(addr string) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// TestGroupTwoCoordinatorReplicas: two coordinator processes share the database and
// NATS, each behind its own gateway, with one group member on each. The coordinator
// holding the sweep lock is killed (kill -9): the other takes the lock over, the dead
// side's member can no longer heartbeat and its session expires, and the rebalance
// completes with the surviving member consuming every partition.
func TestGroupTwoCoordinatorReplicas(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	coordB, coordBHTTP := freePort(t), freePort(t)
	b := startExtra(t, "coordinator", coordBHTTP, "--grpc-addr", coordB, "--http-addr", coordBHTTP,
		"--postgres-url", s.PostgresURL, "--storage-addr", s.StorageAddr, "--nats-url", testenv.NATSURL(),
		"--cluster-id", s.ClusterID)
	gwB, gwBHTTP := freePort(t), freePort(t)
	startExtra(t, "kafka-gateway", gwBHTTP, "--listen", gwB, "--http-addr", gwBHTTP, "--node-id", "7",
		"--storage-addr", s.StorageAddr, "--coordinator-addr", coordB, "--nats-url", testenv.NATSURL(),
		"--cluster-id", s.ClusterID)

	topic, group := topicName("replicas"), topicName("group")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 6, nil)
	waitFor(t, 30*time.Second, "one coordinator to hold the sweep lock", func() bool {
		return holdsSweepLock(s.Coordinator.LogPath) != holdsSweepLock(b.log)
	})
	aHolds := holdsSweepLock(s.Coordinator.LogPath)

	type seen struct {
		mu    sync.Mutex
		parts map[int32]bool
	}
	members := map[string]*seen{"A": {parts: map[int32]bool{}}, "B": {parts: map[int32]bool{}}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for name, gw := range map[string]string{"A": s.KafkaAddrs[0], "B": gwB} {
		cl := newClient(t, []string{gw}, kgo.Dialer(pinnedDialer(gw)), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(groupSessionTimeout),
			kgo.HeartbeatInterval(time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
		sn := members[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					sn.mu.Lock()
					sn.parts[r.Partition] = true
					sn.mu.Unlock()
				})
			}
		}()
	}
	prod := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	produceRound := func() { produceKeyed(t, prod, topic, "r", 60) }
	count := func(name string) int {
		sn := members[name]
		sn.mu.Lock()
		defer sn.mu.Unlock()
		return len(sn.parts)
	}
	waitFor(t, time.Minute, "both members to consume", func() bool {
		produceRound()
		return count("A") > 0 && count("B") > 0 && count("A")+count("B") >= 6
	})

	// Kill the sweep-lock holder; the member behind it loses its coordinator.
	survivor := "B"
	if aHolds {
		if err := s.Kill(stack.Coordinator, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 coordinator A: %v", err)
		}
	} else {
		if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 coordinator B: %v", err)
		}
		<-b.done
		survivor = "A"
	}
	t.Logf("killed the sweep-lock holder (coordinator %s); member %s survives", map[bool]string{true: "A", false: "B"}[aHolds], survivor)
	killedAt := time.Now()
	members[survivor].mu.Lock()
	members[survivor].parts = map[int32]bool{}
	members[survivor].mu.Unlock()
	waitFor(t, 2*time.Minute, "the survivor to consume every partition", func() bool {
		produceRound()
		return count(survivor) == 6
	})
	t.Logf("survivor consumes all 6 partitions %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	if took := map[bool]string{true: b.log, false: s.Coordinator.LogPath}[aHolds]; !holdsSweepLock(took) {
		t.Errorf("the surviving coordinator did not take the sweep lock over")
	}
}
