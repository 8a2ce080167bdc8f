// Command kafka-gateway serves the Kafka wire protocol over Tributary's storage-core and
// coordinator. Flags fall back to TRIBUTARY_KAFKA_GATEWAY_<FLAG> environment variables.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tributary/tributary/libs/flagenv"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	"github.com/tributary/tributary/services/kafka-gateway/internal/server"
)

func main() {
	obs.TuneDataPathGC()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("kafka-gateway", flag.ContinueOnError)
	var cfg server.Config
	var nodeID, partitions, maxFrame int
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:9092", "Kafka listener address (host:port; port 0 picks one)")
	fs.StringVar(&cfg.AdvertisedAddr, "advertised-addr", "", "host:port announced to clients and peers (default: the listen address)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7421", "HTTP address for /metrics, /healthz, /readyz")
	fs.IntVar(&nodeID, "node-id", 0, "Kafka broker id of this replica (unique per replica; -1 derives one from the advertised address)")
	fs.StringVar(&cfg.Rack, "rack", "", "broker rack announced in Metadata (optional)")
	fs.StringVar(&cfg.StorageAddr, "storage-addr", "127.0.0.1:7400", "storage-core gRPC address")
	fs.StringVar(&cfg.CoordinatorAddr, "coordinator-addr", "127.0.0.1:7410", "coordinator gRPC address")
	fs.StringVar(&cfg.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS URL (replica announcements, topic change notices); empty = none")
	fs.StringVar(&cfg.ClusterID, "cluster-id", "tributary", "cluster id (prefixes NATS subjects, derives the Kafka cluster id)")
	fs.BoolVar(&cfg.AutoCreateTopics, "auto-create-topics", true, "create unknown topics on Metadata and Produce")
	fs.IntVar(&partitions, "default-partitions", 1, "partition count of auto-created topics (1..256)")
	fs.IntVar(&maxFrame, "max-request-bytes", server.DefaultMaxFrameBytes, "largest Kafka request frame accepted, in bytes; larger closes the connection")
	fs.Int64Var(&cfg.MaxInFlightBytes, "max-inflight-request-bytes", server.DefaultMaxInFlightBytes, "request bytes held in memory by all connections at once; readers wait beyond it")
	clientSec := grpcx.RegisterClientFlags(fs, "storage", "coordinator")
	authorizer := fs.String("authorizer", "", `ACL authorizer (Kafka authorizer.class.name): "" = none (every request allowed, ACL APIs answer SECURITY_DISABLED), "acl" (or org.apache.kafka.metadata.authorizer.StandardAuthorizer) = ACLs held by the coordinator`)
	superUsers := fs.String("super-users", "", "principals allowed everything, separated by ';' (Kafka super.users), e.g. User:admin;User:ops")
	fs.BoolVar(&cfg.Authorizer.AllowIfNoACL, "allow-everyone-if-no-acl-found", false, "with the authorizer on, allow an action on a resource no ACL names (Kafka allow.everyone.if.no.acl.found)")
	fs.DurationVar(&cfg.Authorizer.MaxAge, "acl-cache-max-age", 10*time.Second, "longest the authorizer serves cached ACLs before reloading them (changes announced on NATS apply at once)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := flagenv.Parse(fs, "kafka-gateway", os.Args[1:]); err != nil {
		return err
	}
	cfg.StorageSecurity, cfg.CoordinatorSecurity = clientSec.For("storage"), clientSec.For("coordinator")
	cfg.NodeID = int32(nodeID)
	cfg.DefaultPartitions = int32(partitions)
	cfg.MaxFrameBytes = int32(maxFrame)
	switch *authorizer {
	case "":
	case "acl", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer":
		cfg.Authorizer.Enabled = true
	default:
		return fmt.Errorf("--authorizer %q: want \"\" (none) or \"acl\"", *authorizer)
	}
	for _, u := range strings.Split(*superUsers, ";") {
		if u = strings.TrimSpace(u); u != "" {
			cfg.Authorizer.SuperUsers = append(cfg.Authorizer.SuperUsers, u)
		}
	}

	log, err := obs.NewLogger("kafka-gateway", *level)
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
