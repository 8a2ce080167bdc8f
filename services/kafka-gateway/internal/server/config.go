package server

import (
	"fmt"
	"strings"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/tlsx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/handler"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// Defaults.
const (
	// DefaultMaxFrameBytes is the largest request frame accepted (Kafka
	// socket.request.max.bytes), in bytes.
	DefaultMaxFrameBytes = 100 << 20
	// DefaultMaxInFlight is how many requests of one connection may be in progress at
	// once; the connection's reader waits beyond that.
	DefaultMaxInFlight = 64
	// DefaultMaxInFlightBytes bounds the request bytes in memory across connections.
	DefaultMaxInFlightBytes = 512 << 20
)

// Config configures the kafka-gateway server. The flags of cmd/kafka-gateway map to it
// one to one.
type Config struct {
	// Listen is the Kafka listener address (host:port; port 0 picks one), served as
	// PLAINTEXT when Listeners is empty.
	Listen string
	// AdvertisedAddr is the host:port announced to clients and peers for the first
	// listener when AdvertisedListeners is empty; empty = the bound listener address. A
	// port of 0 is replaced by the bound port; an unspecified host (0.0.0.0, ::) by
	// 127.0.0.1.
	AdvertisedAddr string
	// Listeners is Kafka's listeners: "NAME://host:port,..." with NAME a security
	// protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or a name mapped to one in
	// ListenerSecurityProtocolMap. Empty = "PLAINTEXT://<Listen>", plus
	// "SASL_SSL://<Listen's host>:9093" when TLS is given.
	Listeners string
	// AdvertisedListeners is Kafka's advertised.listeners, same shape: the host:port
	// each listener is announced with; a listener not named advertises its bound
	// address.
	AdvertisedListeners string
	// ListenerSecurityProtocolMap is Kafka's listener.security.protocol.map:
	// "NAME:PROTOCOL,...".
	ListenerSecurityProtocolMap string
	// TLS is the certificate of SSL and SASL_SSL listeners and how client
	// certificates are checked (Kafka's ssl.client.auth: none, requested, required).
	TLS tlsx.Server
	// SSLPrincipalMappingRules is Kafka's ssl.principal.mapping.rules: how the subject
	// DN of a TLS client certificate on an SSL listener becomes the principal's name
	// ("" = DEFAULT: the DN itself).
	SSLPrincipalMappingRules string
	// SASLMechanisms is Kafka's sasl.enabled.mechanisms, comma-separated (empty =
	// SCRAM-SHA-512,SCRAM-SHA-256,PLAIN).
	SASLMechanisms string
	// SASLUsersFile names a static users file ("name:password" lines, see
	// sasl.LoadUsers) for PLAIN and SCRAM; "" = none.
	SASLUsersFile string
	// OAuthBearerUnsecured accepts unsigned OAUTHBEARER tokens (alg "none", Kafka's
	// unsecured validator): tests and development only.
	OAuthBearerUnsecured bool
	// OAuthBearerJWKSURL is Kafka's sasl.oauthbearer.jwks.endpoint.url (http, https or
	// file): OAUTHBEARER tokens must be JWTs signed by a key of that set.
	OAuthBearerJWKSURL string
	// OAuthBearerIssuer and OAuthBearerAudience (comma-separated) are Kafka's
	// sasl.oauthbearer.expected.issuer / .expected.audience ("" = not checked).
	OAuthBearerIssuer, OAuthBearerAudience string
	// OAuthBearerSubClaim is sasl.oauthbearer.sub.claim.name ("" = "sub").
	OAuthBearerSubClaim string
	// OAuthBearerJWKSRefresh is sasl.oauthbearer.jwks.endpoint.refresh.ms (0 = 1 h).
	OAuthBearerJWKSRefresh time.Duration
	// ConnectionsMaxReauth is Kafka's connections.max.reauth.ms (KIP-368): the longest
	// session a SASL authentication grants; 0 = sessions never expire.
	ConnectionsMaxReauth time.Duration
	// Credentials, when set, is a SCRAM credential source consulted after the users
	// file (tests).
	Credentials sasl.Credentials

	specs          []listenerSpec
	principalRules principalRules
	// HTTPAddr serves /metrics, /healthz, /readyz ("" = disabled).
	HTTPAddr string
	// NodeID is this replica's Kafka broker id (unique per replica). -1 derives a stable
	// id from the advertised address (FNV-1a of host:port, 31 bits), for replicas that
	// are scaled without per-replica configuration (Kubernetes Deployments).
	NodeID int32
	// Rack is the broker rack announced in Metadata (optional).
	Rack string
	// StorageAddr and CoordinatorAddr are the gRPC addresses of storage-core and the
	// coordinator; ignored when Storage / Coordinator are set. StorageAddr may list
	// several comma-separated addresses: the nodes of a storage-core cluster in raft
	// mode, routed to by a handler.Router (one address: one connection, as before).
	StorageAddr     string
	CoordinatorAddr string
	// StorageSecurity and CoordinatorSecurity are how they are dialed (TLS, client
	// certificate, token); zero: plaintext.
	StorageSecurity, CoordinatorSecurity grpcx.DialSecurity
	// NATSURL is the NATS server ("" = no NATS: a cluster of one).
	NATSURL string
	// ClusterID prefixes NATS subjects and derives the Kafka cluster id.
	ClusterID string
	// AutoCreateTopics creates unknown topics on Metadata and Produce.
	AutoCreateTopics bool
	// DefaultPartitions is the partition count of auto-created topics.
	DefaultPartitions int32
	// MaxFrameBytes is the largest request frame (0 = DefaultMaxFrameBytes); a larger
	// one closes the connection.
	MaxFrameBytes int32
	// MaxInFlight bounds concurrent requests per connection (0 = DefaultMaxInFlight).
	MaxInFlight int
	// MaxInFlightBytes bounds the request bytes held by all connections at once (0 =
	// DefaultMaxInFlightBytes); readers wait beyond it (Kafka queued.max.request.bytes).
	MaxInFlightBytes int64
	// Authorizer turns ACL authorization on (Kafka authorizer.class.name, super.users,
	// allow.everyone.if.no.acl.found); the zero value is off.
	Authorizer handler.AuthorizerConfig
	// DisableShareGroups is group.share.enable=false: the KIP-932 share group APIs are
	// neither advertised nor served (on by default). Several storage addresses (raft
	// mode, whose storage-core does not replicate queues yet) turn them off too.
	DisableShareGroups bool

	// ShareSettings holds the broker-level share group settings (Kafka group.share.*).
	ShareSettings handler.ShareConfig

	// Storage and Coordinator, when set, are used instead of dialing (tests).
	Storage storagev1.StorageServiceClient
	// Share, when set, is used instead of the storage connection's ShareService client.
	Share       storagev1.ShareServiceClient
	Coordinator coordinatorv1.CoordinatorServiceClient
	// Groups, when set, is used instead of the coordinator connection's group client.
	Groups coordinatorv1.GroupCoordinatorServiceClient
	// ConsumerGroups, when set, is used instead of the coordinator connection's KIP-848
	// consumer group client.
	ConsumerGroups coordinatorv1.ConsumerGroupServiceClient
	// ShareGroups, when set, is used instead of the coordinator connection's KIP-932
	// share group client.
	ShareGroups coordinatorv1.ShareGroupServiceClient
	// Txns, when set, is used instead of the coordinator connection's transaction client.
	Txns coordinatorv1.TransactionCoordinatorServiceClient
	// Acls, when set, is used instead of the coordinator connection's ACL client.
	Acls coordinatorv1.AclServiceClient
	// CredentialService, when set, is used instead of the coordinator connection's
	// credential client; with Coordinator set and CredentialService nil there is none.
	CredentialService coordinatorv1.CredentialServiceClient
}

// Validate checks the config and fills defaults.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return fmt.Errorf("%w: listen address is empty", ErrConfig)
	}
	if c.ClusterID == "" {
		return fmt.Errorf("%w: cluster id is empty", ErrConfig)
	}
	if c.NodeID < -1 {
		return fmt.Errorf("%w: node id %d is negative (-1 derives one from the advertised address)", ErrConfig, c.NodeID)
	}
	if c.DefaultPartitions == 0 {
		c.DefaultPartitions = 1
	}
	if c.DefaultPartitions < 1 || c.DefaultPartitions > 256 {
		return fmt.Errorf("%w: default partitions %d outside 1..256", ErrConfig, c.DefaultPartitions)
	}
	if d := c.ShareSettings.RecordLockDuration; d != 0 && (d < time.Second || d > time.Hour) {
		return fmt.Errorf("%w: share record lock duration %v outside 1s..1h", ErrConfig, d)
	}
	if n := c.ShareSettings.DeliveryCountLimit; n != 0 && (n < 2 || n > 10) {
		return fmt.Errorf("%w: share delivery count limit %d outside 2..10", ErrConfig, n)
	}
	if c.Storage == nil && c.StorageAddr == "" {
		return fmt.Errorf("%w: storage address is empty", ErrConfig)
	}
	if c.Coordinator == nil && c.CoordinatorAddr == "" {
		return fmt.Errorf("%w: coordinator address is empty", ErrConfig)
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	for _, u := range c.Authorizer.SuperUsers {
		if typ, name, ok := strings.Cut(u, ":"); !ok || typ == "" || name == "" {
			return fmt.Errorf("%w: super user %q is not a principal of the form Type:Name (User:admin)", ErrConfig, u)
		}
	}
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.ConnectionsMaxReauth < 0 {
		return fmt.Errorf("%w: connections max reauth %v is negative", ErrConfig, c.ConnectionsMaxReauth)
	}
	if _, err := c.mechanisms(); err != nil {
		return err
	}
	rules, err := parsePrincipalRules(c.SSLPrincipalMappingRules)
	if err != nil {
		return err
	}
	c.principalRules = rules
	specs, err := c.listenerSpecs()
	if err != nil {
		return err
	}
	c.specs = specs
	return nil
}

