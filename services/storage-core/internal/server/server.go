// Package server runs storage-core: the tributary.storage.v1 gRPC service over the log
// engine (internal/store), plus the observability HTTP endpoints.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config is storage-core's configuration (flags in cmd/storage-core).
type Config struct {
	// GRPCAddr is the gRPC listen address (port 0 picks one).
	GRPCAddr string
	// HTTPAddr is the /metrics /healthz /readyz listen address.
	HTTPAddr string
	// DataDir holds the channels.
	DataDir string
	// Fsync is "always" (fsync before every acknowledgement, group commit) or
	// "interval=<duration>" (acknowledge after the write, fsync in the background).
	Fsync string
	// WAL turns on the node write-ahead log (--wal; issue 16 step 1): appends of all
	// channels share one fsync of the WAL, segments are fsynced in the background.
	// Needs Fsync "always".
	WAL bool
	// WALFileBytes is the size WAL files roll at (--wal-file-bytes); 0 = 64 MiB.
	WALFileBytes int64
	// RetentionInterval overrides how often retention runs (0 = 30 s); for tests.
	RetentionInterval time.Duration
	// Cleaner sizes the log cleaner of compacted channels (--cleaner-threads,
	// --cleaner-dedupe-buffer-bytes, --cleaner-io-bytes-per-second, --cleaner-backoff).
	Cleaner store.CleanerOptions
	// Queues configures the queue engine (tests: clock, sweep interval).
	Queues queue.Options
	// Security is the gRPC server's TLS and caller authentication (authRules); the
	// zero value is plaintext, every caller served.
	Security grpcx.ServerSecurity
	// NodeID and Peers (--node-id, --peers "1=host:port,2=host:port,...", every node
	// of the cluster, this one included, at its gRPC address) turn on raft mode (issue
	// 16 step 2): every channel is replicated on every peer. Off (0, "") by default.
	// Not with WAL or an fsync interval. PeerSecurity is how peers are dialed.
	NodeID       uint64
	Peers        string
	PeerSecurity grpcx.DialSecurity
}

// ParsePeers parses Peers ("id=addr,..."). Errors wrap ErrConfig.
func (c *Config) ParsePeers() (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, p := range strings.Split(c.Peers, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil || n == 0 || addr == "" {
			return nil, fmt.Errorf("%w: --peers: %q is not id=host:port (id > 0)", ErrConfig, p)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("%w: --peers: node %d given twice", ErrConfig, n)
		}
		out[n] = addr
	}
	if _, ok := out[c.NodeID]; !ok {
		return nil, fmt.Errorf("%w: --peers does not name --node-id=%d", ErrConfig, c.NodeID)
	}
	return out, nil
}

// Defaults fills unset fields with the contract's defaults.
func (c *Config) Defaults() {
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:7400"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:7401"
	}
	if c.DataDir == "" {
		c.DataDir = "./run/data/storage"
	}
	if c.Fsync == "" {
		c.Fsync = "always"
	}
}

// FsyncInterval parses Fsync: 0 for "always", the duration for "interval=<d>".
func (c *Config) FsyncInterval() (time.Duration, error) {
	if c.Fsync == "always" {
		return 0, nil
	}
	if v, ok := strings.CutPrefix(c.Fsync, "interval="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%w: --fsync=%q: bad interval", ErrConfig, c.Fsync)
		}
		return d, nil
	}
	return 0, fmt.Errorf("%w: --fsync=%q: want always or interval=<duration>", ErrConfig, c.Fsync)
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("%w: --data-dir is empty", ErrConfig)
	}
	d, err := c.FsyncInterval()
	if err != nil {
		return err
	}
	if c.WAL && d > 0 {
		return fmt.Errorf("%w: --wal fsyncs the write-ahead log before every acknowledgement; it does not take --fsync=%s", ErrConfig, c.Fsync)
	}
	if c.Cleaner.DedupeBufferBytes < 0 || c.Cleaner.IOBytesPerSecond < 0 || c.Cleaner.Backoff < 0 {
		return fmt.Errorf("%w: --cleaner-dedupe-buffer-bytes, --cleaner-io-bytes-per-second and --cleaner-backoff must not be negative", ErrConfig)
	}
	if c.Cleaner.Threads > 0 && c.Cleaner.DedupeBufferBytes > 0 && c.Cleaner.DedupeBufferBytes/int64(c.Cleaner.Threads) < 1<<20 {
		return fmt.Errorf("%w: --cleaner-dedupe-buffer-bytes=%d: at least 1 MiB per cleaner thread", ErrConfig, c.Cleaner.DedupeBufferBytes)
	}
	if c.WALFileBytes != 0 && c.WALFileBytes < 1<<20 {
		return fmt.Errorf("%w: --wal-file-bytes=%d: at least 1048576", ErrConfig, c.WALFileBytes)
	}
	if c.NodeID != 0 || c.Peers != "" {
		if c.WAL || d > 0 {
			return fmt.Errorf("%w: raft mode (--node-id, --peers) has its own write-ahead log: not with --wal or --fsync=interval", ErrConfig)
		}
		if _, err := c.ParsePeers(); err != nil {
			return err
		}
	}
	return c.Security.Validate()
}

