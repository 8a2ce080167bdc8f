package handler

import (
	"context"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// google.pubsub.v1.SchemaService: schemas of type AVRO or PROTOCOL_BUFFER, each a list
// of immutable revisions (ids of 8 hex digits, at most maxSchemaRevisions live at
// once), kept in the coordinator (PubSubSchemaService). Names are projects/P/schemas/S,
// a revision S@REV. Definitions are compiled here (schema_codec.go) before they are
// stored, so every stored revision compiles. Errors follow the emulator's codes and
// words, except where Google's reference says otherwise (noted at each call).

// Schemas serves google.pubsub.v1.SchemaService. Its changes drop the registry's
// cached revision ranges (forgetSchema), which Publisher checks messages against.
type Schemas struct {
	pubsubpb.UnimplementedSchemaServiceServer
	*registry
}

// maxSchemaRevisions is how many revisions a schema may have (Google: "A single schema
// cannot have more than 20 revisions").
const maxSchemaRevisions = 20

// Messages of the SchemaService statuses, as the emulator words them.
const (
	msgSchemaMissing      = "Schema not found"
	msgRevisionMissing    = "Schema revision not found"
	msgTooManyRevisions   = "Already at maximum number of schema revisions"
	msgLastRevision       = "Cannot delete last revision. Please use DeleteSchema."
	msgNoRevisionID       = "Missing revision ID"
	msgNoEncoding         = "No encoding provided."
	msgRollbackRevMissing = "Revision not found"
)

// parseSchemaName parses projects/P/schemas/S, or with withRevision also S@REV (REV may
// be empty: the latest revision, as the emulator reads it).
func parseSchemaName(name string, withRevision bool) (resource, string, error) {
	base, rev, hasRev := strings.Cut(name, "@")
	if hasRev && !withRevision {
		return resource{}, "", status.Errorf(codes.InvalidArgument, "Invalid [%s] name: (name=%s)", collSchemas, name)
	}
	r, err := parseName(base, collSchemas)
	if err != nil {
		return resource{}, "", status.Errorf(codes.InvalidArgument, "Invalid [%s] name: (name=%s)", collSchemas, name)
	}
	return r, rev, nil
}

// schemaError maps a failed PubSubSchemaService call: NOT_FOUND reads "Schema not
// found" or, for a revision, "Schema revision not found".
func schemaError(ctx context.Context, err error) error {
	if status.Code(err) == codes.NotFound && strings.Contains(status.Convert(err).Message(), "revision") {
		return status.Error(codes.NotFound, msgRevisionMissing)
	}
	return backendError(ctx, err, msgSchemaMissing)
}

// schemaSpec is what a revision stores: the type and the definition (or compiled
// configuration) of s, after they compiled.
func schemaSpec(ctx context.Context, s *pubsubpb.Schema) ([]byte, error) {
	if _, err := compileSchema(ctx, s); err != nil {
		return nil, err
	}
	spec := &pubsubpb.Schema{Type: s.GetType(), Definition: s.GetDefinition(), Configuration: s.GetConfiguration()}
	b, err := proto.Marshal(spec)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode schema: %v", err)
	}
	return b, nil
}

// schemaOut is the google.pubsub.v1.Schema of a stored revision in project; the BASIC
// view leaves out the definition.
func schemaOut(project string, rev *coordinatorv1.PubSubSchemaRevision, view pubsubpb.SchemaView) (*pubsubpb.Schema, error) {
	s := &pubsubpb.Schema{}
	if err := proto.Unmarshal(rev.GetSpec(), s); err != nil {
		return nil, status.Errorf(codes.Internal, "stored revision %s@%s: %v", rev.GetSchemaId(), rev.GetRevisionId(), err)
	}
	s.Name = resource{project: project, id: rev.GetSchemaId()}.name(collSchemas)
	s.RevisionId = rev.GetRevisionId()
	s.RevisionCreateTime = timestamppb.New(time.UnixMilli(rev.GetCreatedMs()))
	if view == pubsubpb.SchemaView_BASIC {
		s.Definition, s.Configuration = "", nil
	}
	return s, nil
}

// CreateSchema creates schema parent/schemas/schema_id with its first revision. The
// id follows the resource name rules (INVALID_ARGUMENT "Invalid [schemas] name"); an
// existing one is ALREADY_EXISTS.
func (h *Schemas) CreateSchema(ctx context.Context, req *pubsubpb.CreateSchemaRequest) (*pubsubpb.Schema, error) {
	r, err := parseName(req.GetParent()+"/"+collSchemas+"/"+req.GetSchemaId(), collSchemas)
	if err != nil {
		return nil, err
	}
	spec, err := schemaSpec(ctx, req.GetSchema())
	if err != nil {
		return nil, err
	}
	resp, err := h.schemas.CreatePubSubSchema(ctx, &coordinatorv1.CreatePubSubSchemaRequest{
		Revision: &coordinatorv1.PubSubSchemaRevision{SchemaId: r.id, Spec: spec},
	})
	if err != nil {
		return nil, schemaError(ctx, err)
	}
	h.forgetSchema(r.id)
	return schemaOut(r.project, resp.GetRevision(), pubsubpb.SchemaView_FULL)
}

