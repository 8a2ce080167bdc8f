package handler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// What a topic's schema settings read once their schema or a bounding revision was
// deleted (google.pubsub.v1.SchemaSettings; the emulator shows the same).
const (
	deletedSchema         = "_deleted-schema_"
	deletedSchemaRevision = "_deleted-schema-revision_"
)

// Attributes of a message accepted by a topic with a schema (Google, "Publish
// messages to topics with a schema").
const (
	attrSchemaName     = "googclient_schemaname"
	attrSchemaEncoding = "googclient_schemaencoding"
	attrSchemaRevision = "googclient_schemarevisionid"
)

// Messages of the schema-settings statuses, as the emulator words them.
const (
	msgSchemaNotFound        = "Schema could not be found"
	msgTopicSchemaDeleted    = "Schema associated with topic deleted."
	msgFirstRevisionNotFound = "First revision could not be found"
	msgLastRevisionNotFound  = "Last revision could not be found"
)

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
func (h *Handler) forgetSchema(id string) {
	h.ranges.mu.Lock()
	defer h.ranges.mu.Unlock()
	for k := range h.ranges.ranges {
		if k.schema == id {
			delete(h.ranges.ranges, k)
		}
	}
}

// revisionRange returns the compiled revisions of schema id from first to last
// revision ("" = unbounded), from the cache when fresh. Errors are the coordinator's
// (NOT_FOUND for a schema or bound that does not exist).
func (h *Handler) revisionRange(ctx context.Context, id, first, last string) (*revisionRange, error) {
	key := rangeKey{id, first, last}
	h.ranges.mu.Lock()
	c, ok := h.ranges.ranges[key]
	h.ranges.mu.Unlock()
	if ok && h.now().Sub(c.at) < cacheTTL {
		return c.r, nil
	}
	out := &revisionRange{}
	var revs []*coordinatorv1.PubSubSchemaRevision
	for tok := ""; ; {
		resp, err := h.schemas.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{
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
		cd, err := h.revisionCodec(ctx, revs[i])
		if err != nil {
			return nil, err
		}
		out.revs = append(out.revs, rangeRevision{id: revs[i].GetRevisionId(), codec: cd})
	}
	h.ranges.mu.Lock()
	if len(h.ranges.ranges) >= maxCachedRanges {
		h.ranges.ranges = map[rangeKey]cachedRange{}
	}
	h.ranges.ranges[key] = cachedRange{at: h.now(), r: out}
	h.ranges.mu.Unlock()
	return out, nil
}

// revisionCodec compiles a stored revision, once.
func (h *Handler) revisionCodec(ctx context.Context, rev *coordinatorv1.PubSubSchemaRevision) (codec, error) {
	key := codecKey{rev.GetSchemaId(), rev.GetRevisionId(), rev.GetSequence()}
	h.ranges.mu.Lock()
	cd, ok := h.ranges.codecs[key]
	h.ranges.mu.Unlock()
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
	h.ranges.mu.Lock()
	if c := h.ranges; len(c.codecs) >= maxCachedCodecs || c.specBytes+size > maxCachedSpecBytes {
		// The ranges go too: they hold codecs, which would otherwise outlive the cache.
		c.codecs, c.ranges, c.specBytes = map[codecKey]codec{}, map[rangeKey]cachedRange{}, 0
	}
	h.ranges.codecs[key] = cd
	h.ranges.specBytes += size
	h.ranges.mu.Unlock()
	return cd, nil
}

// checkSchemaSettings validates a topic's schema settings (nil = none) for CreateTopic
// and UpdateTopic and returns the schema's id ("" for none). As Google: no schema name
// or an encoding other than JSON or BINARY is INVALID_ARGUMENT, a schema or bounding
// revision that does not exist NOT_FOUND, a first revision created after the last
// INVALID_ARGUMENT. A malformed schema name is INVALID_ARGUMENT (the emulator answers
// NOT_FOUND).
func (h *Handler) checkSchemaSettings(ctx context.Context, ss *pubsubpb.SchemaSettings) (string, error) {
	if ss == nil {
		return "", nil
	}
	if ss.GetSchema() == "" {
		return "", invalid("No schema name provided")
	}
	r, err := parseName(ss.GetSchema(), collSchemas)
	if err != nil {
		return "", err
	}
	if ss.GetEncoding() != pubsubpb.Encoding_JSON && ss.GetEncoding() != pubsubpb.Encoding_BINARY {
		return "", invalid("Invalid schema encoding provided")
	}
	if _, err := h.schemas.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: r.id}); err != nil {
		return "", backendError(ctx, err, msgSchemaNotFound)
	}
	var seqs [2]int64
	for i, b := range []struct{ id, notFound string }{{ss.GetFirstRevisionId(), msgFirstRevisionNotFound}, {ss.GetLastRevisionId(), msgLastRevisionNotFound}} {
		if b.id == "" {
			continue
		}
		resp, err := h.schemas.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: r.id, RevisionId: b.id})
		if err != nil {
			return "", backendError(ctx, err, b.notFound)
		}
		seqs[i] = resp.GetRevision().GetSequence()
	}
	if ss.GetFirstRevisionId() != "" && ss.GetLastRevisionId() != "" && seqs[0] > seqs[1] {
		return "", invalid("First revision creation time is after last revision creation time")
	}
	return r.id, nil
}

