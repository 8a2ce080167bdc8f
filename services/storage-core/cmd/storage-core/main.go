// Command storage-core serves tributary.storage.v1: named channel logs on local disk.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/tributary/tributary/libs/flagenv"
	"github.com/tributary/tributary/libs/obs"
	"github.com/tributary/tributary/services/storage-core/internal/server"
	"go.uber.org/zap"
)

// gcPercent replaces GOGC's default of 100. The data path allocates MiB-sized buffers
// per request (Produce and Fetch bytes) over a live heap of a few tens of MiB, so at
// 100 the collector ran every few requests; at 400 the heap may grow to ~5x the live
// heap between collections, for ~10-25% more produce and consume throughput in
// kafkabench. memoryLimit keeps that growth bounded: as the heap nears it the runtime
// collects sooner whatever the percent (soft limit). GOGC and GOMEMLIMIT environment
// variables win.
const (
	gcPercent   = 400
	memoryLimit = 1 << 30
)

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "storage-core:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg server.Config
	fs := flag.NewFlagSet("storage-core", flag.ContinueOnError)
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:7400", "gRPC listen address (host:port; port 0 picks one)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7401", "HTTP listen address for /metrics /healthz /readyz")
	fs.StringVar(&cfg.DataDir, "data-dir", "./run/data/storage", "data directory")
	fs.StringVar(&cfg.Fsync, "fsync", "always", "always (fsync before ack, group commit) or interval=<duration>")
	fs.StringVar(&cfg.CoordinatorAddr, "coordinator-addr", "127.0.0.1:7410", "coordinator gRPC address, asked for consumer groups' committed offsets (\"\" disables)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := flagenv.Parse(fs, "storage-core", os.Args[1:]); err != nil {
		return err
	}
	log, err := obs.NewLogger("storage-core", *level)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	srv, err := server.New(cfg, log)
	if err != nil {
		log.Error("start failed", zap.Error(err))
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx)
}
