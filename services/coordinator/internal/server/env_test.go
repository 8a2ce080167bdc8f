package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
)

// External servers the tests need, from the environment (defaults: the local dev and
// CI services).
const (
	envPostgres = "TRIBUTARY_TEST_POSTGRES_URL"
	envNATS     = "TRIBUTARY_TEST_NATS_URL"
)

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// missing skips the test loudly outside CI and fails it in CI (CI=true).
func missing(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required in CI: %v", what, err)
	}
	t.Skipf("SKIPPING: %s is not reachable (%v); start it or set the env var (CI=true turns this into a failure)", what, err)
}

// testDatabase returns the URL of a fresh, not yet existing database on the test
// Postgres server (the coordinator creates it) and drops it when the test ends.
func testDatabase(t *testing.T) string {
	t.Helper()
	base := getenv(envPostgres, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		missing(t, "Postgres ("+envPostgres+")", err)
	}
	_ = conn.Close(ctx)

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tributary_test_" + hex.EncodeToString(b[:])
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", envPostgres, err)
	}
	u.Path = "/" + name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize())); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return u.String()
}

// testNATS returns the URL of the test NATS server.
func testNATS(t *testing.T) string {
	t.Helper()
	u := getenv(envNATS, "nats://127.0.0.1:4222")
	nc, err := nats.Connect(u, nats.Timeout(3*time.Second))
	if err != nil {
		missing(t, "NATS ("+envNATS+")", err)
	}
	nc.Close()
	return u
}

// randomClusterID keeps concurrent test stacks' NATS subjects apart.
func randomClusterID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}
