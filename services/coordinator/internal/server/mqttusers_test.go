package server

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/natsx"
	"github.com/tributary/tributary/libs/passhash"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/mqttusers"
)

// TestMqttUsers: a user put with a password is kept as an argon2id hash (bcrypt on
// request) that verifies that password; rules absent (every topic) and empty (none)
// stay apart; a put without a password keeps the hash; List shows no hash; bad
// input is INVALID_ARGUMENT; a deleted user is NOT_FOUND; each change is announced
// on NATS with the user name.
func TestMqttUsers(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := coordinatorv1.NewMqttUserServiceClient(cc)
	ctx := ctxT(t)
	sub, err := e.nc.SubscribeSync(natsx.MqttUsersChangedSubject(e.cfg.ClusterID))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	notice := func(want string) {
		t.Helper()
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil || string(msg.Data) != want {
			t.Fatalf("change notice: %v %v, want %q", msg, err, want)
		}
	}
	hashOf := func(user string) *passhash.Hash {
		t.Helper()
		g, err := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: user})
		if err != nil {
			t.Fatalf("get %s: %v", user, err)
		}
		h, err := passhash.Parse(g.GetUser().GetPasswordHash())
		if err != nil {
			t.Fatalf("stored hash of %s: %v", user, err)
		}
		return h
	}

	put, err := c.PutMqttUser(ctx, &coordinatorv1.PutMqttUserRequest{Username: "alice",
		Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "alice-pw"},
		Publish:    &coordinatorv1.MqttTopicRules{Filters: []string{"dev/%u/#"}},
		Subscribe:  &coordinatorv1.MqttTopicRules{}})
	if err != nil || !put.GetCreated() || put.GetUser().GetPasswordHash() != "" || put.GetUser().GetScheme() != "argon2id" {
		t.Fatalf("put alice: %v %v", put, err)
	}
	notice("alice")
	h := hashOf("alice")
	if h.Scheme() != passhash.Argon2id || !h.Verify([]byte("alice-pw")) || h.Verify([]byte("alice-pw2")) {
		t.Fatalf("alice's hash: %s, does not verify as it should", h.Scheme())
	}
	g, _ := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: "alice"})
	if strings.Contains(g.GetUser().GetPasswordHash(), "alice-pw") || g.GetUser().GetPublish().GetFilters()[0] != "dev/%u/#" ||
		g.GetUser().GetSubscribe() == nil || len(g.GetUser().GetSubscribe().GetFilters()) != 0 {
		t.Fatalf("get alice: %v", g)
	}
	if _, err := c.PutMqttUser(ctx, &coordinatorv1.PutMqttUserRequest{Username: "bob", Scheme: "bcrypt",
		Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "bob-pw"}}); err != nil {
		t.Fatal(err)
	}
	notice("bob")
	if h := hashOf("bob"); h.Scheme() != passhash.Bcrypt || !h.Verify([]byte("bob-pw")) {
		t.Fatalf("bob's hash: %s", h.Scheme())
	}
	// Rules only: the hash stays.
	before, _ := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: "alice"})
	put, err = c.PutMqttUser(ctx, &coordinatorv1.PutMqttUserRequest{Username: "alice"})
	if err != nil || put.GetCreated() || put.GetUser().GetPublish() != nil {
		t.Fatalf("put alice's rules: %v %v", put, err)
	}
	notice("alice")
	after, _ := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: "alice"})
	if after.GetUser().GetPasswordHash() != before.GetUser().GetPasswordHash() {
		t.Fatal("a put without a password changed the hash")
	}
	l, err := c.ListMqttUsers(ctx, &coordinatorv1.ListMqttUsersRequest{})
	if err != nil || len(l.GetUsers()) != 2 || l.GetUsers()[0].GetUsername() != "alice" || l.GetUsers()[1].GetScheme() != "bcrypt" {
		t.Fatalf("list: %v %v", l, err)
	}
	for _, u := range l.GetUsers() {
		if u.GetPasswordHash() != "" {
			t.Fatalf("list shows %s's hash", u.GetUsername())
		}
	}

	for name, req := range map[string]*coordinatorv1.PutMqttUserRequest{
		"new user without password": {Username: "carol"},
		"empty name":                {Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "x"}},
		"NUL in name":               {Username: "a\x00b", Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "x"}},
		"empty password":            {Username: "carol", Credential: &coordinatorv1.PutMqttUserRequest_Password{}},
		"long bcrypt password":      {Username: "carol", Scheme: "bcrypt", Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: strings.Repeat("x", 73)}},
		"unknown scheme":            {Username: "carol", Scheme: "md5", Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "x"}},
		"plain text as hash":        {Username: "carol", Credential: &coordinatorv1.PutMqttUserRequest_PasswordHash{PasswordHash: "hunter2"}},
		"hash past cost bounds": {Username: "carol", Credential: &coordinatorv1.PutMqttUserRequest_PasswordHash{
			PasswordHash: "$argon2id$v=19$m=4194304,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0"}},
		"bad filter": {Username: "carol", Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "x"},
			Publish: &coordinatorv1.MqttTopicRules{Filters: []string{"a/#/b"}}},
	} {
		if _, err := c.PutMqttUser(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	// A hash given as is is kept as is.
	const ref = "$argon2id$v=19$m=4096,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0"
	if _, err := c.PutMqttUser(ctx, &coordinatorv1.PutMqttUserRequest{Username: "carol", Credential: &coordinatorv1.PutMqttUserRequest_PasswordHash{PasswordHash: ref}}); err != nil {
		t.Fatal(err)
	}
	notice("carol")
	if g, _ := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: "carol"}); g.GetUser().GetPasswordHash() != ref {
		t.Fatalf("carol's hash %q", g.GetUser().GetPasswordHash())
	}

	if _, err := c.DeleteMqttUser(ctx, &coordinatorv1.DeleteMqttUserRequest{Username: "bob"}); err != nil {
		t.Fatal(err)
	}
	notice("bob")
	if _, err := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: "bob"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get deleted: %v, want NOT_FOUND", err)
	}
	if _, err := c.DeleteMqttUser(ctx, &coordinatorv1.DeleteMqttUserRequest{Username: "bob"}); status.Code(err) != codes.NotFound {
		t.Fatalf("delete again: %v, want NOT_FOUND", err)
	}

	// The CLI: a password from stdin, rules, list.
	var out bytes.Buffer
	if err := mqttusers.Main([]string{"--addr", r.srv.GRPCAddr(), "put", "dave", "--password-stdin", "--publish", "d/%u/#", "--subscribe="},
		strings.NewReader("dave-pw\n"), &out); err != nil {
		t.Fatalf("cli put: %v", err)
	}
	if h := hashOf("dave"); !h.Verify([]byte("dave-pw")) {
		t.Fatal("dave's hash does not verify the password given on stdin")
	}
	out.Reset()
	if err := mqttusers.Main([]string{"--addr", r.srv.GRPCAddr(), "list"}, nil, &out); err != nil {
		t.Fatalf("cli list: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.Contains(lines[2], `"username":"dave"`) ||
		!strings.Contains(lines[2], `"publish":["d/%u/#"]`) || !strings.Contains(lines[2], `"subscribe":[]`) || strings.Contains(out.String(), "$argon2id") {
		t.Fatalf("cli list:\n%s", out.String())
	}
	if err := mqttusers.Main([]string{"--addr", r.srv.GRPCAddr(), "delete", "nobody"}, nil, &out); status.Code(err) != codes.NotFound || strings.Contains(err.Error(), "rpc error") {
		t.Fatalf("cli delete of nobody: %v", err)
	}
	// A password change keeps the rules not given; --publish-any drops the publish rule.
	for _, c := range []struct {
		args      []string
		pub, subs string
	}{
		{[]string{"put", "dave", "--password-stdin"}, `"publish":["d/%u/#"]`, `"subscribe":[]`},
		{[]string{"put", "dave", "--publish-any"}, "", `"subscribe":[]`},
	} {
		out.Reset()
		if err := mqttusers.Main(append([]string{"--addr", r.srv.GRPCAddr()}, c.args...), strings.NewReader("dave-pw-2\n"), &out); err != nil {
			t.Fatalf("cli %v: %v", c.args, err)
		}
		if got := out.String(); !strings.Contains(got, c.subs) || (c.pub != "" && !strings.Contains(got, c.pub)) || (c.pub == "" && strings.Contains(got, `"publish"`)) {
			t.Fatalf("cli %v: %s", c.args, got)
		}
	}
	if h := hashOf("dave"); !h.Verify([]byte("dave-pw-2")) {
		t.Fatal("dave's changed password does not verify")
	}
	if err := mqttusers.Main([]string{"--addr", r.srv.GRPCAddr(), "put", "dave", "--scheme", "bcrypt"}, nil, &out); err == nil {
		t.Fatal("cli put --scheme without a password succeeded")
	}
}
