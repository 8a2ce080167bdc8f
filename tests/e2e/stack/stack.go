// Package stack starts Tributary as real processes — storage-core, one or more
// coordinators, N kafka-gateway and M pubsub-gateway replicas and, on request, mqtt-bridges
// (StartMQTTBridge) — against the test Postgres and NATS, for end-to-end tests and
// benchmarks. Each stack gets its own data directory, Postgres database
// (tributary_e2e_<random>) and cluster id, and free ports on 127.0.0.1, so stacks can
// run side by side. Processes can be killed and restarted on the same ports and data.
package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/tests/e2e/testenv"
)

// Options configure a stack. Zero values pick the defaults noted.
type Options struct {
	// Gateways is the number of kafka-gateway replicas (node ids 0..N-1). Default 1.
	Gateways int
	// PubSubGateways is the number of pubsub-gateway replicas. Default 0.
	PubSubGateways int
	// Coordinators is the number of coordinator replicas (one database, one cluster
	// id). Default 1. The gateways and storage-core use the first one; the others
	// compete for the sweep locks.
	Coordinators int
	// StorageNodes is the number of storage-core processes. 0 or 1: one, as always.
	// More: a cluster in raft mode (--node-id 1..N, --peers), named "storage-core-1",
	// ... (Stack.Storages), each with its own data directory under DataDir; the
	// coordinators and kafka-gateways get every address (--storage-addr a,b,c), the
	// pubsub-gateways the first. Fsync is not passed to them (raft mode has its own WAL).
	StorageNodes int
	// Fsync is storage-core's --fsync: "always" (default) or "interval=<dur>".
	Fsync string
	// DataDir reuses a storage data directory; empty = a temp dir removed at Close.
	DataDir string
	// Database reuses a Postgres database; empty = a new tributary_e2e_<random>
	// database, dropped at Close.
	Database string
	// ClusterID is passed as --cluster-id; empty = e2e-<random>.
	ClusterID string
	// LogLevel for every process. Default "info".
	LogLevel string
	// BinDir holds the binaries; empty = Binaries().
	BinDir string
	// Listeners are Kafka listeners (SSL, SASL_PLAINTEXT, SASL_SSL) each gateway serves
	// beside PLAINTEXT, each on a free port (Stack.ListenerAddrs); TLS and SASL flags go
	// in GatewayFlags.
	Listeners []string
	// Extra flags per service, appended after the ones the stack sets.
	StorageFlags, CoordinatorFlags, GatewayFlags, PubSubFlags []string
	// ReadyTimeout bounds each wait for /readyz. Default 60 s.
	ReadyTimeout time.Duration
	// StopTimeout bounds each graceful stop before SIGKILL. Default 20 s.
	StopTimeout time.Duration
}

// Stack is a running set of processes.
type Stack struct {
	// StorageAddr is storage-core's gRPC address (with Options.StorageNodes > 1 every
	// node's, comma-separated), CoordinatorAddr the coordinator's.
	StorageAddr, CoordinatorAddr string
	// KafkaAddrs lists each gateway's Kafka listener, by node id.
	KafkaAddrs []string
	// ListenerAddrs lists each gateway's address of every Options.Listeners name, by
	// node id.
	ListenerAddrs map[string][]string
	// PubSubAddrs lists each pubsub-gateway's gRPC address (for PUBSUB_EMULATOR_HOST).
	PubSubAddrs []string
	// DataDir, LogDir, Database and ClusterID as used by this stack.
	DataDir, LogDir, Database, ClusterID string
	// PostgresURL is the coordinator's --postgres-url (the stack's own database).
	PostgresURL string

	Storage *Proc
	// Storages holds every storage-core process: Storage alone, or the nodes of a raft
	// cluster (Options.StorageNodes), Storage being the first.
	Storages    []*Proc
	Coordinator *Proc
	// Coordinators holds every coordinator replica: Coordinator ("coordinator"), then
	// "coordinator-1", ... (Options.Coordinators).
	Coordinators []*Proc
	Gateways     []*Proc
	// PubSub holds the pubsub-gateway replicas ("pubsub-gateway-0", ...).
	PubSub []*Proc
	// Bridges are the mqtt-bridge processes started with StartMQTTBridge.
	Bridges []*Proc

	opts      Options
	binDir    string
	ownData   bool
	ownLogs   bool
	ownDB     bool
	closeOnce sync.Once
	closeErr  error
}

