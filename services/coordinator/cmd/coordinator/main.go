// Command coordinator runs the Tributary control plane: the Kafka topic registry and
// producer ids in Postgres, served over gRPC (tributary.coordinator.v1).
// `coordinator mqtt-users ...` manages the MQTT listener logins of a running one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/flagenv"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	"github.com/tributary/tributary/services/coordinator/internal/mqttusers"
	"github.com/tributary/tributary/services/coordinator/internal/server"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "mqtt-users" {
		if err := mqttusers.Main(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "coordinator mqtt-users:", err)
			os.Exit(1)
		}
		return
	}
	flagenv.Exit("coordinator", run(os.Args[1:]))
}

func run(args []string) error {
	cfg := server.DefaultConfig()
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "CoordinatorService gRPC listen address (host:port)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "listen address of /metrics, /healthz and /readyz")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", cfg.PostgresURL, "Postgres URL of the coordinator database (created when missing)")
	urlFile := fs.String("postgres-url-file", "", "file holding the Postgres URL (overrides --postgres-url)")
	fs.StringVar(&cfg.StorageAddr, "storage-addr", cfg.StorageAddr, "storage-core gRPC address; several, comma-separated, are the nodes of a storage-core cluster in raft mode (calls follow the leaders)")
	fs.StringVar(&cfg.NATSURL, "nats-url", cfg.NATSURL, "NATS server URL")
	fs.StringVar(&cfg.ClusterID, "cluster-id", cfg.ClusterID, "cluster id; NATS subjects start with tributary.<cluster-id>.")
	fs.DurationVar(&cfg.TransactionMaxTimeout, "transaction-max-timeout", cfg.TransactionMaxTimeout,
		"largest transaction.timeout.ms a Kafka transactional producer may ask for (Kafka transaction.max.timeout.ms)")
	fs.DurationVar(&cfg.TransactionalIDExpiration, "transactional-id-expiration", cfg.TransactionalIDExpiration,
		"delete a Kafka transactional id without an open transaction unused this long (Kafka transactional.id.expiration.ms)")
	fs.DurationVar(&cfg.ConsumerGroups.SessionTimeout, "group-consumer-session-timeout", cfg.ConsumerGroups.SessionTimeout,
		"KIP-848 consumer group member session timeout (Kafka group.consumer.session.timeout.ms)")
	fs.DurationVar(&cfg.ConsumerGroups.HeartbeatInterval, "group-consumer-heartbeat-interval", cfg.ConsumerGroups.HeartbeatInterval,
		"KIP-848 consumer group heartbeat interval (Kafka group.consumer.heartbeat.interval.ms)")
	assignors := fs.String("group-consumer-assignors", strings.Join(cfg.ConsumerGroups.Assignors, ","),
		"KIP-848 server-side assignors, the first the default: uniform, range (Kafka group.consumer.assignors)")
	fs.IntVar(&cfg.ConsumerGroups.MaxSize, "group-consumer-max-size", 0,
		"most members of a KIP-848 consumer group, 0 for no limit (Kafka group.consumer.max.size)")
	fs.DurationVar(&cfg.ShareGroups.SessionTimeout, "group-share-session-timeout", cfg.ShareGroups.SessionTimeout,
		"KIP-932 share group member session timeout (Kafka group.share.session.timeout.ms)")
	fs.DurationVar(&cfg.ShareGroups.HeartbeatInterval, "group-share-heartbeat-interval", cfg.ShareGroups.HeartbeatInterval,
		"KIP-932 share group heartbeat interval (Kafka group.share.heartbeat.interval.ms)")
	fs.IntVar(&cfg.ShareGroups.MaxSize, "group-share-max-size", cfg.ShareGroups.MaxSize,
		"most members of a KIP-932 share group (Kafka group.share.max.size)")
	grpcx.RegisterServerFlags(fs, &cfg.Security)
	clientSec := grpcx.RegisterClientFlags(fs, "storage")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: coordinator [flags]   (runs the coordinator)\n       coordinator mqtt-users ...   (manages MQTT listener logins of a running one; mqtt-users --help)\nflags:\n")
		fs.PrintDefaults()
	}
	if err := flagenv.Parse(fs, "coordinator", args); err != nil {
		return err
	}
	cfg.StorageSecurity = clientSec.For("storage")
	cfg.ConsumerGroups.Assignors = strings.Split(*assignors, ",")
	if *urlFile != "" {
		u, err := flagenv.ReadSecret(*urlFile)
		if err != nil {
			return err
		}
		cfg.PostgresURL = u
	}
	log, err := obs.NewLogger("coordinator", *level)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg, log)
	if err != nil {
		log.Error("start failed", zap.Error(err))
		return err
	}
	return srv.Run(ctx)
}