// DefaultSASLMechanisms are the mechanisms enabled when SASLMechanisms is empty, plus
// OAUTHBEARER when a token validator is configured.
const DefaultSASLMechanisms = "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"

// oauthConfigured reports whether an OAUTHBEARER token validator is configured.
func (c *Config) oauthConfigured() bool {
	return c.OAuthBearerUnsecured || c.OAuthBearerJWKSURL != ""
}

// mechanisms parses SASLMechanisms.
func (c *Config) mechanisms() ([]string, error) {
	if c.OAuthBearerUnsecured && c.OAuthBearerJWKSURL != "" {
		return nil, fmt.Errorf("%w: OAUTHBEARER: unsecured tokens and a JWKS URL exclude each other", ErrConfig)
	}
	spec := c.SASLMechanisms
	if spec == "" {
		spec = DefaultSASLMechanisms
		if c.oauthConfigured() {
			spec += "," + sasl.MechOAuthBearer
		}
	}
	var out []string
	for _, m := range strings.Split(spec, ",") {
		m = strings.ToUpper(strings.TrimSpace(m))
		switch m {
		case "":
			continue
		case sasl.MechPlain, sasl.ScramSHA256, sasl.ScramSHA512:
			out = append(out, m)
		case sasl.MechOAuthBearer:
			if !c.oauthConfigured() {
				return nil, fmt.Errorf("%w: OAUTHBEARER needs a token validator (a JWKS URL, or unsecured tokens for tests)", ErrConfig)
			}
			out = append(out, m)
		default:
			return nil, fmt.Errorf("%w: SASL mechanism %q is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", ErrConfig, m)
		}
	}
	return out, nil
}
