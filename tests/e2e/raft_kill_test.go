package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// raftNode is one storage-core process of a 3-node raft-mode cluster.
type raftNode struct {
	addr string
	dir  string // --data-dir
	args []string
	log  string
	cmd  *exec.Cmd
}

func (n *raftNode) start(t *testing.T, bin string) {
	t.Helper()
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, n.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd = cmd
}

func (n *raftNode) kill() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.cmd = nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRaftFaultsUnderIdempotentAppends is the Jepsen-style queue workload on three
// storage-core processes in raft mode (--node-id, --peers): one writer appends unique
// values as an idempotent producer (one batch per sequence number, retried with the
// same sequence until acknowledged), following the tributary-leader trailer and moving
// to another node on any other error, while faults strike with appends in flight:
// SIGKILL of the channel's leader, SIGKILL of a follower, SIGSTOP of the leader for
// longer than the election timeout then SIGCONT, SIGKILL of the leader again (each
// killed node restarted later), then SIGKILL of all three and a restart. Verdict: every node holds the same records,
// every acknowledged value exactly once at the sequence it was acknowledged with, and
// nothing else (0 lost, 0 duplicates), and after a last SIGKILL of all three
// `storage-core check-replicas` finds their data directories byte-identical over
// every acknowledged record. The longest gap between acknowledgements (a failover)
// is printed.
func TestRaftFaultsUnderIdempotentAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	ctx := context.Background()
	bins, err := stack.Binaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(bins, "storage-core")
	nodes := make([]*raftNode, 3)
	peers := ""
	for i := range nodes {
		nodes[i] = &raftNode{addr: freeAddr(t), log: filepath.Join(t.TempDir(), "storage-core.log")}
		if i > 0 {
			peers += ","
		}
		peers += fmt.Sprintf("%d=%s", i+1, nodes[i].addr)
	}
	clients := map[string]storagev1.StorageServiceClient{}
	for i, n := range nodes {
		n.dir = t.TempDir()
		n.args = []string{"--grpc-addr=" + n.addr, "--http-addr=" + freeAddr(t), "--data-dir=" + n.dir,
			fmt.Sprintf("--node-id=%d", i+1), "--peers=" + peers, "--log-level=warn"}
		n.start(t, bin)
		cc, err := grpc.NewClient(n.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		clients[n.addr] = storagev1.NewStorageServiceClient(cc)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
		if t.Failed() {
			for i, n := range nodes {
				b, _ := os.ReadFile(n.log)
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("node %d log tail:\n%s", i+1, b)
			}
		}
	})
	next := func(addr string) string {
		for i, n := range nodes {
			if n.addr == addr {
				return nodes[(i+1)%len(nodes)].addr
			}
		}
		return nodes[0].addr
	}
	// do runs f on addr until it succeeds: a not-leader answer moves to the leader it
	// names, any other error to the next node.
	do := func(addr string, budget time.Duration, f func(c storagev1.StorageServiceClient, tr *metadata.MD) error) string {
		t.Helper()
		deadline := time.Now().Add(budget)
		for {
			var tr metadata.MD
			err := f(clients[addr], &tr)
			if err == nil {
				return addr
			}
			if time.Now().After(deadline) {
				t.Fatalf("no success within %v, last via %s: %v", budget, addr, err)
			}
			if l := tr.Get("tributary-leader"); status.Code(err) == codes.FailedPrecondition && len(l) == 1 && l[0] != "" {
				addr = l[0]
				continue
			}
			addr = next(addr)
			time.Sleep(20 * time.Millisecond)
		}
	}
	const channel = "kafka.raft-jepsen.0"
	do(nodes[0].addr, 30*time.Second, func(c storagev1.StorageServiceClient, tr *metadata.MD) error {
		_, err := c.CreateChannel(ctxT(t, 5*time.Second), &storagev1.CreateChannelRequest{Name: channel, IfNotExists: true}, grpc.Trailer(tr))
		return err
	})

	// The fault schedule, by number of acknowledged values: each fault runs beside the
	// writer (so appends are in flight when it strikes); a killed node is started again
	// at its restart mark, and at the end.
	const total = 1000
	type fault struct {
		at, restart int
		what        string
	}
	faults := []fault{{200, 350, "kill-leader"}, {450, 550, "kill-follower"}, {650, 0, "stop-leader"}, {850, total, "kill-leader"}}
	acked := make([]string, 0, total)
	ackedSeq := map[string]int64{}
	cur := nodes[0].addr
	dups := 0
	var longest time.Duration
	last := time.Now()
	faultDone := make(chan struct{})
	close(faultDone)
	down := -1
	seq := int32(0)
	// write appends the next value until it is acknowledged.
	write := func() {
		v := fmt.Sprintf("value-%05d", seq)
		var first int64
		var dup bool
		cur = do(cur, 60*time.Second, func(c storagev1.StorageServiceClient, tr *metadata.MD) error {
			r, err := c.Append(ctxT(t, 5*time.Second), &storagev1.AppendRequest{Channel: channel,
				Records:  []*storagev1.AppendRecord{{Value: []byte(v)}},
				Producer: &storagev1.AppendProducer{ProducerId: 1, ProducerEpoch: 0, BaseSequence: seq}}, grpc.Trailer(tr))
			first, dup = r.GetFirstSequence(), r.GetDuplicate()
			return err
		})
		if d := time.Since(last); d > longest {
			longest = d
		}
		last = time.Now()
		acked = append(acked, v)
		ackedSeq[v] = first
		if dup {
			dups++
		}
		seq++
	}
	for len(acked) < total {
		write()
		for _, f := range faults {
			if f.restart == len(acked) && down >= 0 {
				<-faultDone
				nodes[down].start(t, bin)
				down = -1
			}
			if f.at != len(acked) {
				continue
			}
			<-faultDone
			leader := 0
			for i, n := range nodes {
				if n.addr == cur { // the node that just acknowledged leads the channel
					leader = i
				}
			}
			victim := leader
			if f.what == "kill-follower" {
				victim = (leader + 1) % len(nodes)
			}
			t.Logf("after %d values: %s (node %d)", len(acked), f.what, victim+1)
			done := make(chan struct{})
			faultDone = done
			n := nodes[victim]
			if f.what != "stop-leader" {
				down = victim
			}
			go func() {
				defer close(done)
				time.Sleep(3 * time.Millisecond)
				if f.what != "stop-leader" {
					n.kill()
					return
				}
				// SIGSTOP for longer than the election timeout (1 s), then SIGCONT.
				_ = n.cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(2500 * time.Millisecond)
				_ = n.cmd.Process.Signal(syscall.SIGCONT)
			}()
		}
	}
	<-faultDone
	if down >= 0 {
		nodes[down].start(t, bin)
	}
	// Restart of all three (SIGKILL): each rebuilds its channels from its WAL, they
	// elect again, and the writer goes on.
	time.Sleep(500 * time.Millisecond)
	t.Logf("after %d values: kill -9 of all three, restart", len(acked))
	for _, n := range nodes {
		n.kill()
	}
	for _, n := range nodes {
		n.start(t, bin)
	}
	restarted := time.Now()
	last = restarted
	write()
	t.Logf("first acknowledgement %v after the restart of all three", time.Since(restarted))
	for len(acked) < total+100 {
		write()
	}
	t.Logf("%d values acknowledged (%d as an idempotent retry's duplicate); longest gap between acknowledgements %v", len(acked), dups, longest)
	want := len(acked)

	for i, n := range nodes {
		deadline := time.Now().Add(30 * time.Second)
		var got []*storagev1.Record
		for {
			got = got[:0]
			from := int64(1)
			var err error
			for {
				var r *storagev1.ReadResponse
				r, err = clients[n.addr].Read(ctxT(t, 5*time.Second), &storagev1.ReadRequest{Channel: channel, FromSequence: from, MaxRecords: 1000})
				if err != nil || len(r.GetRecords()) == 0 {
					break
				}
				got = append(got, r.GetRecords()...)
				from = got[len(got)-1].GetSequence() + 1
			}
			if err == nil && len(got) >= want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d holds %d records (%v), want %d", i+1, len(got), err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		seen := map[string]bool{}
		for _, r := range got {
			v := string(r.GetValue())
			if seen[v] {
				t.Fatalf("node %d: %s stored twice", i+1, v)
			}
			seen[v] = true
			s, ok := ackedSeq[v]
			if !ok {
				t.Fatalf("node %d: %s was never acknowledged", i+1, v)
			}
			if s != r.GetSequence() {
				t.Fatalf("node %d: %s at sequence %d, acknowledged at %d", i+1, v, r.GetSequence(), s)
			}
		}
		for _, v := range acked {
			if !seen[v] {
				t.Fatalf("node %d: acknowledged %s lost", i+1, v)
			}
		}
		if !slices.IsSortedFunc(got, func(a, b *storagev1.Record) int { return int(a.GetSequence() - b.GetSequence()) }) || len(got) != want {
			t.Fatalf("node %d: %d records, want %d in sequence order", i+1, len(got), want)
		}
	}
	var dirs []string
	for _, n := range nodes {
		n.kill()
		dirs = append(dirs, n.dir)
	}
	if r := checkReplicas(t, bin, dirs)[channel]; r != [2]int64{0, int64(want)} {
		t.Fatalf("check-replicas compared offsets %v of %s, want [0, %d)", r, channel, want)
	}
}