// StorageWALEnv set to 1 starts every storage-core with --wal (the node write-ahead
// log, issue 16 step 1), except those with an --fsync interval, so the suite runs
// against WAL mode: TRIBUTARY_E2E_STORAGE_WAL=1 go test -run TestKill .
const StorageWALEnv = "TRIBUTARY_E2E_STORAGE_WAL"

// Start creates the database and directories, then starts storage-core, coordinator
// and the gateways in that order, each waited on until /readyz answers 200. On error
// everything started is torn down and the error carries the failing process's log tail.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Gateways <= 0 {
		opts.Gateways = 1
	}
	if opts.Coordinators <= 0 {
		opts.Coordinators = 1
	}
	if opts.Fsync == "" {
		opts.Fsync = "always"
	}
	if os.Getenv(StorageWALEnv) == "1" && opts.Fsync == "always" {
		opts.StorageFlags = append([]string{"--wal"}, opts.StorageFlags...)
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 20 * time.Second
	}
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = Binaries(ctx); err != nil {
			return nil, err
		}
	}
	id := randomID()
	s := &Stack{opts: opts, ClusterID: opts.ClusterID, DataDir: opts.DataDir, Database: opts.Database, binDir: bin}
	if s.ClusterID == "" {
		s.ClusterID = "e2e-" + id
	}
	var err error
	if s.LogDir, err = os.MkdirTemp("", "tributary-e2e-logs-"); err != nil {
		return nil, err
	}
	s.ownLogs = true
	if s.DataDir == "" {
		if s.DataDir, err = os.MkdirTemp("", "tributary-e2e-data-"); err != nil {
			_ = s.Close()
			return nil, err
		}
		s.ownData = true
	}
	if s.Database == "" {
		s.Database = "tributary_e2e_" + id
		if err := createDatabase(ctx, s.Database); err != nil {
			_ = s.Close()
			return nil, err
		}
		s.ownDB = true
	}
	if s.PostgresURL, err = databaseURL(s.Database); err != nil {
		_ = s.Close()
		return nil, err
	}

	storageGRPC, storageHTTP := freeAddr(), freeAddr()
	coordGRPC, coordHTTP := freeAddr(), freeAddr()
	s.StorageAddr, s.CoordinatorAddr = storageGRPC, coordGRPC
	if opts.StorageNodes <= 1 {
		s.Storage = &Proc{
			Name: StorageCore, HTTPAddr: storageHTTP, LogPath: filepath.Join(s.LogDir, StorageCore+".log"),
			DataDir: s.DataDir, bin: filepath.Join(bin, StorageCore),
			args: append([]string{
				"--grpc-addr", storageGRPC, "--http-addr", storageHTTP,
				"--data-dir", s.DataDir, "--fsync", opts.Fsync, "--log-level", opts.LogLevel,
			}, opts.StorageFlags...),
		}
		s.Storages = []*Proc{s.Storage}
	} else {
		addrs := make([]string, opts.StorageNodes)
		peers := make([]string, opts.StorageNodes)
		for i := range addrs {
			addrs[i] = freeAddr()
			peers[i] = fmt.Sprintf("%d=%s", i+1, addrs[i])
		}
		s.StorageAddr = strings.Join(addrs, ",")
		for i, a := range addrs {
			name := fmt.Sprintf("%s-%d", StorageCore, i+1)
			httpAddr, dataDir := freeAddr(), filepath.Join(s.DataDir, name)
			s.Storages = append(s.Storages, &Proc{
				Name: name, HTTPAddr: httpAddr, LogPath: filepath.Join(s.LogDir, name+".log"),
				DataDir: dataDir, bin: filepath.Join(bin, StorageCore),
				args: append([]string{
					"--grpc-addr", a, "--http-addr", httpAddr,
					"--data-dir", dataDir, "--log-level", opts.LogLevel,
					fmt.Sprintf("--node-id=%d", i+1), "--peers=" + strings.Join(peers, ","),
				}, opts.StorageFlags...),
			})
		}
		s.Storage = s.Storages[0]
	}
	for i := 0; i < opts.Coordinators; i++ {
		name, grpcAddr, httpAddr := Coordinator, coordGRPC, coordHTTP
		if i > 0 {
			name, grpcAddr, httpAddr = Coordinator+"-"+strconv.Itoa(i), freeAddr(), freeAddr()
		}
		s.Coordinators = append(s.Coordinators, &Proc{
			Name: name, HTTPAddr: httpAddr, LogPath: filepath.Join(s.LogDir, name+".log"),
			bin: filepath.Join(bin, Coordinator),
			args: append([]string{
				"--grpc-addr", grpcAddr, "--http-addr", httpAddr,
				"--postgres-url", s.PostgresURL, "--storage-addr", s.StorageAddr,
				"--nats-url", testenv.NATSURL(), "--cluster-id", s.ClusterID, "--log-level", opts.LogLevel,
			}, opts.CoordinatorFlags...),
		})
	}
	s.Coordinator = s.Coordinators[0]
	for i := 0; i < opts.Gateways; i++ {
		listen, httpAddr := freeAddr(), freeAddr()
		name := KafkaGateway + "-" + strconv.Itoa(i)
		s.KafkaAddrs = append(s.KafkaAddrs, listen)
		listeners := "PLAINTEXT://" + listen
		for _, l := range opts.Listeners {
			if s.ListenerAddrs == nil {
				s.ListenerAddrs = map[string][]string{}
			}
			addr := freeAddr()
			s.ListenerAddrs[l] = append(s.ListenerAddrs[l], addr)
			listeners += "," + l + "://" + addr
		}
		args := []string{
			"--listen", listen, "--advertised-addr", listen, "--http-addr", httpAddr,
			"--node-id", strconv.Itoa(i), "--storage-addr", s.StorageAddr,
			"--coordinator-addr", coordGRPC, "--nats-url", testenv.NATSURL(),
			"--cluster-id", s.ClusterID, "--log-level", opts.LogLevel,
		}
		if len(opts.Listeners) > 0 {
			args = append(args, "--listeners", listeners)
		}
		s.Gateways = append(s.Gateways, &Proc{
			Name: name, HTTPAddr: httpAddr, LogPath: filepath.Join(s.LogDir, name+".log"),
			bin:  filepath.Join(bin, KafkaGateway),
			args: append(args, opts.GatewayFlags...),
		})
	}
	for i := 0; i < opts.PubSubGateways; i++ {
		listen, httpAddr := freeAddr(), freeAddr()
		name := PubSubGateway + "-" + strconv.Itoa(i)
		s.PubSubAddrs = append(s.PubSubAddrs, listen)
		s.PubSub = append(s.PubSub, &Proc{
			Name: name, HTTPAddr: httpAddr, LogPath: filepath.Join(s.LogDir, name+".log"),
			bin: filepath.Join(bin, PubSubGateway),
			args: append([]string{
				"--grpc-addr", listen, "--http-addr", httpAddr,
				"--storage-addr", s.StorageAddr, "--coordinator-addr", coordGRPC,
				"--nats-url", testenv.NATSURL(), "--cluster-id", s.ClusterID,
				"--log-level", opts.LogLevel,
			}, opts.PubSubFlags...),
		})
	}
	if err := s.StartAll(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Procs lists every process in start order.
func (s *Stack) Procs() []*Proc {
	return append(append(append(append(append([]*Proc(nil), s.Storages...), s.Coordinators...), s.Gateways...), s.PubSub...), s.Bridges...)
}

// Proc finds a process by name ("storage-core", "coordinator", "kafka-gateway-1").
func (s *Stack) Proc(name string) (*Proc, error) {
	for _, p := range s.Procs() {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no process %q in this stack", name)
}

// StartAll starts every process that is not running, in dependency order, and waits
// until each is ready.
func (s *Stack) StartAll(ctx context.Context) error {
	// Storage nodes start together: a raft node's groups need a majority.
	for _, p := range s.Storages {
		if !p.Running() {
			if err := p.start(); err != nil {
				return err
			}
		}
	}
	for _, p := range s.Storages {
		if err := s.ready(ctx, p); err != nil {
			return err
		}
	}
	for _, p := range s.Coordinators {
		if err := s.startProc(ctx, p); err != nil {
			return err
		}
	}
	gateways := append(append([]*Proc(nil), s.Gateways...), s.PubSub...)
	for _, p := range gateways {
		if !p.Running() {
			if err := p.start(); err != nil {
				return err
			}
		}
	}
	for _, p := range gateways {
		if err := s.ready(ctx, p); err != nil {
			return err
		}
	}
	for _, p := range s.Bridges {
		if err := s.startProc(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// StartMQTTBridge writes configYAML to the stack's log directory and starts an
// mqtt-bridge named name with it, pointed at this stack's storage-core and coordinator
// and on a free HTTP port through the environment (TRIBUTARY_MQTT_STORAGE_ADDR, …,
// which override the file), then waits until it is ready. Kill and Restart find it by
// name.
func (s *Stack) StartMQTTBridge(ctx context.Context, name, configYAML string) (*Proc, error) {
	if _, err := s.Proc(name); err == nil {
		return nil, fmt.Errorf("process %q already in this stack", name)
	}
	path := filepath.Join(s.LogDir, name+".yaml")
	if err := os.WriteFile(path, []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	httpAddr := freeAddr()
	p := &Proc{
		Name: name, HTTPAddr: httpAddr, LogPath: filepath.Join(s.LogDir, name+".log"),
		bin:  filepath.Join(s.binDir, MQTTBridge),
		args: []string{"-C", path, "--log-level", s.opts.LogLevel},
		env: []string{
			"TRIBUTARY_MQTT_HTTP_ADDR=" + httpAddr,
			"TRIBUTARY_MQTT_STORAGE_ADDR=" + s.StorageAddr,
			"TRIBUTARY_MQTT_COORDINATOR_ADDR=" + s.CoordinatorAddr,
			"TRIBUTARY_MQTT_NATS_URL=" + testenv.NATSURL(),
			"TRIBUTARY_MQTT_CLUSTER_ID=" + s.ClusterID,
		},
	}
	s.Bridges = append(s.Bridges, p)
	if err := s.startProc(ctx, p); err != nil {
		return p, err
	}
	return p, nil
}

// Bin is the path of the named binary (Coordinator, MQTTBridge, ...) this stack runs.
func (s *Stack) Bin(name string) string { return filepath.Join(s.binDir, name) }

// FreeAddr returns a free 127.0.0.1:port not handed out before in this process.
func FreeAddr() string { return freeAddr() }

func (s *Stack) startProc(ctx context.Context, p *Proc) error {
	if p.Running() {
		return nil
	}
	if err := p.start(); err != nil {
		return err
	}
	return s.ready(ctx, p)
}

func (s *Stack) ready(ctx context.Context, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ReadyTimeout)
	defer cancel()
	return p.waitReady(ctx)
}

// Kill sends sig to the named process and waits until it has exited.
func (s *Stack) Kill(name string, sig syscall.Signal) error {
	p, err := s.Proc(name)
	if err != nil {
		return err
	}
	if err := p.Signal(sig); err != nil {
		return err
	}
	_ = p.Wait(s.opts.StopTimeout) // exit status of a killed process is expected non-zero
	if p.Running() {
		return fmt.Errorf("%s still running after %v", name, sig)
	}
	return nil
}

// Restart starts the named process again (same ports, flags and data) after a Kill and
// waits until it is ready. A process still running is left alone.
func (s *Stack) Restart(ctx context.Context, name string) error {
	p, err := s.Proc(name)
	if err != nil {
		return err
	}
	return s.startProc(ctx, p)
}

// KillStorage kills storage-core with SIGKILL (kill -9) and waits for it to be gone.
func (s *Stack) KillStorage() error { return s.Kill(StorageCore, syscall.SIGKILL) }

// RestartStorage starts storage-core again on the same ports and data directory.
func (s *Stack) RestartStorage(ctx context.Context) error { return s.Restart(ctx, StorageCore) }

// StopAll stops every process gracefully (SIGTERM, then wait; SIGKILL after the stop
// timeout), gateways first. The error lists processes that did not exit with status 0.
func (s *Stack) StopAll() error {
	var errs []error
	procs := s.Procs()
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i] == nil {
			continue
		}
		if err := procs[i].Stop(s.opts.StopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RestartAll stops every process gracefully and starts them again on the same ports,
// data directory and database.
func (s *Stack) RestartAll(ctx context.Context) error {
	if err := s.StopAll(); err != nil {
		return err
	}
	return s.StartAll(ctx)
}

// Crashes lists processes that exited without the stack asking them to.
func (s *Stack) Crashes() []string {
	var out []string
	for _, p := range s.Procs() {
		if p != nil {
			out = append(out, p.Crashes()...)
		}
	}
	return out
}

// LogTails returns the last n lines of every process's log, each under a header.
func (s *Stack) LogTails(n int) string {
	var b strings.Builder
	for _, p := range s.Procs() {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "----- %s (%s), last %d lines -----\n%s\n", p.Name, p.LogPath, n, Tail(p.LogPath, n))
	}
	return b.String()
}

// LogMarks records how long each process's log is now, for LogsSince.
func (s *Stack) LogMarks() map[string]int64 {
	m := map[string]int64{}
	for _, p := range s.Procs() {
		if p == nil {
			continue
		}
		if fi, err := os.Stat(p.LogPath); err == nil {
			m[p.Name] = fi.Size()
		}
	}
	return m
}

// LogsSince returns, for every process, at most the last n lines written to its log
// after marks were taken (LogMarks).
func (s *Stack) LogsSince(marks map[string]int64, n int) string {
	var b strings.Builder
	for _, p := range s.Procs() {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "----- %s (%s), new lines (last %d at most) -----\n%s\n", p.Name, p.LogPath, n, tailFrom(p.LogPath, marks[p.Name], n))
	}
	return b.String()
}

// KeepEnv names an environment variable; when it is "1" Close keeps the temp data and
// log directories (and the database) for inspection.
const KeepEnv = "TRIBUTARY_E2E_KEEP"

// Close stops every process, drops the database the stack created and removes the
// directories it created. The error reports unclean stops and cleanup failures.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.Storage != nil {
			if err := s.StopAll(); err != nil {
				errs = append(errs, err)
			}
		}
		keep := os.Getenv(KeepEnv) == "1"
		if s.ownDB && !keep {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := dropDatabase(ctx, s.Database); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		if s.ownData && !keep {
			errs = append(errs, os.RemoveAll(s.DataDir))
		}
		if s.ownLogs && !keep {
			errs = append(errs, os.RemoveAll(s.LogDir))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	portsMu sync.Mutex
	given   = map[string]bool{}
)

// freeAddr picks a free 127.0.0.1 port by listening on port 0 and closing; ports
// already handed out in this process are not handed out again.
func freeAddr() string {
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(fmt.Sprintf("stack: no free port: %v", err))
		}
		addr := l.Addr().String()
		_ = l.Close()
		if !given[addr] {
			given[addr] = true
			return addr
		}
	}
}

func databaseURL(db string) (string, error) {
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		return "", fmt.Errorf("bad postgres url: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

func createDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func dropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}
