package handler

// The authorizer (Kafka's authorizer.class.name): off by default, every request is
// served as before. On, each API checks what Kafka's KafkaApis checks against the ACLs
// the coordinator holds (AclService), with libs/kafkaacl's rules: super users are
// allowed everything, a DENY wins, READ/WRITE/DELETE/ALTER imply DESCRIBE and
// ALTER_CONFIGS implies DESCRIBE_CONFIGS, a resource without any ACL follows
// allow.everyone.if.no.acl.found (default false).
//
// Cache: every binding is held in memory (one DescribeAcls with an all-ANY filter).
// It is reloaded when the coordinator announces a change on NATS (InvalidateAcls, which
// reloads in the background at once), after this replica's own CreateAcls/DeleteAcls,
// and whenever it is older than its bound (AuthorizerConfig.MaxAge, default 10 s; the
// request that finds it so is decided with it while the reload runs), so a lost
// notification costs at most the bound. A failed reload keeps the bindings held
// and is retried after a second; before the first load succeeds only super users are
// allowed anything (fail closed).

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// AuthorizerConfig configures ACL authorization.
type AuthorizerConfig struct {
	// Enabled turns the authorizer on; off, no request is checked and DescribeAcls,
	// CreateAcls and DeleteAcls answer SECURITY_DISABLED.
	Enabled bool
	// SuperUsers are principals ("User:admin") allowed everything (Kafka super.users).
	SuperUsers []string
	// AllowIfNoACL allows an action on a resource no ACL names (Kafka
	// allow.everyone.if.no.acl.found).
	AllowIfNoACL bool
	// MaxAge bounds how old the cached ACLs may be before a request reloads them
	// (0 = 10 s).
	MaxAge time.Duration
}

// aclRetry is the pause before a failed ACL load is tried again.
const aclRetry = time.Second

type aclSnapshot struct {
	set     *kafkaacl.Set // nil before the first successful load
	gen     uint64        // invalidation generation the load started at
	expires time.Time     // reload after this (the bound, or aclRetry after a failure)
}

func (s *aclSnapshot) fresh(gen uint64) bool { return s.gen == gen && time.Now().Before(s.expires) }

type authorizer struct {
	rules  kafkaacl.Rules
	acls   coordinatorv1.AclServiceClient
	maxAge time.Duration
	log    *zap.Logger

	gen        atomic.Uint64 // bumped by invalidate
	snap       atomic.Pointer[aclSnapshot]
	mu         sync.Mutex  // one load at a time
	refreshing atomic.Bool // a background reload past the bound is running
}

func newAuthorizer(cfg AuthorizerConfig, acls coordinatorv1.AclServiceClient, log *zap.Logger) *authorizer {
	if !cfg.Enabled {
		return nil
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 10 * time.Second
	}
	su := map[string]bool{}
	for _, u := range cfg.SuperUsers {
		su[u] = true
	}
	a := &authorizer{rules: kafkaacl.Rules{SuperUsers: su, AllowIfNoACL: cfg.AllowIfNoACL}, acls: acls, maxAge: cfg.MaxAge, log: log}
	a.snap.Store(&aclSnapshot{})
	return a
}

// current returns the bindings to decide with. Bindings invalidated since they were
// loaded (a change was announced), or none yet, are reloaded first; bindings merely past
// their bound are used once more while a reload runs in the background.
func (a *authorizer) current(ctx context.Context) *kafkaacl.Set {
	gen := a.gen.Load()
	s := a.snap.Load()
	switch {
	case s.fresh(gen):
		return s.set
	case s.set != nil && s.gen == gen:
		if a.refreshing.CompareAndSwap(false, true) {
			go func() {
				defer a.refreshing.Store(false)
				a.load(context.Background(), false)
			}()
		}
		return s.set
	}
	return a.load(ctx, false)
}

