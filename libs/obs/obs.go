// Package obs is the observability kit every service shares: a zap logger, a Prometheus
// registry, and the HTTP endpoints /metrics (Prometheus text), /healthz (liveness:
// always 200 while the process serves), /readyz (200 "ready", or 503 "not ready:
// <why>" naming the first failing readiness check) and /debug/pprof/ (Go profiles).
package obs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds a JSON production logger at level ("debug", "info", "warn", "error"),
// named after the service.
func NewLogger(service, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.TimeKey = "ts"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	return log.Named(service), nil
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ReadyCheck returns nil when its part of the service is ready, or why not.
type ReadyCheck func(ctx context.Context) error

// HTTP serves /metrics, /healthz and /readyz.
type HTTP struct {
	reg *prometheus.Registry
	log *zap.Logger

	mu     sync.Mutex
	checks []namedCheck
	srv    *http.Server
	ln     net.Listener
}

type namedCheck struct {
	name  string
	check ReadyCheck
}

// NewHTTP builds the observability endpoints over reg.
func NewHTTP(reg *prometheus.Registry, log *zap.Logger) *HTTP {
	h := &HTTP{reg: reg, log: log}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", h.serveReady)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return h
}

// AddReadyCheck adds a readiness check; /readyz is 200 only when all pass.
func (h *HTTP) AddReadyCheck(name string, c ReadyCheck) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, namedCheck{name, c})
}

// Ready runs the readiness checks and returns the first failure.
func (h *HTTP) Ready(ctx context.Context) error {
	h.mu.Lock()
	checks := append([]namedCheck(nil), h.checks...)
	h.mu.Unlock()
	for _, c := range checks {
		if err := c.check(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

func (h *HTTP) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.Ready(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Listen binds addr (host:port; port 0 picks one) and serves in the background.
func (h *HTTP) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("obs http listen %s: %w", addr, err)
	}
	h.ln = ln
	go func() {
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.log.Error("obs http server stopped", zap.Error(err))
		}
	}()
	return nil
}

// Addr is the bound address, after Listen.
func (h *HTTP) Addr() string {
	if h.ln == nil {
		return ""
	}
	return h.ln.Addr().String()
}

// Close stops the HTTP server.
func (h *HTTP) Close(ctx context.Context) error { return h.srv.Shutdown(ctx) }
