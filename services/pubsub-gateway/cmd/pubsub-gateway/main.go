// Command pubsub-gateway serves the Google Cloud Pub/Sub v1 gRPC API (emulator mode) over
// Tributary's storage-core and coordinator. Clients find it through
// PUBSUB_EMULATOR_HOST. Flags fall back to TRIBUTARY_PUBSUB_GATEWAY_<FLAG> environment
// variables.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/tributary/tributary/libs/flagenv"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	"github.com/tributary/tributary/services/pubsub-gateway/internal/handler"
	"github.com/tributary/tributary/services/pubsub-gateway/internal/server"
)

func main() {
	obs.TuneDataPathGC()
	flagenv.Exit("pubsub-gateway", run())
}

func run() error {
	fs := flag.NewFlagSet("pubsub-gateway", flag.ContinueOnError)
	var cfg server.Config
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:8085", "Pub/Sub gRPC listener (host:port; port 0 picks one)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7431", "HTTP address for /metrics, /healthz, /readyz")
	fs.StringVar(&cfg.StorageAddr, "storage-addr", "127.0.0.1:7400", "storage-core gRPC address; several, comma-separated (host:port,host:port,...), are the nodes of a storage-core cluster in raft mode: each call goes to its channel's leader")
	fs.StringVar(&cfg.CoordinatorAddr, "coordinator-addr", "127.0.0.1:7410", "coordinator gRPC address")
	fs.StringVar(&cfg.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS URL (lease wake-ups between replicas and from the coordinator's sweep); empty = none, streams poll")
	fs.StringVar(&cfg.ClusterID, "cluster-id", "tributary", "cluster id (prefixes NATS subjects)")
	fs.Int64Var(&cfg.StreamBufferBytes, "stream-buffer-bytes", handler.DefaultStreamBufferBytes, "message bytes all StreamingPull streams may hold for slow clients; each open stream gets an equal share and stops pulling past it")
	grpcx.RegisterTLSServerFlags(fs, &cfg.TLS)
	clientSec := grpcx.RegisterClientFlags(fs, "storage", "coordinator")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := flagenv.Parse(fs, "pubsub-gateway", os.Args[1:]); err != nil {
		return err
	}
	cfg.StorageSecurity, cfg.CoordinatorSecurity = clientSec.For("storage"), clientSec.For("coordinator")
	log, err := obs.NewLogger("pubsub-gateway", *level)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	srv, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx)
}