// Server is a running storage-core.
type Server struct {
	cfg   Config
	log   *zap.Logger
	reg   *prometheus.Registry
	store *store.Store
	qm    *queue.Manager
	grpc  *grpc.Server
	http  *obs.HTTP
	ln    net.Listener
	svc   *service

	closeOnce sync.Once
}

// New opens the data directory (recovering every channel) and binds the listeners.
// Serving starts with Run.
func New(cfg Config, log *zap.Logger) (*Server, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	interval, _ := cfg.FsyncInterval()
	reg := obs.NewRegistry()
	m := store.NewMetrics(reg)
	sopts := store.Options{FsyncInterval: interval, WAL: cfg.WAL, WALFileBytes: cfg.WALFileBytes, RetentionInterval: cfg.RetentionInterval, Metrics: m, Cleaner: cfg.Cleaner}
	if cfg.NodeID != 0 {
		peers, _ := cfg.ParsePeers()
		dial, err := cfg.PeerSecurity.DialOptions()
		if err != nil {
			return nil, err
		}
		sopts.Raft = &store.RaftOptions{NodeID: cfg.NodeID, Peers: peers, DialOptions: dial}
	}
	st, err := store.Open(cfg.DataDir, sopts, log.Named("store"))
	if err != nil {
		return nil, fmt.Errorf("open data dir: %w", err)
	}
	qopts := cfg.Queues
	if qopts.Metrics == nil {
		qopts.Metrics = queue.NewMetrics(reg)
	}
	qm, err := queue.Open(st, filepath.Join(cfg.DataDir, "queues.db"), qopts, log.Named("queue"))
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("open queues: %w", err)
	}
	secOpts, err := cfg.Security.ServerOptions(authRules, log.Named("auth"))
	if err != nil {
		_ = qm.Close()
		_ = st.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, reg: reg, store: st, qm: qm}
	s.svc = newService(st, log, reg)
	s.svc.qm = qm
	s.grpc = grpcx.NewServer(log, append(transportOptions(st.RaftTransport() != nil), secOpts...)...)
	storagev1.RegisterStorageServiceServer(s.grpc, s.svc)
	storagev1.RegisterQueueServiceServer(s.grpc, &queueService{s: s.svc, qm: qm})
	storagev1.RegisterShareServiceServer(s.grpc, &shareService{s: s.svc, qm: qm})
	if tr := st.RaftTransport(); tr != nil {
		tr.RegisterOn(s.grpc)
	}
	grpcx.RegisterStandard(s.grpc)
	s.http = obs.NewHTTP(reg, log)
	s.http.AddReadyCheck("data-dir", func(context.Context) error { return st.Ready() })
	s.http.AddReadyCheck("queues", func(context.Context) error { return qm.Ready() })
	ln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		s.grpc.Stop() // ends its handler goroutines (grpcx's stream workers)
		_ = qm.Close()
		_ = st.Close()
		return nil, fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	s.ln = ln
	if err := s.http.Listen(cfg.HTTPAddr); err != nil {
		_ = ln.Close()
		s.grpc.Stop()
		_ = qm.Close()
		_ = st.Close()
		return nil, err
	}
	return s, nil
}

// transportOptions are the bulk transport sizes (grpcx.BulkServerOptions) for the
// MiB-sized messages of AppendBatches and Fetch, the interceptors that answer Fetch
// and Receive by reference and, in raft mode, those that name the leader in the
// trailers of a not-leader answer and the raft streams' buffer pool.
func transportOptions(raft bool) []grpc.ServerOption {
	if raft {
		opts := append(grpcx.BulkServerOptions(), raftnode.ServerOptions()...)
		return append(opts, grpc.ChainUnaryInterceptor(fetchByReference, receiveDirect, leaderUnary), grpc.ChainStreamInterceptor(leaderStream))
	}
	return append(grpcx.BulkServerOptions(), grpc.ChainUnaryInterceptor(fetchByReference, receiveDirect))
}

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.ln.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.http.Addr() }

// Queues exposes the queue engine (tests).
func (s *Server) Queues() *queue.Manager { return s.qm }

// Store exposes the engine (tests).
func (s *Server) Store() *store.Store { return s.store }

// Run serves until ctx ends, then shuts down: stops accepting calls, ends streams,
// closes every channel (fsync) and the HTTP server.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("listening", zap.String("grpc", s.GRPCAddr()), zap.String("http", s.HTTPAddr()),
		zap.String("data_dir", s.cfg.DataDir), zap.String("fsync", s.cfg.Fsync),
		zap.Bool("tls", s.cfg.Security.TLS.Enabled()), zap.String("auth", s.cfg.Security.Auth))
	err := grpcx.Serve(ctx, s.grpc, s.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	s.shutdown()
	return err
}

func (s *Server) shutdown() {
	s.closeOnce.Do(func() {
		s.svc.stop()
		// Raft mode: the peer streams never end by themselves; proposals still
		// waiting answer UNAVAILABLE (closed), their outcome unknown.
		s.store.StopReplication()
		grpcx.GracefulStop(s.grpc, 5*time.Second)
		if err := s.qm.Close(); err != nil {
			s.log.Error("close queues", zap.Error(err))
		}
		if err := s.store.Close(); err != nil {
			s.log.Error("close store", zap.Error(err))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.http.Close(ctx); err != nil {
			s.log.Warn("close http", zap.Error(err))
		}
		s.log.Info("stopped")
	})
}
