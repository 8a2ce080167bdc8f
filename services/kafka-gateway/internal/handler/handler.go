// Package handler answers Kafka requests, one file per API key (franz-go kfake layout:
// 00_produce.go, 01_fetch.go, ...). Each file registers the version range it serves in
// init; ApiVersions is built from those registrations only, so the gateway never claims
// an API or version it does not serve.
//
// Kafka errors are data: handlers put error codes into the response. A Go error returned
// by a handler means the connection must be closed (the request could not be answered
// at all). Data goes to storage-core (storagev1), topic administration and producer ids
// to the coordinator (coordinatorv1); errors.go maps their failures to Kafka codes.
package handler

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// Broker is one live kafka-gateway replica as listed in Metadata and DescribeCluster.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   *string
	// Endpoints are the broker's advertised listeners (Kafka's advertised.listeners).
	// When set, a request is answered with each broker's endpoint of the listener the
	// request came in on (Request.Listener), and brokers without that listener are left
	// out, as Kafka does; when empty, Host and Port serve every listener.
	Endpoints []Endpoint
}

// Endpoint is one advertised listener of a broker.
type Endpoint struct {
	Listener string
	Host     string
	Port     int32
}

// Config holds the gateway behaviour the handlers need.
type Config struct {
	// NodeID is this replica's Kafka broker id.
	NodeID int32
	// ClusterID is the Tributary cluster id; the Kafka cluster id is derived from it.
	ClusterID string
	// AutoCreateTopics creates unknown topics on Metadata (when the client allows it)
	// and on Produce.
	AutoCreateTopics bool
	// DefaultPartitions is the partition count of auto-created topics and of
	// CreateTopics requests asking for -1.
	DefaultPartitions int32
	// TopicCacheTTL is how long a GetTopics answer is reused (0 = 10 s). Entries are
	// also dropped on topics.changed NATS messages and refreshed on a miss.
	TopicCacheTTL time.Duration
	// Authorizer turns ACL authorization on (off by default: nothing is checked).
	Authorizer AuthorizerConfig
	// Share holds the broker-level share group settings (group.share.*).
	Share ShareConfig
	// ConnectionsMaxReauth is Kafka's connections.max.reauth.ms: the longest session a
	// SASL authentication grants (KIP-368); 0 = sessions never expire.
	ConnectionsMaxReauth time.Duration
	// DisableShareGroups is group.share.enable=false: the KIP-932 share group APIs
	// (shareGroupKeys) are neither advertised nor served, and share.version is not
	// advertised. Share groups are on by default.
	DisableShareGroups bool
}

// Deps are the handler's collaborators.
type Deps struct {
	Storage     storagev1.StorageServiceClient
	Coordinator coordinatorv1.CoordinatorServiceClient
	// Share serves share partitions (storage-core's ShareService); nil answers
	// ShareFetch and ShareAcknowledge COORDINATOR_NOT_AVAILABLE.
	Share storagev1.ShareServiceClient
	// Groups serves the group and offset APIs; nil answers them COORDINATOR_NOT_AVAILABLE.
	Groups coordinatorv1.GroupCoordinatorServiceClient
	// Consumers serves KIP-848 consumer groups (ConsumerGroupHeartbeat,
	// ConsumerGroupDescribe); nil answers them COORDINATOR_NOT_AVAILABLE.
	Consumers coordinatorv1.ConsumerGroupServiceClient
	// Shares serves KIP-932 share group membership (ShareGroupHeartbeat,
	// ShareGroupDescribe); nil answers them COORDINATOR_NOT_AVAILABLE.
	Shares coordinatorv1.ShareGroupServiceClient
	// Txns serves the transaction APIs; nil answers them COORDINATOR_NOT_AVAILABLE.
	Txns coordinatorv1.TransactionCoordinatorServiceClient
	// Acls serves the ACL APIs and the authorizer's bindings; nil answers them
	// UNAVAILABLE (the authorizer then allows only super users).
	Acls coordinatorv1.AclServiceClient
	// Brokers returns the live kafka-gateway replicas, self included, sorted by node id.
	Brokers func() []Broker
	Log     *zap.Logger
	// Metrics may be nil (no metrics recorded).
	Metrics *Metrics
	// Auth holds the SASL mechanisms of SASL listeners; nil enables none.
	Auth *sasl.Authenticator
	// Credentials serves DescribeUserScramCredentials and AlterUserScramCredentials;
	// nil answers them COORDINATOR_NOT_AVAILABLE.
	Credentials coordinatorv1.CredentialServiceClient
	// CredentialsChanged, when set, is called with each user whose credentials an
	// AlterUserScramCredentials changed (the local cache drops them at once).
	CredentialsChanged func(user string)
}

