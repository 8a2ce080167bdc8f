package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFreeAddrUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		a := freeAddr()
		if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("freeAddr returned %q (seen before: %v)", a, seen[a])
		}
		seen[a] = true
	}
}

func TestTailFrom(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Tail(p, 2); got != "c\nd" {
		t.Fatalf("Tail = %q", got)
	}
	if got := tailFrom(p, 4, 10); got != "c\nd" {
		t.Fatalf("tailFrom(4) = %q", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "missing"), 2); !strings.HasPrefix(got, "(") {
		t.Fatalf("Tail of a missing file = %q", got)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("RepoRoot %s has no go.work: %v", root, err)
	}
}

func TestChildEnvDropsServiceOverrides(t *testing.T) {
	t.Setenv("TRIBUTARY_STORAGE_CORE_DATA_DIR", "/elsewhere")
	t.Setenv("TRIBUTARY_TEST_NATS_URL", "nats://x")
	env := strings.Join(childEnv(), "\n")
	if strings.Contains(env, "TRIBUTARY_STORAGE_CORE_DATA_DIR") || !strings.Contains(env, "TRIBUTARY_TEST_NATS_URL") {
		t.Fatalf("childEnv kept service overrides or dropped test settings:\n%s", env)
	}
}
