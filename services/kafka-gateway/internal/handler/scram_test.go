package handler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// fakeCreds is an in-memory CredentialService.
type fakeCreds struct {
	mu    sync.Mutex
	creds map[[2]string]*coordinatorv1.ScramCredential
}

func (f *fakeCreds) GetScramCredential(_ context.Context, r *coordinatorv1.GetScramCredentialRequest, _ ...grpc.CallOption) (*coordinatorv1.GetScramCredentialResponse, error) {
	panic("not used")
}

func (f *fakeCreds) DescribeScramCredentials(_ context.Context, r *coordinatorv1.DescribeScramCredentialsRequest, _ ...grpc.CallOption) (*coordinatorv1.DescribeScramCredentialsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &coordinatorv1.DescribeScramCredentialsResponse{}
	users := r.GetUsers()
	if len(users) == 0 {
		seen := map[string]bool{}
		for k := range f.creds {
			if !seen[k[0]] {
				seen[k[0]] = true
				users = append(users, k[0])
			}
		}
	}
	for _, u := range users {
		uc := &coordinatorv1.UserScramCredentials{User: u}
		for _, m := range []string{sasl.ScramSHA256, sasl.ScramSHA512} {
			if c := f.creds[[2]string{u, m}]; c != nil {
				uc.Credentials = append(uc.Credentials, &coordinatorv1.ScramCredentialInfo{Mechanism: m, Iterations: c.GetIterations()})
			}
		}
		resp.Users = append(resp.Users, uc)
	}
	return resp, nil
}

func (f *fakeCreds) AlterScramCredentials(_ context.Context, r *coordinatorv1.AlterScramCredentialsRequest, _ ...grpc.CallOption) (*coordinatorv1.AlterScramCredentialsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &coordinatorv1.AlterScramCredentialsResponse{}
	for _, d := range r.GetDeletions() {
		k := [2]string{d.GetUser(), d.GetMechanism()}
		if f.creds[k] == nil {
			resp.Missing = append(resp.Missing, d)
		}
		delete(f.creds, k)
	}
	for _, u := range r.GetUpsertions() {
		f.creds[[2]string{u.GetUser(), u.GetMechanism()}] = u
	}
	return resp, nil
}

func scramEnv(t *testing.T, authz bool) (*authEnv, *fakeCreds, *[]string) {
	t.Helper()
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	creds := &fakeCreds{creds: map[[2]string]*coordinatorv1.ScramCredential{}}
	var changed []string
	cfg := Config{NodeID: 1, ClusterID: "unit"}
	acls := &fakeAcls{}
	if authz {
		cfg.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:admin"}, MaxAge: time.Hour}
	}
	h := New(cfg, Deps{Storage: st, Coordinator: co, Acls: acls, Credentials: creds,
		CredentialsChanged: func(u string) { changed = append(changed, u) }, Log: zaptest.NewLogger(t)})
	return &authEnv{env: &env{h: h, st: st, co: co}, acls: acls}, creds, &changed
}

func upsertion(user string, mech int8, iters int32) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
	u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = user, mech, iters, []byte("salt"), []byte("salted-password-bytes")
	return u
}

func deletion(user string, mech int8) kmsg.AlterUserSCRAMCredentialsRequestDeletion {
	d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
	d.Name, d.Mechanism = user, mech
	return d
}

