// Package e2e runs Tributary's end-to-end tests: the real binaries (built once by
// package stack, or taken from TRIBUTARY_BIN_DIR) started as processes against the test
// Postgres and NATS, driven by real third-party clients (kcat/librdkafka, franz-go, gRPC).
//
// Most tests share one single-gateway stack (sharedStack); tests that kill, restart or
// need two gateways start their own.
package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

var (
	sharedOnce sync.Once
	shared     *stack.Stack
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if crashes := shared.Crashes(); len(crashes) > 0 {
			fmt.Fprintf(os.Stderr, "shared stack: processes crashed by themselves: %v\n%s", crashes, shared.LogTails(80))
			code = 1
		}
		if err := shared.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "shared stack close: %v\n", err)
		}
	}
	closePubSubStack()
	stack.RemoveBinaries()
	os.Exit(code)
}

// sharedStack returns the stack shared by tests that neither kill nor restart
// processes, starting it on first use. On test failure the processes' log tails are
// printed.
func sharedStack(t *testing.T) *stack.Stack {
	t.Helper()
	testenv.Require(t)
	sharedOnce.Do(func() {
		shared, sharedErr = stack.Start(context.Background(), stack.Options{})
	})
	if sharedErr != nil {
		t.Fatalf("start shared stack: %v", sharedErr)
	}
	s := shared
	marks := s.LogMarks()
	t.Cleanup(func() {
		for _, c := range s.Crashes() {
			t.Errorf("process crash: %s", c)
		}
		if t.Failed() {
			t.Logf("shared stack logs written during this test:\n%s", s.LogsSince(marks, 60))
		}
	})
	return s
}