// topicSchemaError maps a failed topic create or update: the coordinator's NOT_FOUND
// for a schema deleted since checkSchemaSettings looked reads as Google's.
func topicSchemaError(ctx context.Context, err error) error {
	if status.Code(err) == codes.NotFound && status.Convert(err).Message() == "schema not found" {
		return status.Error(codes.NotFound, msgSchemaNotFound)
	}
	return backendError(ctx, err, msgTopicNotFound)
}

// showSchemaSettings turns t's stored schema settings into what Google shows:
// `_deleted-schema_` once the schema was deleted (schemaID empty), with every bounding
// revision, which went with it, `_deleted-schema-revision_` (as the emulator shows
// them); and `_deleted-schema-revision_` for a bounding revision that was deleted.
func (h *Handler) showSchemaSettings(ctx context.Context, t *pubsubpb.Topic, schemaID string) error {
	ss := t.GetSchemaSettings()
	if ss == nil {
		return nil
	}
	if schemaID == "" {
		ss.Schema = deletedSchema
		if ss.GetFirstRevisionId() != "" {
			ss.FirstRevisionId = deletedSchemaRevision
		}
		if ss.GetLastRevisionId() != "" {
			ss.LastRevisionId = deletedSchemaRevision
		}
		return nil
	}
	if ss.GetFirstRevisionId() == "" && ss.GetLastRevisionId() == "" {
		return nil
	}
	rg, err := h.revisionRange(ctx, schemaID, ss.GetFirstRevisionId(), ss.GetLastRevisionId())
	if status.Code(err) == codes.NotFound {
		ss.Schema = deletedSchema // deleted since the topic was read
		return nil
	}
	if err != nil {
		return backendError(ctx, err, "")
	}
	if rg.firstDeleted {
		ss.FirstRevisionId = deletedSchemaRevision
	}
	if rg.lastDeleted {
		ss.LastRevisionId = deletedSchemaRevision
	}
	return nil
}