// TestAlterAndDescribeScramCredentials: KIP-554's validation per user, keys derived
// from the salted password (never stored), describe of named and all users.
func TestAlterAndDescribeScramCredentials(t *testing.T) {
	e, creds, changed := scramEnv(t, false)
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		upsertion("alice", 2, 8192),
		upsertion("few", 1, 4095), upsertion("many", 1, 16385), upsertion("", 1, 4096), upsertion("", 2, 4096),
		upsertion("mech", 3, 4096), upsertion("dup", 1, 4096), upsertion("dup", 1, 4096),
		upsertion("both", 1, 4096), upsertion("both", 2, 4096), // Kafka 4: one user, one alteration
		upsertion("first-bad", 1, 1), upsertion("first-bad", 2, 4096),
		upsertion("kept", 2, 4096),
	}
	req.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{deletion("ghost", 1), deletion("kept", 1)}
	resp := e.as(t, "User:admin", req, 0).(*kmsg.AlterUserSCRAMCredentialsResponse)
	want := map[string]int16{"alice": 0, "few": kerr.UnacceptableCredential.Code, "many": kerr.UnacceptableCredential.Code,
		"": kerr.UnacceptableCredential.Code, "mech": kerr.UnsupportedSaslMechanism.Code, "dup": kerr.DuplicateResource.Code,
		"both": kerr.DuplicateResource.Code, "first-bad": kerr.UnacceptableCredential.Code, "kept": kerr.DuplicateResource.Code,
		"ghost": kerr.ResourceNotFound.Code}
	if len(resp.Results) != len(want) {
		t.Fatalf("results %+v", resp.Results)
	}
	for _, r := range resp.Results {
		if r.ErrorCode != want[r.User] {
			t.Errorf("user %q: %s, want %s", r.User, code(r.ErrorCode), code(want[r.User]))
		}
	}
	c := creds.creds[[2]string{"alice", sasl.ScramSHA512}]
	st, sv := sasl.KeysFromSalted(sasl.ScramSHA512, []byte("salted-password-bytes"))
	if c == nil || string(c.GetStoredKey()) != string(st) || string(c.GetServerKey()) != string(sv) || c.GetIterations() != 8192 {
		t.Fatalf("stored alice: %+v", c)
	}
	if len(creds.creds) != 1 {
		t.Fatalf("stored %d credentials, want alice's only", len(creds.creds))
	}
	req = kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{upsertion("alice", 1, 4096)}
	if r := e.as(t, "User:admin", req, 0).(*kmsg.AlterUserSCRAMCredentialsResponse); len(r.Results) != 1 || r.Results[0].ErrorCode != 0 {
		t.Fatalf("alice's second mechanism in its own request: %+v", r.Results)
	}
	if len(creds.creds) != 2 {
		t.Fatalf("stored %d credentials, want alice's 2 only", len(creds.creds))
	}
	if len(*changed) == 0 {
		t.Fatal("no change reported to the local cache")
	}

	d := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	for _, n := range []string{"alice", "nobody", "x", "x"} {
		u := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
		u.Name = n
		d.Users = append(d.Users, u)
	}
	dr := e.as(t, "User:admin", d, 0).(*kmsg.DescribeUserSCRAMCredentialsResponse)
	got := map[string]kmsg.DescribeUserSCRAMCredentialsResponseResult{}
	for _, r := range dr.Results {
		got[r.User] = r
	}
	if a := got["alice"]; a.ErrorCode != 0 || len(a.CredentialInfos) != 2 {
		t.Errorf("describe alice: %+v", a)
	}
	if n := got["nobody"]; n.ErrorCode != kerr.ResourceNotFound.Code {
		t.Errorf("describe nobody: %s", code(n.ErrorCode))
	}
	if x := got["x"]; x.ErrorCode != kerr.DuplicateResource.Code || len(dr.Results) != 3 {
		t.Errorf("describe x twice: %s (%d results)", code(x.ErrorCode), len(dr.Results))
	}
	all := e.as(t, "User:admin", kmsg.NewPtrDescribeUserSCRAMCredentialsRequest(), 0).(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if len(all.Results) != 1 || all.Results[0].User != "alice" {
		t.Errorf("describe all: %+v", all.Results)
	}
}

// TestScramCredentialAPIsNeedClusterRights: with the authorizer on, describing needs
// DESCRIBE and altering ALTER on the cluster; nothing is changed without it.
func TestScramCredentialAPIsNeedClusterRights(t *testing.T) {
	e, creds, _ := scramEnv(t, true)
	alter := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	alter.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{upsertion("bob", 1, 4096)}
	if r := e.as(t, alice, alter, 0).(*kmsg.AlterUserSCRAMCredentialsResponse); len(r.Results) != 1 || r.Results[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alter without ALTER: %+v", r.Results)
	}
	if len(creds.creds) != 0 {
		t.Fatal("credential stored without ALTER on the cluster")
	}
	if r := e.as(t, alice, kmsg.NewPtrDescribeUserSCRAMCredentialsRequest(), 0).(*kmsg.DescribeUserSCRAMCredentialsResponse); r.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("describe without DESCRIBE: %s", code(r.ErrorCode))
	}
	e.acls.add(grant(kafkaacl.ResourceCluster, kafkaacl.ClusterName, alice, kafkaacl.OpAlter))
	e.h.InvalidateAcls()
	if r := e.as(t, alice, alter, 0).(*kmsg.AlterUserSCRAMCredentialsResponse); r.Results[0].ErrorCode != 0 {
		t.Fatalf("alter with ALTER: %s", code(r.Results[0].ErrorCode))
	}
	// ALTER implies DESCRIBE.
	if r := e.as(t, alice, kmsg.NewPtrDescribeUserSCRAMCredentialsRequest(), 0).(*kmsg.DescribeUserSCRAMCredentialsResponse); r.ErrorCode != 0 || len(r.Results) != 1 {
		t.Fatalf("describe with ALTER: %s %+v", code(r.ErrorCode), r.Results)
	}
}
