package server

import (
	"encoding/base64"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func schemaClient(t *testing.T, r *running) coordinatorv1.PubSubSchemaServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return coordinatorv1.NewPubSubSchemaServiceClient(cc)
}

// TestPubSubSchemas: schemas and revisions in creation order, the revision limit, the
// only revision kept, tombstones bounding a range, and a topic's schema kept existing
// (NOT_FOUND on create, cleared by the schema's delete).
func TestPubSubSchemas(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	c, reg := schemaClient(t, r), registryClient(t, r)
	ctx := ctxT(t)
	rev := func(id, spec string) *coordinatorv1.PubSubSchemaRevision {
		return &coordinatorv1.PubSubSchemaRevision{SchemaId: id, Spec: []byte(spec)}
	}

	if _, err := c.CreatePubSubSchema(ctx, &coordinatorv1.CreatePubSubSchemaRequest{Revision: rev("1bad", "x")}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("schema 1bad: %v", err)
	}
	cr, err := c.CreatePubSubSchema(ctx, &coordinatorv1.CreatePubSubSchemaRequest{Revision: rev("orders-v", "def-1")})
	if err != nil || len(cr.GetRevision().GetRevisionId()) != 8 || cr.GetRevision().GetCreatedMs() == 0 {
		t.Fatalf("create: %v, %v", cr, err)
	}
	if _, err := c.CreatePubSubSchema(ctx, &coordinatorv1.CreatePubSubSchemaRequest{Revision: rev("orders-v", "def-1")}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate schema: %v", err)
	}
	if _, err := c.CommitPubSubSchemaRevision(ctx, &coordinatorv1.CommitPubSubSchemaRevisionRequest{Revision: rev("missing", "x")}); status.Code(err) != codes.NotFound {
		t.Fatalf("commit to a missing schema: %v", err)
	}
	ids := []string{cr.GetRevision().GetRevisionId()}
	for i := 2; i <= 3; i++ {
		cm, err := c.CommitPubSubSchemaRevision(ctx, &coordinatorv1.CommitPubSubSchemaRevisionRequest{Revision: rev("orders-v", "def-"+string(rune('0'+i))), MaxRevisions: 3})
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		ids = append(ids, cm.GetRevision().GetRevisionId())
	}
	if _, err := c.CommitPubSubSchemaRevision(ctx, &coordinatorv1.CommitPubSubSchemaRevisionRequest{Revision: rev("orders-v", "def-4"), MaxRevisions: 3}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("commit past the limit: %v", err)
	}
	if g, err := c.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: "orders-v"}); err != nil || string(g.GetRevision().GetSpec()) != "def-3" {
		t.Fatalf("latest: %v, %v", g, err)
	}
	if g, err := c.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: ids[0]}); err != nil || string(g.GetRevision().GetSpec()) != "def-1" {
		t.Fatalf("revision 1: %v, %v", g, err)
	}
	if _, err := c.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: "00000000"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown revision: %v", err)
	}

	// Delete the middle revision: it leaves the list, still bounds a range, and no
	// longer counts towards the limit.
	del, err := c.DeletePubSubSchemaRevision(ctx, &coordinatorv1.DeletePubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: ids[1]})
	if err != nil || string(del.GetRevision().GetSpec()) != "def-2" {
		t.Fatalf("delete revision 2: %v, %v", del, err)
	}
	if _, err := c.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: ids[1]}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleted revision: %v", err)
	}
	if g, err := c.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: ids[1], IncludeDeleted: true}); err != nil || !g.GetRevision().GetDeleted() {
		t.Fatalf("tombstone: %v, %v", g, err)
	}
	all, err := c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v", PageSize: 1})
	if err != nil || len(all.GetRevisions()) != 1 || all.GetRevisions()[0].GetRevisionId() != ids[0] || all.GetNextPageToken() == "" {
		t.Fatalf("list page 1: %v, %v", all, err)
	}
	all, err = c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v", PageToken: all.GetNextPageToken()})
	if err != nil || len(all.GetRevisions()) != 1 || all.GetRevisions()[0].GetRevisionId() != ids[2] || all.GetNextPageToken() != "" {
		t.Fatalf("list page 2: %v, %v", all, err)
	}
	rg, err := c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v", FirstRevisionId: ids[1]})
	if err != nil || len(rg.GetRevisions()) != 1 || rg.GetRevisions()[0].GetRevisionId() != ids[2] || !rg.GetFirstRevisionDeleted() || rg.GetLastRevisionDeleted() {
		t.Fatalf("range from the deleted revision: %v, %v", rg, err)
	}
	rg, err = c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v", LastRevisionId: ids[1]})
	if err != nil || len(rg.GetRevisions()) != 1 || rg.GetRevisions()[0].GetRevisionId() != ids[0] || !rg.GetLastRevisionDeleted() {
		t.Fatalf("range up to the deleted revision: %v, %v", rg, err)
	}
	for _, seq := range []string{"9223372036854775807", "-5", "x"} {
		// The largest sequence once wrapped round to the first page.
		tok := base64.RawURLEncoding.EncodeToString([]byte(seq))
		if _, err := c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v", PageToken: tok}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("page token of sequence %s: %v, want InvalidArgument", seq, err)
		}
	}
	if _, err := c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v", FirstRevisionId: "00000000"}); status.Code(err) != codes.NotFound {
		t.Fatalf("range from an unknown revision: %v", err)
	}
	if _, err := c.CommitPubSubSchemaRevision(ctx, &coordinatorv1.CommitPubSubSchemaRevisionRequest{Revision: rev("orders-v", "def-4"), MaxRevisions: 3}); err != nil {
		t.Fatalf("commit after a delete: %v", err)
	}
	for _, id := range []string{ids[0], ids[2]} {
		if _, err := c.DeletePubSubSchemaRevision(ctx, &coordinatorv1.DeletePubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: id}); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	last, err := c.GetPubSubSchemaRevision(ctx, &coordinatorv1.GetPubSubSchemaRevisionRequest{SchemaId: "orders-v"})
	if err != nil || string(last.GetRevision().GetSpec()) != "def-4" {
		t.Fatalf("latest after deletes: %v, %v", last, err)
	}
	if _, err := c.DeletePubSubSchemaRevision(ctx, &coordinatorv1.DeletePubSubSchemaRevisionRequest{SchemaId: "orders-v", RevisionId: last.GetRevision().GetRevisionId()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete the only revision: %v", err)
	}

	// Topics: a missing schema is NOT_FOUND; deleting the schema clears it.
	if _, err := reg.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "orders", SchemaId: "missing"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("topic with a missing schema: %v", err)
	}
	if _, err := reg.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "orders", SchemaId: "orders-v"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.UpdatePubSubTopic(ctx, &coordinatorv1.UpdatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "orders", SchemaId: "missing"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("update to a missing schema: %v", err)
	}
	if g, err := reg.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: "orders"}); err != nil || g.GetTopic().GetSchemaId() != "orders-v" {
		t.Fatalf("topic: %v, %v", g, err)
	}
	if _, err := c.CreatePubSubSchema(ctx, &coordinatorv1.CreatePubSubSchemaRequest{Revision: rev("aaa-first", "a")}); err != nil {
		t.Fatal(err)
	}
	ls, err := c.ListPubSubSchemas(ctx, &coordinatorv1.ListPubSubSchemasRequest{PageSize: 1})
	if err != nil || len(ls.GetSchemas()) != 1 || ls.GetSchemas()[0].GetSchemaId() != "aaa-first" || ls.GetNextPageToken() == "" {
		t.Fatalf("schemas page 1: %v, %v", ls, err)
	}
	ls, err = c.ListPubSubSchemas(ctx, &coordinatorv1.ListPubSubSchemasRequest{PageToken: ls.GetNextPageToken()})
	if err != nil || len(ls.GetSchemas()) != 1 || string(ls.GetSchemas()[0].GetSpec()) != "def-4" {
		t.Fatalf("schemas page 2: %v, %v", ls, err)
	}
	if _, err := c.DeletePubSubSchema(ctx, &coordinatorv1.DeletePubSubSchemaRequest{SchemaId: "orders-v"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeletePubSubSchema(ctx, &coordinatorv1.DeletePubSubSchemaRequest{SchemaId: "orders-v"}); status.Code(err) != codes.NotFound {
		t.Fatalf("delete again: %v", err)
	}
	if g, err := reg.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: "orders"}); err != nil || g.GetTopic().GetSchemaId() != "" {
		t.Fatalf("topic after the schema's delete: %v, %v", g, err)
	}
	// A schema created again under the id starts afresh.
	if _, err := c.CreatePubSubSchema(ctx, &coordinatorv1.CreatePubSubSchemaRequest{Revision: rev("orders-v", "new")}); err != nil {
		t.Fatal(err)
	}
	if rs, err := c.ListPubSubSchemaRevisions(ctx, &coordinatorv1.ListPubSubSchemaRevisionsRequest{SchemaId: "orders-v"}); err != nil || len(rs.GetRevisions()) != 1 {
		t.Fatalf("revisions of the new schema: %v, %v", rs, err)
	}
}
