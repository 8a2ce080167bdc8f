package handler

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// cacheTTL bounds how stale a cached topic, subscription or topic revision range may
// be when Publish and the delivery RPCs look it up (admin RPCs always ask the
// coordinator).
const cacheTTL = 2 * time.Second

// registry is what the three services share: the coordinator's clients, the logger,
// the clock, and this replica's short-lived caches of the registry (topics'
// publish settings, subscriptions, and the compiled revisions of topics' schema
// ranges). Each service drops what it changed through this replica (forget,
// forgetTopics, forgetSchema); other replicas see a change within cacheTTL.
type registry struct {
	reg     coordinatorv1.PubSubRegistryServiceClient
	schemas coordinatorv1.PubSubSchemaServiceClient
	log     *zap.Logger
	now     func() time.Time

	mu     sync.Mutex // guards topics and subs; held for map access only
	topics map[string]cachedTopic
	subs   map[string]cachedSub
	// ranges caches the compiled revisions of topics' schema settings.
	ranges *rangeCache
}

func newRegistry(d Deps) *registry {
	now := d.Now
	if now == nil {
		now = time.Now
	}
	return &registry{
		reg: d.Registry, schemas: d.Schemas, log: d.Log, now: now,
		topics: map[string]cachedTopic{},
		subs:   map[string]cachedSub{},
		ranges: newRangeCache(),
	}
}

// cachedTopic is what Publish needs to know about a topic.
type cachedTopic struct {
	at time.Time
	// schema is the topic's schema settings (nil = none); schemaDeleted is set when
	// that schema was deleted since.
	schema        *pubsubpb.SchemaSettings
	schemaDeleted bool
}

type cachedSub struct {
	sub *subInfo
	at  time.Time
}

// subInfo is what delivery needs to know about a subscription.
type subInfo struct {
	id       string
	spec     *pubsubpb.Subscription
	detached bool
}

// topicExists reports whether topic id is registered, from the cache when fresh.
func (r *registry) topicExists(ctx context.Context, id string) error {
	_, err := r.topic(ctx, id)
	return err
}

// topic returns topic id's publish settings, from the cache when fresh.
func (r *registry) topic(ctx context.Context, id string) (cachedTopic, error) {
	r.mu.Lock()
	c, ok := r.topics[id]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < cacheTTL {
		return c, nil
	}
	resp, err := r.reg.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: id})
	if err != nil {
		return cachedTopic{}, backendError(ctx, err, msgTopicNotFound)
	}
	spec := &pubsubpb.Topic{}
	if err := proto.Unmarshal(resp.GetTopic().GetSpec(), spec); err != nil {
		return cachedTopic{}, backendError(ctx, err, "")
	}
	c = cachedTopic{at: r.now(), schema: spec.GetSchemaSettings()}
	c.schemaDeleted = c.schema != nil && resp.GetTopic().GetSchemaId() == ""
	r.mu.Lock()
	r.topics[id] = c
	r.mu.Unlock()
	return c, nil
}

// subscription returns subscription id, from the cache when fresh.
func (r *registry) subscription(ctx context.Context, id string) (*subInfo, error) {
	r.mu.Lock()
	c, ok := r.subs[id]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < cacheTTL {
		return c.sub, nil
	}
	resp, err := r.reg.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: id})
	if err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	info, err := decodeSub(resp.GetSubscription())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.subs[id] = cachedSub{sub: info, at: r.now()}
	r.mu.Unlock()
	return info, nil
}

// forget drops cached entries after a change through this replica.
func (r *registry) forget(topic, sub string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if topic != "" {
		delete(r.topics, topic)
	}
	if sub != "" {
		delete(r.subs, sub)
	}
}

// forgetTopics drops every cached topic (a schema's deletion changes their
// schemaDeleted flags).
func (r *registry) forgetTopics() {
	r.mu.Lock()
	clear(r.topics)
	r.mu.Unlock()
}

func decodeSub(s *coordinatorv1.PubSubSubscription) (*subInfo, error) {
	spec := &pubsubpb.Subscription{}
	if err := proto.Unmarshal(s.GetSpec(), spec); err != nil {
		return nil, backendError(context.Background(), err, "")
	}
	if s.GetTopicId() == "" {
		spec.Topic = deletedTopic
	}
	spec.Detached = s.GetDetached()
	return &subInfo{id: s.GetId(), spec: spec, detached: s.GetDetached()}, nil
}

// Bounds of the compiled revisions a replica keeps: a count, and the bytes of their
// stored specs, since a compiled revision takes about 15 to 25 times the size of its
// definition (a 300 KB protocol buffer definition compiles to some 7 MB), so 4096 of
// the largest would take tens of GB. Past either bound the cache, with the revision
// ranges that hold its codecs, starts again empty.
const (
	maxCachedCodecs    = 4096
	maxCachedSpecBytes = 16 << 20
	maxCachedRanges    = 4096
)

