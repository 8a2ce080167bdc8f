// Package testenv is the one place the end-to-end tests and benchmarks read the
// endpoints of the outside servers they need (Postgres, NATS), and the one place that
// decides what happens when one is missing: outside CI the test is skipped with the
// reason, in CI (CI=true) it fails.
package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defaults used when the environment names no server.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
)

// PostgresURL is the admin URL of the test Postgres server (env
// TRIBUTARY_TEST_POSTGRES_URL). Stacks create and drop their own databases through it.
func PostgresURL() string { return env("TRIBUTARY_TEST_POSTGRES_URL", DefaultPostgresURL) }

// NATSURL is the URL of the test NATS server (env TRIBUTARY_TEST_NATS_URL).
func NATSURL() string { return env("TRIBUTARY_TEST_NATS_URL", DefaultNATSURL) }

// InCI reports whether the tests run in CI (env CI=true), where a missing server is a
// failure rather than a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Check verifies that Postgres answers a query and that NATS accepts a TCP connection,
// each within a few seconds. The error names the server and the URL tried.
func Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return fmt.Errorf("postgres at %s (TRIBUTARY_TEST_POSTGRES_URL) unreachable: %w", PostgresURL(), err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("postgres at %s (TRIBUTARY_TEST_POSTGRES_URL) does not answer: %w", PostgresURL(), err)
	}
	u, err := url.Parse(NATSURL())
	if err != nil {
		return fmt.Errorf("bad TRIBUTARY_TEST_NATS_URL %q: %w", NATSURL(), err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("nats at %s (TRIBUTARY_TEST_NATS_URL) unreachable: %w", NATSURL(), err)
	}
	return c.Close()
}

// Require skips t (outside CI) or fails it (CI=true) when Postgres or NATS is missing.
func Require(t testing.TB) {
	t.Helper()
	if err := Check(context.Background()); err != nil {
		if InCI() {
			t.Fatalf("required server missing in CI: %v", err)
		}
		t.Skipf("SKIP: required server missing (set CI=true to fail instead): %v", err)
	}
}

// RequireBinary skips (outside CI) or fails (CI=true) when an external tool such as
// kcat is not on PATH; it returns the tool's path.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if InCI() {
			t.Fatalf("required tool %s missing in CI: %v", name, err)
		}
		t.Skipf("SKIP: required tool %s missing (set CI=true to fail instead): %v", name, err)
	}
	return p
}

// DefaultMQTTAddr is the test MQTT broker (Mosquitto) when the environment names none.
const DefaultMQTTAddr = "127.0.0.1:1883"

// MQTTAddr is host:port of the test MQTT broker, anonymous, MQTT 5 (env
// TRIBUTARY_TEST_MQTT_ADDR).
func MQTTAddr() string { return env("TRIBUTARY_TEST_MQTT_ADDR", DefaultMQTTAddr) }

// RequireMQTT skips (outside CI) or fails (CI=true) when nothing accepts a TCP
// connection at MQTTAddr.
func RequireMQTT(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", MQTTAddr(), 3*time.Second)
	if err != nil {
		if InCI() {
			t.Fatalf("required MQTT broker missing in CI: %s (TRIBUTARY_TEST_MQTT_ADDR): %v", MQTTAddr(), err)
		}
		t.Skipf("SKIP: required MQTT broker missing at %s (TRIBUTARY_TEST_MQTT_ADDR; set CI=true to fail instead): %v", MQTTAddr(), err)
	}
	_ = c.Close()
}

// DebianPython is the interpreter of Debian's python3 packages (python3-confluent-kafka
// installs there, not into a pyenv or venv python that may come first on PATH).
const DebianPython = "/usr/bin/python3"

// RequirePythonModule skips (outside CI) or fails (CI=true) when python cannot import
// module; it returns python.
func RequirePythonModule(t testing.TB, python, module string) string {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import "+module).CombinedOutput(); err != nil {
		if InCI() {
			t.Fatalf("required python module %s missing in CI (%s): %v\n%s", module, python, err, out)
		}
		t.Skipf("SKIP: required python module %s missing for %s (set CI=true to fail instead): %v\n%s", module, python, err, out)
	}
	return python
}
