package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// franzGoTests are franz-go's own integration tests run against our stack: its group
// tests with their KIP-848 variants, the broker-side regex test, TestIssue523
// (a regex consumer whose topic is deleted stops asking for it), and the KIP-932 share
// group tests (TestShareGroupOffsetsAdmin, TestShareGroup, TestShareGroupETL,
// TestShareGroupAckOnClose, TestConsumeRegexShareSkipsInternal).
// TestPauseIssueOct2023 goes first: it is not parallel and makes the suite's admin
// client probe ApiVersions, which TestGroupSimple's 848 variant reads before it would
// itself.
const franzGoTests = `^(TestPauseIssueOct2023|TestGroupSimple|TestGroupETL|Test848RegexBrokerResolves|TestIssue523|TestShareGroupOffsetsAdmin|TestShareGroup|TestShareGroupETL|TestShareGroupAckOnClose|TestConsumeRegexShareSkipsInternal)$`

// franzGoMustPass are the results that must be PASS (a skip means KIP-848 was not
// detected and fails the run).
var franzGoMustPass = []string{
	"TestGroupSimple/848", "TestGroupSimple/classic",
	"TestGroupETL/range/848", "TestGroupETL/sticky/848", "TestGroupETL/sticky/848/static",
	"TestGroupETL/range", "TestGroupETL/cooperative-sticky", "TestGroupETL/cooperative-sticky/static",
	"Test848RegexBrokerResolves", "TestIssue523/roundrobin", "TestIssue523/sticky",
	"TestShareGroupOffsetsAdmin", "TestShareGroup", "TestShareGroupETL", "TestShareGroupAckOnClose",
	"TestConsumeRegexShareSkipsInternal",
}

// TestFranzGoSuite runs franz-go's integration tests (pkg/kgo, at the franz-go
// version this module's go.mod pins, from the module cache, nothing copied) against a
// stack of ours, with KGO_SEEDS at its gateway and KGO_TEST_RF=1. It needs minutes, so
// it runs only with TRIBUTARY_E2E_FRANZGO=1 (make e2e-franz-go);
// TRIBUTARY_E2E_FRANZGO_RECORDS sets KGO_TEST_RECORDS (default 50,000 per ETL chain).
func TestFranzGoSuite(t *testing.T) {
	if os.Getenv("TRIBUTARY_E2E_FRANZGO") != "1" {
		t.Skip("set TRIBUTARY_E2E_FRANZGO=1 (make e2e-franz-go) to run franz-go's integration tests against the stack")
	}
	testenv.Require(t)
	// GOWORK=off: the version this module's go.mod pins, not the workspace's choice.
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "github.com/twmb/franz-go")
	list.Env = append(os.Environ(), "GOWORK=off")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list franz-go: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if dir == "" {
		t.Fatalf("franz-go %s is not in the module cache (go mod download github.com/twmb/franz-go)", version)
	}
	s, err := stack.Start(ctxT(t, 2*time.Minute), stack.Options{})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", s.LogTails(40))
		}
		_ = s.Close()
	})
	records := os.Getenv("TRIBUTARY_E2E_FRANZGO_RECORDS")
	if records == "" {
		records = "50000"
	}
	ctx := ctxT(t, 25*time.Minute)
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout=20m", "-v", "-run", franzGoTests, "./pkg/kgo")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KGO_SEEDS="+strings.Join(s.KafkaAddrs, ","), "KGO_TEST_RF=1",
		"KGO_TEST_RECORDS="+records, "KGO_LOG_LEVEL=warn", "GOWORK=off", "GOFLAGS=-mod=mod")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	t.Logf("franz-go %s: go test -run '%s' ./pkg/kgo in %s, seeds %v", version, franzGoTests, dir, s.KafkaAddrs)
	runErr := cmd.Run()
	results := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`).FindAllStringSubmatch(buf.String(), -1) {
		results[m[2]] = m[1]
	}
	for _, name := range franzGoMustPass {
		if results[name] != "PASS" {
			t.Errorf("franz-go %s: %s", name, map[string]string{"": "did not run"}[results[name]]+results[name])
		}
	}
	// franz-go skips an ETL chain's checks after a STALE_MEMBER_EPOCH commit (brokers
	// before KIP-1251): that would hide a wrong answer of ours, so it fails here.
	if n := strings.Count(buf.String(), "stale commit encountered, skipping validation"); n > 0 {
		t.Errorf("franz-go skipped the checks of %d ETL chains after STALE_MEMBER_EPOCH commits", n)
	}
	if runErr != nil || t.Failed() {
		tail := buf.String()
		if len(tail) > 20000 {
			tail = tail[len(tail)-20000:]
		}
		t.Errorf("franz-go %s tests: %v\n%s", version, runErr, tail)
	}
}
