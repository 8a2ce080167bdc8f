package group

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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tributary/tributary/libs/natsx"
	"github.com/tributary/tributary/services/coordinator/internal/store"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one test's outside world: its own database (tributary_grouptest_<random>,
// dropped at the end) with the coordinator's schema, a NATS connection and a unique cluster id.
type env struct {
	t         *testing.T
	dbURL     string
	pool      *pgxpool.Pool
	nc        *nats.Conn
	clusterID string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := getenv(envPostgres, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		missing(t, "Postgres ("+envPostgres+")", err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	name := "tributary_grouptest_" + randomHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database: %v", err)
	}
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
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", envPostgres, err)
	}
	u.Path = "/" + name
	e := &env{t: t, dbURL: u.String(), clusterID: "gt-" + randomHex(4)}
	// The coordinator's own migrations, exactly as the service applies them.
	st, err := store.Open(e.dbURL, zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	err = st.Prepare(ctx)
	st.Close()
	if err != nil {
		t.Fatalf("apply migrations: %v", err)
	}
	e.pool = e.openPool()
	natsURL := getenv(envNATS, "nats://127.0.0.1:4222")
	e.nc, err = nats.Connect(natsURL, nats.Timeout(3*time.Second))
	if err != nil {
		missing(t, "NATS ("+envNATS+")", err)
	}
	t.Cleanup(func() {
		js, err := jetstream.New(e.nc)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_ = js.DeleteKeyValue(ctx, natsx.SweepLockBucket(e.clusterID))
			cancel()
		}
		e.nc.Close()
	})
	return e
}

func (e *env) openPool() *pgxpool.Pool {
	e.t.Helper()
	pool, err := pgxpool.New(context.Background(), e.dbURL)
	if err != nil {
		e.t.Fatalf("pool: %v", err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}

// testConfig has short timeouts so the tests run fast.
func (e *env) testConfig() Config {
	return Config{
		ClusterID:             e.clusterID,
		MinSessionTimeout:     100 * time.Millisecond,
		InitialRebalanceDelay: -1,
		SweepInterval:         50 * time.Millisecond,
		SweepLockTTL:          time.Second,
		WaitRecheck:           time.Second,
	}
}

// start builds and starts a coordinator (one "replica") with its own pool and NATS
// connection; stop (also run at cleanup) closes it.
func (e *env) start(cfg Config) (*Coordinator, func()) {
	e.t.Helper()
	c, _, stop := e.startReplica(cfg)
	return c, stop
}

// startReplica is start that also returns the replica's NATS connection, so a test can
// cut it to simulate a crash (the sweep lock is then not released).
func (e *env) startReplica(cfg Config) (*Coordinator, *nats.Conn, func()) {
	e.t.Helper()
	return e.startReplicaWith(cfg, nil)
}

// startReplicaWith is startReplica that calls setup (when set) before Start.
func (e *env) startReplicaWith(cfg Config, setup func(*Coordinator)) (*Coordinator, *nats.Conn, func()) {
	e.t.Helper()
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		e.t.Fatalf("nats: %v", err)
	}
	st, err := store.Open(e.dbURL, zap.NewNop())
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	c, err := New(cfg, Deps{Store: st, NATS: nc, Log: zaptest.NewLogger(e.t)})
	if err != nil {
		e.t.Fatalf("new coordinator: %v", err)
	}
	if setup != nil {
		setup(c)
	}
	if err := c.Start(context.Background()); err != nil {
		e.t.Fatalf("start coordinator: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		c.Close()
		nc.Close()
		st.Close()
	}
	e.t.Cleanup(stop)
	return c, nc, stop
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
