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
	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/services/kafka-gateway/internal/server"
)

func main() {
	obs.TuneDataPathGC()
	flagenv.Exit("kafka-gateway", run())
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
	fs.StringVar(&cfg.StorageAddr, "storage-addr", "127.0.0.1:7400", "storage-core gRPC address; several, comma-separated (host:port,host:port,...), are the nodes of a storage-core cluster in raft mode: each partition's calls go to its leader")
	fs.StringVar(&cfg.CoordinatorAddr, "coordinator-addr", "127.0.0.1:7410", "coordinator gRPC address")
	fs.StringVar(&cfg.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS URL (replica announcements, topic change notices); empty = none")
	fs.StringVar(&cfg.ClusterID, "cluster-id", "tributary", "cluster id (prefixes NATS subjects, derives the Kafka cluster id)")
	fs.BoolVar(&cfg.AutoCreateTopics, "auto-create-topics", true, "create unknown topics on Metadata and Produce")
	shareEnable := fs.Bool("group-share-enable", true, "serve KIP-932 share groups (Kafka group.share.enable; off leaves their APIs and share.version out of ApiVersions)")
	fs.IntVar(&partitions, "default-partitions", 1, "partition count of auto-created topics (1..256)")
	fs.IntVar(&maxFrame, "max-request-bytes", server.DefaultMaxFrameBytes, "largest Kafka request frame accepted, in bytes; larger closes the connection")
	fs.Int64Var(&cfg.MaxInFlightBytes, "max-inflight-request-bytes", server.DefaultMaxInFlightBytes, "request bytes held in memory by all connections at once; readers wait beyond it")
	clientSec := grpcx.RegisterClientFlags(fs, "storage", "coordinator")
	authorizer := fs.String("authorizer", "", `ACL authorizer (Kafka authorizer.class.name): "" = none (every request allowed, ACL APIs answer SECURITY_DISABLED), "acl" (or org.apache.kafka.metadata.authorizer.StandardAuthorizer) = ACLs held by the coordinator`)
	superUsers := fs.String("super-users", "", "principals allowed everything, separated by ';' (Kafka super.users), e.g. User:admin;User:ops")
	fs.BoolVar(&cfg.Authorizer.AllowIfNoACL, "allow-everyone-if-no-acl-found", false, "with the authorizer on, allow an action on a resource no ACL names (Kafka allow.everyone.if.no.acl.found)")
	fs.DurationVar(&cfg.Authorizer.MaxAge, "acl-cache-max-age", 10*time.Second, "longest the authorizer serves cached ACLs before reloading them (changes announced on NATS apply at once)")
	fs.StringVar(&cfg.Listeners, "listeners", "", "Kafka listeners, NAME://host:port,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL or names in --listener-security-protocol-map); default PLAINTEXT://<--listen>, plus SASL_SSL on port 9093 when --tls-cert is given")
	fs.StringVar(&cfg.AdvertisedListeners, "advertised-listeners", "", "NAME://host:port,... announced to clients per listener (default: each listener's bound address; --advertised-addr for the first)")
	fs.StringVar(&cfg.ListenerSecurityProtocolMap, "listener-security-protocol-map", "", "NAME:PROTOCOL,... for listener names that are not security protocols")
	fs.StringVar(&cfg.TLS.CertFile, "tls-cert", "", "PEM certificate chain of SSL and SASL_SSL listeners")
	fs.StringVar(&cfg.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&cfg.TLS.ClientCAFile, "tls-client-ca", "", "PEM CA bundle client certificates are verified against")
	var clientAuth string
	fs.StringVar(&clientAuth, "tls-client-auth", "none", "client certificates on TLS listeners (Kafka ssl.client.auth): none, requested, required")
	fs.StringVar(&cfg.SSLPrincipalMappingRules, "ssl-principal-mapping-rules", "", "Kafka ssl.principal.mapping.rules for client certificates on SSL listeners: RULE:regex/replacement/[LU],...,DEFAULT (default DEFAULT: the subject DN)")
	fs.StringVar(&cfg.SASLMechanisms, "sasl-enabled-mechanisms", "", "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (default "+server.DefaultSASLMechanisms+", plus OAUTHBEARER when a token validator is configured)")
	fs.StringVar(&cfg.SASLUsersFile, "sasl-users-file", "", "static SASL users, one name:password a line (PLAIN and SCRAM)")
	fs.BoolVar(&cfg.OAuthBearerUnsecured, "sasl-oauthbearer-unsecured", false, "OAUTHBEARER accepts unsigned tokens (alg none): tests and development only")
	fs.StringVar(&cfg.OAuthBearerJWKSURL, "sasl-oauthbearer-jwks-endpoint-url", "", "OAUTHBEARER: JWKS of the token issuer (http, https or file URL; Kafka sasl.oauthbearer.jwks.endpoint.url)")
	fs.StringVar(&cfg.OAuthBearerIssuer, "sasl-oauthbearer-expected-issuer", "", "OAUTHBEARER: required iss claim")
	fs.StringVar(&cfg.OAuthBearerAudience, "sasl-oauthbearer-expected-audience", "", "OAUTHBEARER: accepted aud values, comma-separated")
	fs.StringVar(&cfg.OAuthBearerSubClaim, "sasl-oauthbearer-sub-claim-name", "sub", "OAUTHBEARER: claim holding the principal name")
	var jwksRefreshMs int64
	fs.Int64Var(&jwksRefreshMs, "sasl-oauthbearer-jwks-endpoint-refresh-ms", 3600000, "OAUTHBEARER: how often the JWKS is fetched again, in ms")
	var reauthMs int64
	fs.Int64Var(&reauthMs, "connections-max-reauth-ms", 0, "longest SASL session before the client must re-authenticate (KIP-368), in ms; 0 = never")
	var shareLockMs, shareDeliveryLimit int
	fs.IntVar(&shareLockMs, "group-share-record-lock-duration-ms", 30000, "how long a share group member holds an acquired record before it is redelivered, in ms, 1000..3600000 (Kafka group.share.record.lock.duration.ms)")
	fs.IntVar(&shareDeliveryLimit, "group-share-delivery-count-limit", 5, "deliveries after which a share group record released or whose lock expired is archived, 2..10 (Kafka group.share.delivery.count.limit)")
	shareReset := fs.String("share-auto-offset-reset", "latest", "where a share group starts reading a partition it never read: latest or earliest (Kafka share.auto.offset.reset, the default of every share group)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := flagenv.Parse(fs, "kafka-gateway", os.Args[1:]); err != nil {
		return err
	}
	cfg.StorageSecurity, cfg.CoordinatorSecurity = clientSec.For("storage"), clientSec.For("coordinator")
	cfg.NodeID = int32(nodeID)
	cfg.DisableShareGroups = !*shareEnable
	cfg.DefaultPartitions = int32(partitions)
	cfg.MaxFrameBytes = int32(maxFrame)
	cfg.ShareSettings.RecordLockDuration = time.Duration(shareLockMs) * time.Millisecond
	cfg.ShareSettings.DeliveryCountLimit = int32(shareDeliveryLimit)
	switch *shareReset {
	case "latest":
	case "earliest":
		cfg.ShareSettings.AutoOffsetResetEarliest = true
	default:
		return fmt.Errorf("--share-auto-offset-reset %q: want latest or earliest", *shareReset)
	}
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
	cfg.TLS.ClientAuth = tlsx.ClientAuth(clientAuth)
	cfg.ConnectionsMaxReauth = time.Duration(reauthMs) * time.Millisecond
	cfg.OAuthBearerJWKSRefresh = time.Duration(jwksRefreshMs) * time.Millisecond

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
