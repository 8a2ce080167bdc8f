package server

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/natsx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// TestScramCredentials: credentials are stored, described without keys, replaced,
// deleted (a missing deletion reported), and each change is announced on NATS.
func TestScramCredentials(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := coordinatorv1.NewCredentialServiceClient(cc)
	ctx := ctxT(t)
	sub, err := e.nc.SubscribeSync(natsx.CredentialsChangedSubject(e.cfg.ClusterID))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	if _, err := c.GetScramCredential(ctx, &coordinatorv1.GetScramCredentialRequest{User: "alice", Mechanism: "SCRAM-SHA-512"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get before alter: %v, want NOT_FOUND", err)
	}
	up := &coordinatorv1.ScramCredential{User: "alice", Mechanism: "SCRAM-SHA-512", Salt: []byte("salt"), Iterations: 8192, StoredKey: []byte("st"), ServerKey: []byte("sv")}
	if _, err := c.AlterScramCredentials(ctx, &coordinatorv1.AlterScramCredentialsRequest{Upsertions: []*coordinatorv1.ScramCredential{up,
		{User: "alice", Mechanism: "SCRAM-SHA-256", Salt: []byte("s2"), Iterations: 4096, StoredKey: []byte("a"), ServerKey: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil || string(msg.Data) != "alice" {
		t.Fatalf("change notice: %v %v", msg, err)
	}
	got, err := c.GetScramCredential(ctx, &coordinatorv1.GetScramCredentialRequest{User: "alice", Mechanism: "SCRAM-SHA-512"})
	if err != nil || string(got.GetCredential().GetSalt()) != "salt" || got.GetCredential().GetIterations() != 8192 || string(got.GetCredential().GetServerKey()) != "sv" {
		t.Fatalf("get: %v %v", got, err)
	}
	up.Iterations, up.Salt = 10000, []byte("salt2")
	if _, err := c.AlterScramCredentials(ctx, &coordinatorv1.AlterScramCredentialsRequest{Upsertions: []*coordinatorv1.ScramCredential{up}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.DescribeScramCredentials(ctx, &coordinatorv1.DescribeScramCredentialsRequest{Users: []string{"alice", "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.GetUsers()) != 2 || d.GetUsers()[0].GetUser() != "alice" || len(d.GetUsers()[0].GetCredentials()) != 2 ||
		d.GetUsers()[0].GetCredentials()[1].GetIterations() != 10000 || d.GetUsers()[1].GetUser() != "bob" || len(d.GetUsers()[1].GetCredentials()) != 0 {
		t.Fatalf("describe: %v", d)
	}
	a, err := c.AlterScramCredentials(ctx, &coordinatorv1.AlterScramCredentialsRequest{Deletions: []*coordinatorv1.ScramCredentialKey{
		{User: "alice", Mechanism: "SCRAM-SHA-256"}, {User: "bob", Mechanism: "SCRAM-SHA-256"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetMissing()) != 1 || a.GetMissing()[0].GetUser() != "bob" {
		t.Fatalf("missing deletions: %v", a.GetMissing())
	}
	all, err := c.DescribeScramCredentials(ctx, &coordinatorv1.DescribeScramCredentialsRequest{})
	if err != nil || len(all.GetUsers()) != 1 || len(all.GetUsers()[0].GetCredentials()) != 1 {
		t.Fatalf("describe all: %v %v", all, err)
	}
	if _, err := c.AlterScramCredentials(ctx, &coordinatorv1.AlterScramCredentialsRequest{Upsertions: []*coordinatorv1.ScramCredential{{User: "x", Mechanism: "SCRAM-SHA-256"}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("upsert without keys: %v, want INVALID_ARGUMENT", err)
	}
	for _, it := range []int32{1, 4095, 16385, 1 << 30} {
		up := &coordinatorv1.ScramCredential{User: "x", Mechanism: "SCRAM-SHA-256", Salt: []byte("s"), Iterations: it, StoredKey: []byte("a"), ServerKey: []byte("b")}
		if _, err := c.AlterScramCredentials(ctx, &coordinatorv1.AlterScramCredentialsRequest{Upsertions: []*coordinatorv1.ScramCredential{up}}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("upsert with %d iterations: %v, want INVALID_ARGUMENT", it, err)
		}
	}
}