// AnonymousPrincipal is the principal of a connection that has not authenticated
// (a PLAINTEXT or SSL listener without a client certificate), as Kafka names it.
const AnonymousPrincipal = "User:ANONYMOUS"

// Request is one decoded Kafka request.
type Request struct {
	// Body is the decoded request; its version is set.
	Body          kmsg.Request
	CorrelationID int32
	ClientID      *string
	// Listener is the name of the Kafka listener the request came in on ("PLAINTEXT",
	// "SASL_SSL", ...); brokers are listed with their endpoint of that listener. Empty
	// lists every broker with its Host and Port.
	Listener string
	// Session is the connection's authentication state (SASL, TLS client certificate);
	// nil for a connection without any (tests, PLAINTEXT listeners).
	Session *Session
	// ClientHost is the client's address as Kafka shows it ("/127.0.0.1"), for
	// DescribeGroups.
	ClientHost string
	// Principal is the authenticated Kafka principal of the connection in Kafka's
	// "Type:Name" form: "User:ANONYMOUS" on a PLAINTEXT listener, the SASL user or the
	// mapped TLS certificate name otherwise (KIP-11's KafkaPrincipal). The server sets
	// it; authorization (ACLs) reads it.
	Principal string
	// Turn orders one connection's produce requests: a produce handler calls
	// Turn.Wait just before writing to storage so batches of one connection reach
	// storage in request order (idempotent sequences). Nil for other APIs.
	Turn *Turn

	// bodyInUse is set when the request's bytes (which Body views) may still be read
	// after Handle returns: a produce whose batches went to storage-core by reference
	// (appendWire) without an answer, so gRPC may still be writing them.
	bodyInUse atomic.Bool
	// release frees what the response views (Fetch: pooled storage buffers).
	release []func()
}

// Release frees the buffers the response returned by Handle views (a Fetch response's
// record batches); call it once, after the response was encoded or written, and read
// the response no more. Never calling it is safe: the garbage collector frees them.
func (r *Request) Release() {
	for _, f := range r.release {
		f()
	}
	r.release = nil
}

// BodyInUse reports whether the frame Body was decoded from may still be read after
// Handle returned; when false the caller may reuse it.
func (r *Request) BodyInUse() bool { return r.bodyInUse.Load() }

// Handler answers Kafka requests. It is safe for concurrent use.
type Handler struct {
	cfg     Config
	storage storagev1.StorageServiceClient
	// router is storage as a Router (several storage nodes: produce appends are unary,
	// leader epochs are Raft terms); nil with one storage node.
	router *Router
	// share serves share groups' data path (ShareFetch, ShareAcknowledge); nil answers
	// them COORDINATOR_NOT_AVAILABLE.
	share  storagev1.ShareServiceClient
	coord  coordinatorv1.CoordinatorServiceClient
	groups coordinatorv1.GroupCoordinatorServiceClient
	// consumers is nil without a coordinator connection (unit tests).
	consumers coordinatorv1.ConsumerGroupServiceClient
	txns      coordinatorv1.TransactionCoordinatorServiceClient
	acls      coordinatorv1.AclServiceClient
	auth      *authorizer // nil when the authorizer is off
	brokers   func() []Broker
	log       *zap.Logger
	metrics   *Metrics
	saslAuth  *sasl.Authenticator
	topics    *topicCache
	ahead     *fetchAhead
	kafkaID   string
	creds     coordinatorv1.CredentialServiceClient
	// credsChanged is Deps.CredentialsChanged (may be nil).
	credsChanged func(user string)
	// shares is nil without a coordinator connection (unit tests).
	shares coordinatorv1.ShareGroupServiceClient
	// members caches share group members for ShareFetch (share_members.go).
	members *shareMembers

	// drainCtx ends when the server starts shutting down (Drain): long polls return.
	drainCtx context.Context
	drain    context.CancelFunc
}

type handleFunc func(h *Handler, ctx context.Context, r *Request) (kmsg.Response, error)

type api struct {
	key      int16
	min, max int16
	fn       handleFunc
}

var (
	registryMu sync.Mutex
	registry   = map[int16]api{}
)

// register adds an API key served at versions min..max. Called from each file's init.
func register(key, minV, maxV int16, fn handleFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[key]; dup {
		panic(fmt.Sprintf("handler: api key %d registered twice", key))
	}
	registry[key] = api{key: key, min: minV, max: maxV, fn: fn}
}

// Supported returns the version range served for key; ok is false for an API key the
// gateway does not serve.
func Supported(key int16) (minV, maxV int16, ok bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	a, ok := registry[key]
	return a.min, a.max, ok
}

