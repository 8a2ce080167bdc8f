package bridge

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// fakeMqttUsers is a coordinator MqttUserService holding users, counting lookups;
// down makes it answer UNAVAILABLE.
type fakeMqttUsers struct {
	coordinatorv1.UnimplementedMqttUserServiceServer
	mu    sync.Mutex
	users map[string]*coordinatorv1.MqttUser
	calls map[string]int
	down  bool
}

func (f *fakeMqttUsers) GetMqttUser(_ context.Context, req *coordinatorv1.GetMqttUserRequest) (*coordinatorv1.GetMqttUserResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[req.GetUsername()]++
	if f.down {
		return nil, status.Error(codes.Unavailable, "postgres down")
	}
	u, ok := f.users[req.GetUsername()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such user")
	}
	return &coordinatorv1.GetMqttUserResponse{User: u}, nil
}

// login connects an MQTT 5 client as user/password and returns the CONNACK code
// (and the client, when accepted).
func loginCode(t *testing.T, addr, id, user, password string) (*paho.Client, byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: id})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
		Username: user, UsernameFlag: true, Password: []byte(password), PasswordFlag: true})
	if ca == nil {
		t.Fatalf("CONNECT %s: no CONNACK: %v", user, err)
	}
	if ca.ReasonCode != 0 {
		_ = conn.Close()
		return nil, ca.ReasonCode
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() })
	return c, 0
}

// Coordinator logins: a user the coordinator keeps logs in with its password
// (argon2id) and is held to its rules; a wrong password and an unknown user get
// 0x86; a found user and an absence are each looked up once while cached; a users:
// entry wins over the coordinator; a coordinator that cannot answer gets 0x88
// (MQTT 3.1.1: 0x03).
func TestListenerCoordinatorLogins(t *testing.T) {
	users := &fakeMqttUsers{calls: map[string]int{}, users: map[string]*coordinatorv1.MqttUser{
		// "hunter2", written by the argon2 reference CLI.
		"alice": {Username: "alice", PasswordHash: "$argon2id$v=19$m=4096,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0",
			Publish: &coordinatorv1.MqttTopicRules{Filters: []string{"dev/%u/#"}}},
		"bob": {Username: "bob", PasswordHash: "$argon2id$v=19$m=4096,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0"},
	}}
	_, addr := startBackend(t, func(s *grpc.Server) { coordinatorv1.RegisterMqttUserServiceServer(s, users) })
	b := startBridgeYAML(t, addr, `
store-timeout: 500ms
http-addr: 127.0.0.1:0
nats-url: nats://127.0.0.1:1
listener:
  addr: 127.0.0.1:0
  coordinator-logins: true
  users:
    - username: bob
      password-hash: "$2a$04$2qKgcNISP4odHzh7tkiWu.DZp/8/a4l7YwMaJFA72KXf1V6okKG9G"
mqtt-to-kafka:
  - id: dev
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: devices
`)
	lis := b.ListenerAddr()
	for _, c := range []struct {
		user, password string
		want           byte
	}{
		{"alice", "hunter3", 0x86},
		{"mallory", "hunter2", 0x86},
		{"mallory", "hunter2", 0x86},
		{"bob", "hunter2", 0x86}, // the users: entry (password "x") wins
		{"bob", "x", 0},
	} {
		if _, code := loginCode(t, lis, "c-"+c.user, c.user, c.password); code != c.want {
			t.Errorf("CONNECT %s/%s: CONNACK %#x, want %#x", c.user, c.password, code, c.want)
		}
	}
	alice, code := loginCode(t, lis, "c-alice", "alice", "hunter2")
	if code != 0 {
		t.Fatalf("alice: CONNACK %#x", code)
	}
	if rc, err := publish(alice, "dev/bob/x", "m"); err != nil || rc != 0x87 {
		t.Errorf("alice's publish outside her rules: %#x %v, want 0x87", rc, err)
	}
	if rc, err := publish(alice, "dev/alice/x", "m"); err != nil || rc != 0 {
		t.Errorf("alice's publish within her rules: %#x %v, want 0", rc, err)
	}
	users.mu.Lock()
	if users.calls["alice"] != 1 || users.calls["mallory"] != 1 || users.calls["bob"] != 0 {
		t.Errorf("lookups %v: want alice and mallory once (cached), bob never (a users: entry)", users.calls)
	}
	users.down = true
	users.mu.Unlock()
	if _, code := loginCode(t, lis, "c-carol", "carol", "x"); code != 0x88 {
		t.Errorf("coordinator down: CONNACK %#x, want 0x88", code)
	}
	out := v311Connect(t, lis, "carol", "x")
	if out != 0x03 {
		t.Errorf("coordinator down, MQTT 3.1.1: CONNACK %#x, want 0x03", out)
	}
	// A cached user still logs in while the coordinator is away.
	if _, code := loginCode(t, lis, "c-alice-2", "alice", "hunter2"); code != 0 {
		t.Errorf("alice (cached) with the coordinator down: CONNACK %#x", code)
	}
	b.listener.logins.cache.Invalidate("alice")
	if _, code := loginCode(t, lis, "c-alice-3", "alice", "hunter2"); code != 0x88 {
		t.Errorf("alice after her entry was dropped, coordinator down: CONNACK %#x, want 0x88", code)
	}
}

// v311Connect sends an MQTT 3.1.1 CONNECT with user and password and returns the
// CONNACK's return code.
func v311Connect(t *testing.T, addr, user, password string) byte {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0xc2, 0, 60}, str("v3-"+user)...)
	body = append(append(body, str(user)...), str(password)...)
	if _, err := conn.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
		t.Fatal(err)
	}
	typ, rest := readPacket(t, conn)
	if typ != 0x20 || len(rest) < 2 {
		t.Fatalf("CONNACK: %#x %v", typ, rest)
	}
	return rest[1]
}