// rangeCache keeps the compiled revisions of topics' revision ranges for cacheTTL, and
// the compiled revisions themselves (immutable) for as long as they are used.
type rangeCache struct {
	mu        sync.Mutex
	ranges    map[rangeKey]cachedRange
	codecs    map[codecKey]codec
	specBytes int // of the revisions in codecs
}

type rangeKey struct{ schema, first, last string }

type codecKey struct {
	schema, revision string
	sequence         int64
}

type cachedRange struct {
	at time.Time
	r  *revisionRange
}

// revisionRange is the live revisions a topic's messages may match, newest first (the
// order Google tries them in), and whether the range's named bounds were deleted.
type revisionRange struct {
	revs                      []rangeRevision
	firstDeleted, lastDeleted bool
}

type rangeRevision struct {
	id    string
	codec codec
}

func newRangeCache() *rangeCache {
	return &rangeCache{ranges: map[rangeKey]cachedRange{}, codecs: map[codecKey]codec{}}
}

// forgetSchema drops the cached ranges of schema id after a change through this
// replica (other replicas see it within cacheTTL).
func (r *registry) forgetSchema(id string) {
	r.ranges.mu.Lock()
	defer r.ranges.mu.Unlock()
	for k := range r.ranges.ranges {
		if k.schema == id {
			delete(r.ranges.ranges, k)
		}
	}
}

// revisionRange returns the compiled revisions of schema id from first to last
// revision ("" = unbounded), from the cache when fresh. Errors are the coordinator's
// (NOT_FOUND for a schema or bound that does not exist).
func (r *registry) revisionRange(ctx context.Context, id, first, last string) (*revisionRange, error) {
	key := rangeKey{id, first, last}
	r.ranges.mu.Lock()
	c, ok := r.ranges.ranges[key]
	r.ranges.mu.Unlock()
	if ok && r.now().Sub(c.at) < cacheTTL {
		return c.r, nil
	}
	out := &revisionRange{}
	var revs []*coordinatorv1.PubSubSchemaRevision
	for tok := ""; ; {
		resp, err := r.schemas.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{
			SchemaId: id, FirstRevisionId: first, LastRevisionId: last, PageSize: 1000, PageToken: tok,
		})
		if err != nil {
			return nil, err
		}
		revs = append(revs, resp.GetRevisions()...)
		out.firstDeleted, out.lastDeleted = resp.GetFirstRevisionDeleted(), resp.GetLastRevisionDeleted()
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	for i := len(revs) - 1; i >= 0; i-- {
		cd, err := r.revisionCodec(ctx, revs[i])
		if err != nil {
			return nil, err
		}
		out.revs = append(out.revs, rangeRevision{id: revs[i].GetRevisionId(), codec: cd})
	}
	r.ranges.mu.Lock()
	if len(r.ranges.ranges) >= maxCachedRanges {
		r.ranges.ranges = map[rangeKey]cachedRange{}
	}
	r.ranges.ranges[key] = cachedRange{at: r.now(), r: out}
	r.ranges.mu.Unlock()
	return out, nil
}

// revisionCodec compiles a stored revision, once.
func (r *registry) revisionCodec(ctx context.Context, rev *coordinatorv1.PubSubSchemaRevision) (codec, error) {
	key := codecKey{rev.GetSchemaId(), rev.GetRevisionId(), rev.GetSequence()}
	r.ranges.mu.Lock()
	cd, ok := r.ranges.codecs[key]
	r.ranges.mu.Unlock()
	if ok {
		return cd, nil
	}
	s := &pubsubpb.Schema{}
	if err := proto.Unmarshal(rev.GetSpec(), s); err != nil {
		return nil, status.Errorf(codes.Internal, "stored revision %s@%s: %v", rev.GetSchemaId(), rev.GetRevisionId(), err)
	}
	cd, err := compileSchema(ctx, s)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "stored revision %s@%s no longer compiles: %v", rev.GetSchemaId(), rev.GetRevisionId(), err)
	}
	size := len(rev.GetSpec())
	r.ranges.mu.Lock()
	if c := r.ranges; len(c.codecs) >= maxCachedCodecs || c.specBytes+size > maxCachedSpecBytes {
		// The ranges go too: they hold codecs, which would otherwise outlive the cache.
		c.codecs, c.ranges, c.specBytes = map[codecKey]codec{}, map[rangeKey]cachedRange{}, 0
	}
	r.ranges.codecs[key] = cd
	r.ranges.specBytes += size
	r.ranges.mu.Unlock()
	return cd, nil
}
