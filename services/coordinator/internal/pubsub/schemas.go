package pubsub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"strconv"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Schemas serves PubSubSchemaService: Pub/Sub schemas and their revisions in Postgres
// (package store). Changes to one schema are serialized by its transaction lock;
// topics take it after their own (LOCKS.md).
type Schemas struct {
	coordinatorv1.UnimplementedPubSubSchemaServiceServer

	store *store.Store
}

// NewSchemas returns a Schemas over st.
func NewSchemas(st *store.Store) *Schemas { return &Schemas{store: st} }

// revisionIDAttempts bounds the draws of a revision id the schema does not have yet
// (8 random hex digits: a clash is already rare).
const revisionIDAttempts = 8

func revProto(r *store.PubSubSchemaRevision) *coordinatorv1.PubSubSchemaRevision {
	return &coordinatorv1.PubSubSchemaRevision{
		SchemaId: r.SchemaID, RevisionId: r.RevisionID, Spec: r.Spec,
		CreatedMs: r.CreatedAt.UnixMilli(), Sequence: r.Seq, Deleted: r.Deleted,
	}
}

// lockTopicSchema takes the lock of a topic's schema (none when id is empty) and
// checks that it exists. Callers hold the topic's lock (topic, then schema).
func lockTopicSchema(ctx context.Context, tx *store.PubSubTx, id string) error {
	if id == "" {
		return nil
	}
	if err := tx.LockSchema(ctx, id); err != nil {
		return err
	}
	return tx.SchemaExists(ctx, id)
}

// addRevision gives rev a fresh revision id of its schema and inserts it.
func addRevision(ctx context.Context, tx *store.PubSubTx, rev *store.PubSubSchemaRevision) error {
	for range revisionIDAttempts {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		rev.RevisionID = hex.EncodeToString(b[:])
		err := tx.InsertSchemaRevision(ctx, rev)
		if !errors.Is(err, store.ErrRevisionIDTaken) {
			return err
		}
	}
	return fail(ErrNoRevisionID, "no free revision id for schema %s after %d draws", rev.SchemaID, revisionIDAttempts)
}

// CreatePubSubSchema registers a schema and its first revision.
func (s *Schemas) CreatePubSubSchema(ctx context.Context, req *coordinatorv1.CreatePubSubSchemaRequest) (*coordinatorv1.CreatePubSubSchemaResponse, error) {
	id := req.GetRevision().GetSchemaId()
	if err := channel.ValidatePubSubID(id); err != nil {
		return nil, statusError(invalid(err))
	}
	rev := &store.PubSubSchemaRevision{SchemaID: id, Spec: req.GetRevision().GetSpec()}
	err := s.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSchema(ctx, id); err != nil {
			return err
		}
		if err := tx.SchemaExists(ctx, id); err == nil {
			return ErrSchemaExists
		} else if !errors.Is(err, store.ErrSchemaNotFound) {
			return err
		}
		if err := tx.InsertSchema(ctx, id); err != nil {
			return err
		}
		return addRevision(ctx, tx, rev)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.CreatePubSubSchemaResponse{Revision: revProto(rev)}, nil
}

// CommitPubSubSchemaRevision adds a revision to a schema, refusing one past
// max_revisions live revisions (RESOURCE_EXHAUSTED).
func (s *Schemas) CommitPubSubSchemaRevision(ctx context.Context, req *coordinatorv1.CommitPubSubSchemaRevisionRequest) (*coordinatorv1.CommitPubSubSchemaRevisionResponse, error) {
	id := req.GetRevision().GetSchemaId()
	rev := &store.PubSubSchemaRevision{SchemaID: id, Spec: req.GetRevision().GetSpec()}
	err := s.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSchema(ctx, id); err != nil {
			return err
		}
		if err := tx.SchemaExists(ctx, id); err != nil {
			return err
		}
		if limit := req.GetMaxRevisions(); limit > 0 {
			n, err := tx.LiveSchemaRevisions(ctx, id)
			if err != nil {
				return err
			}
			if n >= int(limit) {
				return fail(ErrTooManyRevisions, "schema %s already has %d revisions, the most allowed", id, n)
			}
		}
		return addRevision(ctx, tx, rev)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.CommitPubSubSchemaRevisionResponse{Revision: revProto(rev)}, nil
}

// GetPubSubSchemaRevision returns one revision (the latest live one by default).
func (s *Schemas) GetPubSubSchemaRevision(ctx context.Context, req *coordinatorv1.GetPubSubSchemaRevisionRequest) (*coordinatorv1.GetPubSubSchemaRevisionResponse, error) {
	r, err := s.store.PubSubSchemaRevision(ctx, req.GetSchemaId(), req.GetRevisionId(), req.GetIncludeDeleted())
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.GetPubSubSchemaRevisionResponse{Revision: revProto(r)}, nil
}