// GetSchema returns a schema's latest revision, or the one named S@REV. The default
// view is FULL.
func (h *Schemas) GetSchema(ctx context.Context, req *pubsubpb.GetSchemaRequest) (*pubsubpb.Schema, error) {
	r, rev, err := parseSchemaName(req.GetName(), true)
	if err != nil {
		return nil, err
	}
	resp, err := h.schemas.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: r.id, RevisionId: rev})
	if err != nil {
		return nil, schemaError(ctx, err)
	}
	return schemaOut(r.project, resp.GetRevision(), req.GetView())
}

// ListSchemas pages through the project's schemas (ids are global: every schema), each
// as its latest revision. The default view is BASIC, as Google documents it (the
// emulator answers FULL).
func (h *Schemas) ListSchemas(ctx context.Context, req *pubsubpb.ListSchemasRequest) (*pubsubpb.ListSchemasResponse, error) {
	project, err := parseProject(req.GetParent())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.schemas.ListPubSubSchemas(ctx, &coordinatorv1.ListPubSubSchemasRequest{PageSize: req.GetPageSize(), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, schemaError(ctx, err)
	}
	out := &pubsubpb.ListSchemasResponse{NextPageToken: resp.GetNextPageToken()}
	for _, rev := range resp.GetSchemas() {
		s, err := schemaOut(project, rev, basicByDefault(req.GetView()))
		if err != nil {
			return nil, err
		}
		out.Schemas = append(out.Schemas, s)
	}
	return out, nil
}

// ListSchemaRevisions pages through a schema's revisions, oldest first (the emulator's
// order). The default view is BASIC, as Google documents it.
func (h *Schemas) ListSchemaRevisions(ctx context.Context, req *pubsubpb.ListSchemaRevisionsRequest) (*pubsubpb.ListSchemaRevisionsResponse, error) {
	r, _, err := parseSchemaName(req.GetName(), false)
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.schemas.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{
		SchemaId: r.id, PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, schemaError(ctx, err)
	}
	out := &pubsubpb.ListSchemaRevisionsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, rev := range resp.GetRevisions() {
		s, err := schemaOut(r.project, rev, basicByDefault(req.GetView()))
		if err != nil {
			return nil, err
		}
		out.Schemas = append(out.Schemas, s)
	}
	return out, nil
}

func basicByDefault(v pubsubpb.SchemaView) pubsubpb.SchemaView {
	if v == pubsubpb.SchemaView_SCHEMA_VIEW_UNSPECIFIED {
		return pubsubpb.SchemaView_BASIC
	}
	return v
}

// commit adds a revision with spec to schema r and returns it: RESOURCE_EXHAUSTED past
// maxSchemaRevisions.
func (h *Schemas) commit(ctx context.Context, r resource, spec []byte) (*pubsubpb.Schema, error) {
	resp, err := h.schemas.CommitPubSubSchemaRevision(ctx, &coordinatorv1.CommitPubSubSchemaRevisionRequest{
		Revision: &coordinatorv1.PubSubSchemaRevision{SchemaId: r.id, Spec: spec}, MaxRevisions: maxSchemaRevisions,
	})
	if status.Code(err) == codes.ResourceExhausted {
		return nil, status.Error(codes.ResourceExhausted, msgTooManyRevisions)
	}
	if err != nil {
		return nil, schemaError(ctx, err)
	}
	h.forgetSchema(r.id)
	return schemaOut(r.project, resp.GetRevision(), pubsubpb.SchemaView_FULL)
}

// CommitSchema adds a revision (the schema's name inside the request is ignored) and
// returns it; it becomes the latest.
func (h *Schemas) CommitSchema(ctx context.Context, req *pubsubpb.CommitSchemaRequest) (*pubsubpb.Schema, error) {
	r, _, err := parseSchemaName(req.GetName(), false)
	if err != nil {
		return nil, err
	}
	spec, err := schemaSpec(ctx, req.GetSchema())
	if err != nil {
		return nil, err
	}
	return h.commit(ctx, r, spec)
}

// RollbackSchema commits a new revision with the definition of revision_id.
func (h *Schemas) RollbackSchema(ctx context.Context, req *pubsubpb.RollbackSchemaRequest) (*pubsubpb.Schema, error) {
	r, _, err := parseSchemaName(req.GetName(), false)
	if err != nil {
		return nil, err
	}
	if req.GetRevisionId() == "" {
		return nil, invalid(msgNoRevisionID)
	}
	resp, err := h.schemas.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: r.id, RevisionId: req.GetRevisionId()})
	if err != nil {
		err = schemaError(ctx, err)
		if status.Convert(err).Message() == msgRevisionMissing {
			return nil, status.Error(codes.NotFound, msgRollbackRevMissing)
		}
		return nil, err
	}
	return h.commit(ctx, r, resp.GetRevision().GetSpec())
}

