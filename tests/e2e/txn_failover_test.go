package e2e

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// TestTxnTimeoutSweepFailover: transaction timeouts are swept by the one coordinator
// holding the sweep lock "transactions"; when that replica is killed (kill -9, the
// lock is not released) the other takes it over within its TTL and aborts an
// abandoned transaction: the LSO moves on and read_committed never sees its records.
func TestTxnTimeoutSweepFailover(t *testing.T) {
	s := stack.StartT(t, stack.Options{Coordinators: 2})
	const lock = "transactions"
	holder := lockHolder(t, s, lock, 30*time.Second)
	if holder == s.Coordinator {
		// The gateway talks to the first coordinator: make the other one the holder
		// (a graceful stop releases the lock at once).
		if err := s.Kill(holder.Name, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if holder = lockHolder(t, s, lock, 10*time.Second); holder == s.Coordinator {
			t.Fatal("the stopped coordinator still holds the lock")
		}
		if err := s.Restart(ctxT(t, time.Minute), s.Coordinator.Name); err != nil {
			t.Fatal(err)
		}
	}
	survivor := s.Coordinator
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnfailover")
	createTopic(t, adm, topic, 1, nil)
	const timeout = 4 * time.Second
	zombie := txnProducer(t, s.KafkaAddrs, topicName("tid"), kgo.TransactionTimeout(timeout))
	ctx := ctxT(t, 2*time.Minute)
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("zombie-%d", i))}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	if err := s.Kill(holder.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitFor(t, timeout+3*time.Second+15*time.Second, "the survivor to abort the transaction (LSO = HW)", func() bool {
		c, err1 := adm.ListCommittedOffsets(ctx, topic)
		e, err2 := adm.ListEndOffsets(ctx, topic)
		if err1 != nil || err2 != nil {
			return false
		}
		co, _ := c.Lookup(topic, 0)
		eo, _ := e.Lookup(topic, 0)
		return co.Offset == eo.Offset && eo.Offset == 4 // three records and the ABORT marker
	})
	t.Logf("aborted %v after the lock holder was killed (timeout %v, lock ttl 3s)", time.Since(killed).Round(100*time.Millisecond), timeout)
	if procMetric(t, survivor.HTTPAddr, `tributary_coordinator_sweep_lock_held{lock="`+lock+`"}`) != 1 {
		t.Errorf("%s does not hold the sweep lock", survivor.Name)
	}
	fresh := txnProducer(t, s.KafkaAddrs, topicName("tid"))
	runTxn(t, fresh, topic, 1, true, "after")
	runTxn(t, fresh, topic, 1, true, "done")
	if got := consumeUntil(t, s.KafkaAddrs, topic, 1, true, "done")[0]; strings.Join(got, ",") != "after" {
		t.Errorf("read_committed: %v, want [after]", got)
	}
}

// TestTxnKilledProducer: a transactional producer process killed with SIGKILL in the
// middle of a transaction: its records never reach read_committed, the coordinator
// aborts the transaction within its timeout, and the LSO moves on to the high
// watermark.
func TestTxnKilledProducer(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnkilled")
	createTopic(t, adm, topic, 1, nil)
	ctx := ctxT(t, 3*time.Minute)
	bin := filepath.Join(t.TempDir(), "txnzombie")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/txnzombie").CombinedOutput(); err != nil {
		t.Fatalf("build txnzombie: %v\n%s", err, out)
	}
	const timeout = 3 * time.Second
	cmd := exec.CommandContext(ctx, bin, "-brokers", strings.Join(s.KafkaAddrs, ","), "-topic", topic, "-tid", topicName("tid"),
		"-timeout", timeout.String(), "-n", "5")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var first int64
	if _, serr := fmt.Sscanf(line, "open %d", &first); err != nil || serr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("txnzombie: %q, %v, %v\n%s", line, err, serr, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	lso := func() (int64, int64) {
		c, err1 := adm.ListCommittedOffsets(ctx, topic)
		e, err2 := adm.ListEndOffsets(ctx, topic)
		if err1 != nil || err2 != nil {
			t.Fatalf("ListOffsets: %v, %v", err1, err2)
		}
		co, _ := c.Lookup(topic, 0)
		eo, _ := e.Lookup(topic, 0)
		return co.Offset, eo.Offset
	}
	if l, hw := lso(); l != first || hw != first+5 {
		t.Fatalf("after the kill: LSO %d, HW %d; want LSO %d (the open transaction's first record), HW %d", l, hw, first, first+5)
	}
	waitFor(t, timeout+10*time.Second, "the killed producer's transaction to be aborted (LSO = HW)", func() bool {
		l, hw := lso()
		return l == hw && hw == first+6
	})
	t.Logf("aborted %v after the kill (timeout %v)", time.Since(killed).Round(100*time.Millisecond), timeout)
	fresh := txnProducer(t, s.KafkaAddrs, topicName("tid"))
	runTxn(t, fresh, topic, 1, true, "after")
	runTxn(t, fresh, topic, 1, true, "done")
	if got := consumeUntil(t, s.KafkaAddrs, topic, 1, true, "done")[0]; strings.Join(got, ",") != "after" {
		t.Errorf("read_committed: %v, want [after]", got)
	}
}