// schemaHeaders checks every message of a publish against the topic's schema and
// returns, per message, the attributes Google adds (schema name, encoding, and the
// newest revision in the topic's range that the message matches). A message that
// matches none rejects the whole publish: INVALID_ARGUMENT "Invalid data in message:
// Message failed schema validation." with the ErrorInfo Google sends (reason
// INVALID_{JSON,BINARY}_{AVRO,PROTO}_MESSAGE, metadata message and revisionInfo). A
// topic whose schema was deleted refuses every publish (Google: "all attempts to
// publish messages to topics associated with that schema fail"; NOT_FOUND as the
// emulator).
func (h *Handler) schemaHeaders(ctx context.Context, t cachedTopic, msgs []*pubsubpb.PubsubMessage) ([][]*storagev1.Header, error) {
	ss := t.schema
	if t.schemaDeleted {
		return nil, status.Error(codes.NotFound, msgTopicSchemaDeleted)
	}
	r, err := parseName(ss.GetSchema(), collSchemas)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "stored schema settings: %v", err)
	}
	rg, err := h.revisionRange(ctx, r.id, ss.GetFirstRevisionId(), ss.GetLastRevisionId())
	if status.Code(err) == codes.NotFound {
		return nil, status.Error(codes.NotFound, msgTopicSchemaDeleted)
	}
	if err != nil {
		return nil, backendError(ctx, err, "")
	}
	enc := ss.GetEncoding()
	out := make([][]*storagev1.Header, len(msgs))
	for i, m := range msgs {
		matched, lastErr, lastRev := "", error(nil), ""
		for _, rev := range rg.revs {
			if lastErr = rev.codec.check(m.GetData(), enc); lastErr == nil {
				matched = rev.id
				break
			}
			lastRev = rev.id
		}
		if matched == "" {
			return nil, schemaMismatch(ss, lastRev, lastErr, rg.revs)
		}
		out[i] = []*storagev1.Header{
			{Key: attrSchemaName, Value: []byte(ss.GetSchema())},
			{Key: attrSchemaEncoding, Value: []byte(enc.String())},
			{Key: attrSchemaRevision, Value: []byte(matched)},
		}
	}
	return out, nil
}

// schemaMismatch is the status of a publish with a message no revision accepts.
func schemaMismatch(ss *pubsubpb.SchemaSettings, lastRev string, lastErr error, revs []rangeRevision) error {
	kind := "AVRO"
	if len(revs) > 0 {
		if _, ok := revs[0].codec.(*protoCodec); ok {
			kind = "PROTO"
		}
	}
	info := "Could not validate message with any schema revision for schema: " + ss.GetSchema()
	if lastRev != "" {
		info += fmt.Sprintf(", last checked revision: revision_id=%s failed with status: %v", lastRev, lastErr)
	} else {
		info += ": the topic's revision range holds no revision"
	}
	st, err := status.New(codes.InvalidArgument, "Invalid data in message: Message failed schema validation.").WithDetails(&errdetails.ErrorInfo{
		Reason:   "INVALID_" + strings.ToUpper(ss.GetEncoding().String()) + "_" + kind + "_MESSAGE",
		Domain:   "pubsub.googleapis.com",
		Metadata: map[string]string{"message": "Message failed schema validation", "revisionInfo": info},
	})
	if err != nil {
		return status.Error(codes.InvalidArgument, info)
	}
	return st.Err()
}

// showDeletedSchema rewrites the schema attributes of a message being delivered once
// its schema was deleted: googclient_schemaname reads `_deleted-schema_` (Google,
// "Validate schemas") and googclient_schemarevisionid `_deleted-schema-revision_`, as
// the emulator delivers them. When the registry cannot be asked the attributes stay as
// published.
func (h *Handler) showDeletedSchema(ctx context.Context, m *pubsubpb.PubsubMessage) {
	name, ok := m.GetAttributes()[attrSchemaName]
	if !ok || name == deletedSchema {
		return
	}
	r, err := parseName(name, collSchemas)
	if err != nil {
		return
	}
	if _, err := h.revisionRange(ctx, r.id, "", ""); status.Code(err) == codes.NotFound {
		m.Attributes[attrSchemaName] = deletedSchema
		if _, ok := m.Attributes[attrSchemaRevision]; ok {
			m.Attributes[attrSchemaRevision] = deletedSchemaRevision
		}
	}
}