// DeleteSchemaRevision deletes revision S@REV and returns it. The deprecated
// revision_id field names the revision when the name has none (the emulator ignores
// it); naming two different ones is INVALID_ARGUMENT. A schema's only revision cannot
// be deleted (INVALID_ARGUMENT; delete the schema).
func (h *Schemas) DeleteSchemaRevision(ctx context.Context, req *pubsubpb.DeleteSchemaRevisionRequest) (*pubsubpb.Schema, error) {
	r, rev, err := parseSchemaName(req.GetName(), true)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the deprecated field still names a revision for older clients
	old := req.GetRevisionId()
	switch {
	case rev == "":
		rev = old
	case old != "" && old != rev:
		return nil, invalid("The revision in the name (%s) and revision_id (%s) differ", rev, old)
	}
	if rev == "" {
		return nil, status.Error(codes.NotFound, msgRevisionMissing)
	}
	resp, err := h.schemas.DeletePubSubSchemaRevision(ctx, &coordinatorv1.DeletePubSubSchemaRevisionRequest{SchemaId: r.id, RevisionId: rev})
	if status.Code(err) == codes.FailedPrecondition {
		return nil, invalid(msgLastRevision)
	}
	if err != nil {
		return nil, schemaError(ctx, err)
	}
	h.forgetSchema(r.id)
	return schemaOut(r.project, resp.GetRevision(), pubsubpb.SchemaView_FULL)
}

// DeleteSchema deletes a schema and all its revisions. Topics that used it keep their
// settings with schema `_deleted-schema_`, and refuse every publish.
func (h *Schemas) DeleteSchema(ctx context.Context, req *pubsubpb.DeleteSchemaRequest) (*emptypb.Empty, error) {
	r, _, err := parseSchemaName(req.GetName(), false)
	if err != nil {
		return nil, err
	}
	if _, err := h.schemas.DeletePubSubSchema(ctx, &coordinatorv1.DeletePubSubSchemaRequest{SchemaId: r.id}); err != nil {
		return nil, schemaError(ctx, err)
	}
	h.forgetSchema(r.id)
	h.forgetTopics()
	return &emptypb.Empty{}, nil
}

// ValidateSchema checks that a schema compiles (compileSchema); nothing is stored.
// A malformed parent is INVALID_ARGUMENT (the emulator fails with UNKNOWN).
func (h *Schemas) ValidateSchema(ctx context.Context, req *pubsubpb.ValidateSchemaRequest) (*pubsubpb.ValidateSchemaResponse, error) {
	if _, err := parseProject(req.GetParent()); err != nil {
		return nil, err
	}
	if _, err := compileSchema(ctx, req.GetSchema()); err != nil {
		return nil, err
	}
	return &pubsubpb.ValidateSchemaResponse{}, nil
}

// ValidateMessage checks one message against a stored schema (its latest revision, or
// S@REV) or an ad hoc one. A message that does not match is INVALID_ARGUMENT "Could
// not parse <encoding> <type> message: <why>".
func (h *Schemas) ValidateMessage(ctx context.Context, req *pubsubpb.ValidateMessageRequest) (*pubsubpb.ValidateMessageResponse, error) {
	if _, err := parseProject(req.GetParent()); err != nil {
		return nil, err
	}
	var (
		cd  codec
		typ pubsubpb.Schema_Type
	)
	if name := req.GetName(); name != "" {
		r, rev, err := parseSchemaName(name, true)
		if err != nil {
			return nil, err
		}
		resp, err := h.schemas.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: r.id, RevisionId: rev})
		if err != nil {
			return nil, schemaError(ctx, err)
		}
		if cd, err = h.revisionCodec(ctx, resp.GetRevision()); err != nil {
			return nil, err
		}
		s, _ := schemaOut(r.project, resp.GetRevision(), pubsubpb.SchemaView_BASIC)
		typ = s.GetType()
	} else {
		var err error
		if cd, err = compileSchema(ctx, req.GetSchema()); err != nil {
			return nil, err
		}
		typ = req.GetSchema().GetType()
	}
	enc := req.GetEncoding()
	if enc != pubsubpb.Encoding_JSON && enc != pubsubpb.Encoding_BINARY {
		return nil, invalid(msgNoEncoding)
	}
	if err := cd.check(req.GetMessage(), enc); err != nil {
		encName, typName := "JSON", "Avro"
		if enc == pubsubpb.Encoding_BINARY {
			encName = "binary"
		}
		if typ == pubsubpb.Schema_PROTOCOL_BUFFER {
			typName = "Protocol Buffer"
		}
		return nil, invalid("Could not parse %s %s message: %v", encName, typName, err)
	}
	return &pubsubpb.ValidateMessageResponse{}, nil
}
