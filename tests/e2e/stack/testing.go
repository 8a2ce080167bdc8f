package stack

import (
	"context"
	"testing"

	"github.com/tributary/tributary/tests/e2e/testenv"
)

// StartT starts a stack for a test: it skips or fails (testenv.Require) when Postgres
// or NATS is missing, fails the test when the stack does not come up, and on cleanup
// prints every process's log tail if the test failed, reports processes that crashed
// on their own, then closes the stack.
func StartT(t testing.TB, opts Options) *Stack {
	t.Helper()
	testenv.Require(t)
	s, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() { CloseT(t, s) })
	return s
}

// CloseT closes s, failing t when a process crashed by itself, and prints the log
// tails when t failed. StartT registers it; call it directly for a stack kept across
// tests.
func CloseT(t testing.TB, s *Stack) {
	t.Helper()
	for _, c := range s.Crashes() {
		t.Errorf("process crash: %s", c)
	}
	if t.Failed() {
		t.Logf("stack %s logs:\n%s", s.ClusterID, s.LogTails(80))
	}
	if err := s.Close(); err != nil {
		t.Logf("stack %s close: %v", s.ClusterID, err)
	}
}