// load reloads the bindings unless another load made them fresh meanwhile (force: in
// any case, after a change this replica made).
func (a *authorizer) load(ctx context.Context, force bool) *kafkaacl.Set {
	a.mu.Lock()
	defer a.mu.Unlock()
	gen := a.gen.Load()
	s := a.snap.Load()
	if !force && s.fresh(gen) {
		return s.set
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	resp, err := a.acls.DescribeAcls(ctx, &coordinatorv1.DescribeAclsRequest{})
	if err == nil && resp.GetErrorCode() != 0 {
		err = errorMessage(resp.GetErrorMessage())
	}
	if err != nil {
		a.log.Warn("could not load acls; keeping the ones held", zap.Int("held", s.set.Len()), zap.Error(err))
		a.snap.Store(&aclSnapshot{set: s.set, gen: gen, expires: time.Now().Add(aclRetry)})
		return s.set
	}
	bs := make([]kafkaacl.Binding, 0, len(resp.GetAcls()))
	for _, p := range resp.GetAcls() {
		bs = append(bs, bindingFromProto(p))
	}
	set := kafkaacl.NewSet(bs)
	a.snap.Store(&aclSnapshot{set: set, gen: gen, expires: time.Now().Add(a.maxAge)})
	return set
}

// invalidate marks the bindings stale and reloads them in the background.
func (a *authorizer) invalidate() {
	a.gen.Add(1)
	go a.load(context.Background(), false)
}

type errorMessage string

func (e errorMessage) Error() string { return string(e) }

func bindingFromProto(p *coordinatorv1.AclBinding) kafkaacl.Binding {
	return kafkaacl.Binding{
		ResourceType: kafkaacl.ResourceType(p.GetResourceType()), ResourceName: p.GetResourceName(),
		PatternType: kafkaacl.PatternType(p.GetPatternType()), Principal: p.GetPrincipal(), Host: p.GetHost(),
		Operation: kafkaacl.Operation(p.GetOperation()), Permission: kafkaacl.Permission(p.GetPermissionType()),
	}
}

// InvalidateAcls drops the cached ACLs (a change was announced on
// natsx.AclsChangedSubject, or NATS reconnected) and reloads them in the background.
func (h *Handler) InvalidateAcls() {
	if h.auth != nil {
		h.auth.invalidate()
	}
}

// access is one request's view of the authorizer: the principal, the client host and
// the bindings to decide with. A nil *access (authorizer off) allows everything.
type access struct {
	a         *authorizer
	set       *kafkaacl.Set
	principal string
	host      string
}

// access returns r's view of the authorizer, nil when it is off.
func (h *Handler) access(ctx context.Context, r *Request) *access {
	if h.auth == nil {
		return nil
	}
	principal := r.Principal
	if principal == "" {
		principal = AnonymousPrincipal
	}
	return &access{a: h.auth, set: h.auth.current(ctx), principal: principal, host: strings.TrimPrefix(r.ClientHost, "/")}
}

func (x *access) action(op kafkaacl.Operation, rt kafkaacl.ResourceType, name string) kafkaacl.Action {
	return kafkaacl.Action{Principal: x.principal, Host: x.host, Operation: op, ResourceType: rt, ResourceName: name}
}

// regexAuthorization is who a KIP-848 regex subscription is authorized for
// (coordinatorv1.RegexAuthorization): nil with the authorizer off or for a super user,
// whose every match may be assigned.
func (x *access) regexAuthorization() *coordinatorv1.RegexAuthorization {
	if x == nil || x.a.rules.SuperUsers[x.principal] {
		return nil
	}
	return &coordinatorv1.RegexAuthorization{Principal: x.principal, Host: x.host, AllowIfNoAcl: x.a.rules.AllowIfNoACL}
}

// allowed reports whether the request may do op on the resource.
func (x *access) allowed(op kafkaacl.Operation, rt kafkaacl.ResourceType, name string) bool {
	if x == nil {
		return true
	}
	if x.set == nil {
		return x.a.rules.SuperUsers[x.principal]
	}
	if x.set.Authorize(x.a.rules, x.action(op, rt, name)) {
		return true
	}
	if ce := x.a.log.Check(zap.DebugLevel, "authorization denied"); ce != nil {
		ce.Write(zap.String("principal", x.principal), zap.String("host", x.host),
			zap.Int8("operation", int8(op)), zap.Int8("resource_type", int8(rt)), zap.String("resource", name))
	}
	return false
}

// topic, group, cluster and txnID are allowed for the common resource types.
func (x *access) topic(op kafkaacl.Operation, name string) bool {
	return x.allowed(op, kafkaacl.ResourceTopic, name)
}

func (x *access) group(op kafkaacl.Operation, name string) bool {
	return x.allowed(op, kafkaacl.ResourceGroup, name)
}

// groupCall is the error code a group API answers before it calls the coordinator, 0
// to go on: GROUP_AUTHORIZATION_FAILED without op on group, TOPIC_AUTHORIZATION_FAILED
// without DESCRIBE on one of topics (a heartbeat's subscribed topic names; nil for
// none), COORDINATOR_NOT_AVAILABLE when the coordinator client is missing (up false),
// checked in that order (as Kafka: authorization before availability).
func (x *access) groupCall(op kafkaacl.Operation, group string, topics []string, up bool) int16 {
	if !x.group(op, group) {
		return kerr.GroupAuthorizationFailed.Code
	}
	for _, t := range topics {
		if !x.topic(kafkaacl.OpDescribe, t) {
			return kerr.TopicAuthorizationFailed.Code
		}
	}
	if !up {
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}

// groups is the ids the request may do op on, in order (the groups a describe asks
// the coordinator about; nil when none).
func (x *access) groups(op kafkaacl.Operation, ids []string) []string {
	var out []string
	for _, id := range ids {
		if x.group(op, id) {
			out = append(out, id)
		}
	}
	return out
}

func (x *access) cluster(op kafkaacl.Operation) bool {
	return x.allowed(op, kafkaacl.ResourceCluster, kafkaacl.ClusterName)
}

func (x *access) txnID(op kafkaacl.Operation, id string) bool {
	return x.allowed(op, kafkaacl.ResourceTransactionalID, id)
}

// anyOf reports whether op is allowed on some resource of type rt (Kafka's
// authorizeByResourceType, KIP-679).
func (x *access) anyOf(op kafkaacl.Operation, rt kafkaacl.ResourceType) bool {
	if x == nil {
		return true
	}
	if x.set == nil {
		return x.a.rules.SuperUsers[x.principal]
	}
	return x.set.AuthorizeAny(x.a.rules, x.action(op, rt, ""))
}

// operations is KIP-430's authorized_operations for the resource: the bits of the
// operations allowed, or Kafka's "not provided" (math.MinInt32) with the authorizer
// off, as before it existed.
func (x *access) operations(rt kafkaacl.ResourceType, name string) int32 {
	if x == nil {
		return notProvided
	}
	if x.set == nil {
		if x.a.rules.SuperUsers[x.principal] {
			return kafkaacl.NewSet(nil).AuthorizedOperations(x.a.rules, x.action(0, rt, name))
		}
		return 0
	}
	return x.set.AuthorizedOperations(x.a.rules, x.action(0, rt, name))
}

// clusterOperations is the cluster's authorized_operations as Kafka reports them: the
// operations allowed when DESCRIBE on the cluster is, else 0.
func (x *access) clusterOperations() int32 {
	if !x.cluster(kafkaacl.OpDescribe) {
		return 0
	}
	return x.operations(kafkaacl.ResourceCluster, kafkaacl.ClusterName)
}

// notProvided is authorized_operations' "not asked / not computed" value.
const notProvided = -2147483648

// mayCreate reports whether the request may create topic name: CREATE on the cluster
// or on the topic (Kafka's CreateTopics and auto-creation rule).
func (x *access) mayCreate(name string) bool {
	return x.cluster(kafkaacl.OpCreate) || x.topic(kafkaacl.OpCreate, name)
}

// createCheck is mayCreate for resolveTopics: nil (everything) with the authorizer off.
func (x *access) createCheck() func(string) bool {
	if x == nil {
		return nil
	}
	return x.mayCreate
}
