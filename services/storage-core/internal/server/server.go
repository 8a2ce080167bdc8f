// Package server runs storage-core: the tributary.storage.v1 gRPC service over the log
// engine (internal/store), plus the observability HTTP endpoints.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
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
	// Queues configures the queue engine (tests: clock, sweep interval).
	Queues queue.Options
	// Security is the gRPC server's TLS and caller authentication (authRules); the
	// zero value is plaintext, every caller served.
	Security grpcx.ServerSecurity
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
	if c.WALFileBytes != 0 && c.WALFileBytes < 1<<20 {
		return fmt.Errorf("%w: --wal-file-bytes=%d: at least 1048576", ErrConfig, c.WALFileBytes)
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
	st, err := store.Open(cfg.DataDir, store.Options{FsyncInterval: interval, WAL: cfg.WAL, WALFileBytes: cfg.WALFileBytes, RetentionInterval: cfg.RetentionInterval, Metrics: m}, log.Named("store"))
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
	s.grpc = grpcx.NewServer(log, append(transportOptions(), secOpts...)...)
	storagev1.RegisterStorageServiceServer(s.grpc, s.svc)
	storagev1.RegisterQueueServiceServer(s.grpc, &queueService{s: s.svc, qm: qm})
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
// MiB-sized messages of AppendBatches and Fetch, and the interceptors that answer
// Fetch and Receive by reference.
func transportOptions() []grpc.ServerOption {
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