// ListPubSubSchemas pages through schemas by id, each as its latest live revision.
func (s *Schemas) ListPubSubSchemas(ctx context.Context, req *coordinatorv1.ListPubSubSchemasRequest) (*coordinatorv1.ListPubSubSchemasResponse, error) {
	size, after, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusError(err)
	}
	rs, err := s.store.PubSubSchemas(ctx, after, size+1)
	if err != nil {
		return nil, statusError(err)
	}
	resp := &coordinatorv1.ListPubSubSchemasResponse{}
	resp.Schemas, resp.NextPageToken = pageOut(rs, size, func(r *store.PubSubSchemaRevision) string { return r.SchemaID }, revProto)
	return resp, nil
}

// ListPubSubSchemaRevisions pages through a schema's live revisions, oldest first,
// within [first_revision_id, last_revision_id] by creation order. The page token is
// the sequence of the last revision answered.
func (s *Schemas) ListPubSubSchemaRevisions(ctx context.Context, req *coordinatorv1.ListPubSubSchemaRevisionsRequest) (*coordinatorv1.ListPubSubSchemaRevisionsResponse, error) {
	size, after, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusError(err)
	}
	id := req.GetSchemaId()
	if _, err := s.store.PubSubSchemaRevision(ctx, id, "", false); err != nil {
		return nil, statusError(err)
	}
	resp := &coordinatorv1.ListPubSubSchemaRevisionsResponse{}
	from, to := int64(0), int64(math.MaxInt64)
	if after != "" {
		seq, err := strconv.ParseInt(after, 10, 64)
		if err != nil || seq < 0 || seq == math.MaxInt64 {
			return nil, statusError(fail(ErrInvalidArgument, "invalid page token %q", req.GetPageToken()))
		}
		from = seq + 1
	}
	if first := req.GetFirstRevisionId(); first != "" {
		r, err := s.store.PubSubSchemaRevision(ctx, id, first, true)
		if err != nil {
			return nil, statusError(err)
		}
		from, resp.FirstRevisionDeleted = max(from, r.Seq), r.Deleted
	}
	if last := req.GetLastRevisionId(); last != "" {
		r, err := s.store.PubSubSchemaRevision(ctx, id, last, true)
		if err != nil {
			return nil, statusError(err)
		}
		to, resp.LastRevisionDeleted = r.Seq, r.Deleted
	}
	rs, err := s.store.PubSubSchemaRevisions(ctx, id, from, to, size+1)
	if err != nil {
		return nil, statusError(err)
	}
	resp.Revisions, resp.NextPageToken = pageOut(rs, size, func(r *store.PubSubSchemaRevision) string { return strconv.FormatInt(r.Seq, 10) }, revProto)
	return resp, nil
}

// DeletePubSubSchemaRevision turns a live revision into a tombstone; the schema's only
// live revision is FAILED_PRECONDITION (delete the schema instead).
func (s *Schemas) DeletePubSubSchemaRevision(ctx context.Context, req *coordinatorv1.DeletePubSubSchemaRevisionRequest) (*coordinatorv1.DeletePubSubSchemaRevisionResponse, error) {
	id, revID := req.GetSchemaId(), req.GetRevisionId()
	var out *store.PubSubSchemaRevision
	err := s.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSchema(ctx, id); err != nil {
			return err
		}
		r, err := tx.SchemaRevision(ctx, id, revID, false)
		if err != nil {
			return err
		}
		n, err := tx.LiveSchemaRevisions(ctx, id)
		if err != nil {
			return err
		}
		if n <= 1 {
			return fail(ErrOnlyRevision, "revision %s is the only revision of schema %s", revID, id)
		}
		out = r
		return tx.MarkSchemaRevisionDeleted(ctx, id, revID)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.DeletePubSubSchemaRevisionResponse{Revision: revProto(out)}, nil
}

// DeletePubSubSchema deletes a schema and its revisions and clears it from its topics.
func (s *Schemas) DeletePubSubSchema(ctx context.Context, req *coordinatorv1.DeletePubSubSchemaRequest) (*coordinatorv1.DeletePubSubSchemaResponse, error) {
	id := req.GetSchemaId()
	err := s.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSchema(ctx, id); err != nil {
			return err
		}
		return tx.DeleteSchema(ctx, id)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.DeletePubSubSchemaResponse{}, nil
}
