package handler

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// checkSchemaSettings validates a topic's schema settings (nil = none) for CreateTopic
// and UpdateTopic and returns the schema's id ("" for none). As Google: no schema name
// or an encoding other than JSON or BINARY is INVALID_ARGUMENT, a schema or bounding
// revision that does not exist NOT_FOUND, a first revision created after the last
// INVALID_ARGUMENT. A malformed schema name is INVALID_ARGUMENT (the emulator answers
// NOT_FOUND).
func (h *Publisher) checkSchemaSettings(ctx context.Context, ss *pubsubpb.SchemaSettings) (string, error) {
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
func (h *Publisher) showSchemaSettings(ctx context.Context, t *pubsubpb.Topic, schemaID string) error {
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
func (h *Publisher) schemaHeaders(ctx context.Context, t cachedTopic, msgs []*pubsubpb.PubsubMessage) ([][]*storagev1.Header, error) {
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