// apis returns the registrations sorted by key.
func apis() []api {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]api, 0, len(registry))
	for _, a := range registry {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// New builds a Handler.
func New(cfg Config, deps Deps) *Handler {
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.TopicCacheTTL <= 0 {
		cfg.TopicCacheTTL = 10 * time.Second
	}
	log := deps.Log
	if log == nil {
		log = zap.NewNop()
	}
	brokers := deps.Brokers
	if brokers == nil {
		brokers = func() []Broker { return nil }
	}
	acls := deps.Acls
	if acls == nil {
		acls = unavailableAcls{}
	}
	drainCtx, drain := context.WithCancel(context.Background())
	return &Handler{
		acls:         acls,
		auth:         newAuthorizer(cfg.Authorizer, acls, log.Named("authorizer")),
		drainCtx:     drainCtx,
		drain:        drain,
		cfg:          cfg,
		storage:      deps.Storage,
		router:       asRouter(deps.Storage),
		share:        deps.Share,
		coord:        deps.Coordinator,
		groups:       groupsOrUnavailable(deps.Groups),
		consumers:    deps.Consumers,
		shares:       deps.Shares,
		members:      newShareMembers(),
		txns:         txnsOrUnavailable(deps.Txns),
		brokers:      brokers,
		log:          log,
		metrics:      deps.Metrics,
		saslAuth:     deps.Auth,
		topics:       newTopicCache(cfg.TopicCacheTTL),
		ahead:        newFetchAhead(),
		kafkaID:      KafkaClusterID(cfg.ClusterID),
		creds:        deps.Credentials,
		credsChanged: deps.CredentialsChanged,
	}
}

// Handle answers one request. A nil response with a nil error means "send nothing"
// (Produce with acks=0). A non-nil error means the connection must be closed.
func (h *Handler) Handle(ctx context.Context, r *Request) (kmsg.Response, error) {
	key := r.Body.Key()
	registryMu.Lock()
	a, ok := registry[key]
	registryMu.Unlock()
	if !ok || !h.serves(key) {
		return nil, fmt.Errorf("%w: key %d", ErrUnsupportedAPI, key)
	}
	v := r.Body.GetVersion()
	if v < a.min || v > a.max {
		return nil, fmt.Errorf("%w: key %d version %d (serving %d..%d)", ErrUnsupportedVersion, key, v, a.min, a.max)
	}
	start := time.Now()
	resp, err := h.call(ctx, a, r)
	if err == nil && resp != nil {
		resp.SetVersion(v)
	}
	took := time.Since(start)
	h.metrics.observe(key, resp, took)
	if ce := h.log.Check(zap.DebugLevel, "kafka request"); ce != nil {
		client := ""
		if r.ClientID != nil {
			client = *r.ClientID
		}
		ce.Write(zap.String("api", kmsg.NameForKey(key)), zap.Int16("version", v),
			zap.Int32("correlation_id", r.CorrelationID), zap.String("client_id", client),
			zap.Duration("took", took), zap.Error(err))
	}
	return resp, err
}

// Drain tells the handler the server is shutting down: Fetch long polls in progress end
// at once with NOT_LEADER_OR_FOLLOWER (clients move to another replica) and new ones do
// not wait.
func (h *Handler) Drain() { h.drain() }

// call runs a handler, turning a panic into an error (the connection closes; the
// process and every other connection keep going).
func (h *Handler) call(ctx context.Context, a api, r *Request) (resp kmsg.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic in kafka handler", zap.String("api", kmsg.NameForKey(a.key)),
				zap.Int16("version", r.Body.GetVersion()), zap.Any("panic", p), zap.Stack("stack"))
			resp, err = nil, fmt.Errorf("%w: %v", ErrHandlerPanic, p)
		}
	}()
	return a.fn(h, ctx, r)
}

// InvalidateTopic drops a topic from the metadata cache ("" drops everything), and
// with several storage nodes the leader epochs and leaders learned of its partitions.
// Called on natsx.TopicsChangedSubject NATS messages.
func (h *Handler) InvalidateTopic(name string) {
	h.topics.invalidate(name)
	h.ahead.clear()
	if h.router != nil {
		h.router.forgetTopic(name)
	}
}

// liveBrokers returns the live brokers as seen from listener (Request.Listener): each
// with its endpoint of that listener, brokers without it left out. Never empty: self is
// added when missing.
func (h *Handler) liveBrokers(listener string) []Broker {
	bs := h.brokers()
	out := make([]Broker, 0, len(bs)+1)
	self := false
	for _, b := range bs {
		if listener != "" && len(b.Endpoints) > 0 {
			found := false
			for _, e := range b.Endpoints {
				if e.Listener == listener {
					b.Host, b.Port, found = e.Host, e.Port, true
					break
				}
			}
			if !found {
				continue
			}
		}
		self = self || b.NodeID == h.cfg.NodeID
		out = append(out, b)
	}
	if self {
		return out
	}
	out = append(out, Broker{NodeID: h.cfg.NodeID, Host: "127.0.0.1", Port: 9092})
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}
