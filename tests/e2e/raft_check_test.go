package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// checkReplicas runs `storage-core check-replicas` (bin) over the data directories
// dirs of stopped nodes and returns, per channel, the offsets [from, to) it compared
// on every replica; a difference (its non-zero exit) fails the test with its report.
func checkReplicas(t *testing.T, bin string, dirs []string) map[string][2]int64 {
	t.Helper()
	args := []string{"check-replicas"}
	for _, d := range dirs {
		args = append(args, "--data-dir="+d)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("storage-core check-replicas: %v\n%s", err, out)
	}
	t.Logf("storage-core check-replicas:\n%s", out)
	ranges := map[string][2]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, rest, ok := strings.Cut(line, ": offsets [")
		var r [2]int64
		if _, err := fmt.Sscanf(rest, "%d, %d)", &r[0], &r[1]); !ok || err != nil {
			t.Fatalf("storage-core check-replicas printed %q", line)
		}
		ranges[name] = r
	}
	return ranges
}

// checkStackReplicas waits until every storage-core node of s holds each channel of
// ends up to its end offset (GetChannel's high watermark), stops them (SIGTERM),
// checks their data directories with checkReplicas and fails the test unless each
// channel of ends was compared up to its end. It returns the compared ranges.
func checkStackReplicas(t *testing.T, s *stack.Stack, ends map[string]int64) map[string][2]int64 {
	t.Helper()
	addrs := strings.Split(s.StorageAddr, ",")
	for i, p := range s.Storages {
		cc, err := grpc.NewClient(addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		c := storagev1.NewStorageServiceClient(cc)
		for ch, end := range ends {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				r, err := c.GetChannel(ctxT(t, 5*time.Second), &storagev1.GetChannelRequest{Name: ch})
				if hw := r.GetChannel().GetHighWatermark(); err == nil && hw >= end {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s holds %s up to %d (%v), want %d", p.Name, ch, r.GetChannel().GetHighWatermark(), err, end)
				}
			}
		}
		_ = cc.Close()
	}
	var dirs []string
	for _, p := range s.Storages {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Fatalf("stop %s: %v", p.Name, err)
		}
		dirs = append(dirs, p.DataDir)
	}
	ranges := checkReplicas(t, s.Bin(stack.StorageCore), dirs)
	for ch, end := range ends {
		if r, ok := ranges[ch]; !ok || r[1] != end {
			t.Fatalf("check-replicas compared %s over %v, want up to offset %d", ch, r, end)
		}
	}
	return ranges
}
