package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
)

// mqttUsersCLI runs `coordinator mqtt-users ARGS` against the stack's coordinator,
// with stdin as its standard input, and returns its output.
func mqttUsersCLI(t *testing.T, s *stack.Stack, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.Bin(stack.Coordinator), append([]string{"mqtt-users", "--addr", s.CoordinatorAddr}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coordinator mqtt-users %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// untilConnack CONNECTs as user with password until the CONNACK code is want, and
// returns how many CONNECTs that took; the change it waits for is announced on NATS,
// which reaches the bridge a moment after the admin call returned.
func untilConnack(t *testing.T, addr, user, password string, want byte) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := 1; ; n++ {
		c, code := mqttLogin(t, addr, fmt.Sprintf("c-%s-%d", user, n), user, password)
		if c != nil {
			_ = c.Disconnect(&paho.Disconnect{})
		}
		if code == want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("CONNECT %s/%s: CONNACK %#x after %d tries, want %#x", user, password, code, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMQTTListenerCoordinatorLogins: users kept by the coordinator, created through
// its admin API while the bridge runs (the coordinator mqtt-users CLI and the gRPC
// MqttUserService), log in to a listener with coordinator-logins: alice (password
// hashed argon2id by the coordinator, rules dev/%u/#), carol (an argon2id hash from
// the argon2 reference CLI, put as is), dave (bcrypt). A wrong password and an
// unknown user get CONNACK 0x86 (MQTT 3.1.1 mosquitto_pub: 4); alice's publish to
// dev/bob/x gets PUBACK 0x87 and only her dev/alice/x reaches Kafka. Her password
// changed through the CLI applies to her next CONNECT, and her deletion too.
func TestMQTTListenerCoordinatorLogins(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic := "mqtt-clogin-" + mqttID()
	lis := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-clogins", fmt.Sprintf(`
id: clogins
listener:
  addr: %s
  coordinator-logins: true
mqtt-to-kafka:
  - id: dev
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %s
`, lis, topic))

	// No user yet: refused; the absence is cached, and dropped by the put's notice.
	if _, code := mqttLogin(t, lis, "c-alice-0", "alice", "alice-pw"); code != 0x86 {
		t.Fatalf("alice before she exists: CONNACK %#x, want 0x86", code)
	}
	out := mqttUsersCLI(t, s, "alice-pw\n", "put", "alice", "--password-stdin", "--publish", "dev/%u/#", "--subscribe", "dev/%u/#")
	if !strings.Contains(out, `"scheme":"argon2id"`) || strings.Contains(out, "alice-pw") {
		t.Fatalf("put alice: %s", out)
	}
	cc, err := grpc.NewClient(s.CoordinatorAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	admin := coordinatorv1.NewMqttUserServiceClient(cc)
	ctx := ctxT(t, time.Minute)
	for _, req := range []*coordinatorv1.PutMqttUserRequest{
		{Username: "carol", Credential: &coordinatorv1.PutMqttUserRequest_PasswordHash{PasswordHash: argon2idHunter2}},
		{Username: "dave", Scheme: "bcrypt", Credential: &coordinatorv1.PutMqttUserRequest_Password{Password: "dave-pw"}},
	} {
		if _, err := admin.PutMqttUser(ctx, req); err != nil {
			t.Fatalf("put %s: %v", req.GetUsername(), err)
		}
	}
	g, err := admin.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: "alice"})
	if err != nil || !strings.HasPrefix(g.GetUser().GetPasswordHash(), "$argon2id$v=19$") {
		t.Fatalf("alice as stored: %v %v", g, err)
	}
	t.Logf("alice logged in after %d CONNECTs", untilConnack(t, lis, "alice", "alice-pw", 0))

	for _, c := range []struct {
		user, password string
		want           byte
	}{
		{"alice", "wrong", 0x86},
		{"mallory", "alice-pw", 0x86},
		{"carol", "hunter3", 0x86},
		{"carol", "hunter2", 0},
		{"dave", "dave-pw", 0},
		{"dave", "alice-pw", 0x86},
	} {
		if _, code := mqttLogin(t, lis, "c-"+c.user, c.user, c.password); code != c.want {
			t.Errorf("CONNECT %q/%q: CONNACK %#x, want %#x", c.user, c.password, code, c.want)
		}
	}
	for _, u := range [][2]string{{"alice", "wrong"}, {"mallory", "x"}} {
		out, err := mosq(t, "mosquitto_pub", lis, "-V", "mqttv311", "-d", "-u", u[0], "-P", u[1], "-t", "dev/alice/x", "-m", "m")
		if err == nil || !strings.Contains(out, "received CONNACK (4)") {
			t.Errorf("MQTT 3.1.1 %s/%s: %v\n%s", u[0], u[1], err, out)
		}
	}

	alice, code := mqttLogin(t, lis, "c-alice", "alice", "alice-pw")
	if code != 0 {
		t.Fatalf("alice: CONNACK %#x", code)
	}
	pub := func(tp string) byte {
		resp, err := alice.Publish(ctx, &paho.Publish{QoS: 1, Topic: tp, Payload: []byte(tp)})
		if resp == nil {
			t.Fatalf("publish %s: %v", tp, err)
		}
		return resp.ReasonCode
	}
	if rc := pub("dev/bob/x"); rc != 0x87 {
		t.Errorf("alice's publish to dev/bob/x: PUBACK %#x, want 0x87", rc)
	}
	if rc := pub("dev/alice/x"); rc != 0 {
		t.Errorf("alice's publish to dev/alice/x: PUBACK %#x, want 0", rc)
	}
	sa, err := alice.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/bob/#", QoS: 1}, {Topic: "dev/alice/#", QoS: 1}}})
	if sa == nil {
		t.Fatalf("subscribe: %v", err)
	}
	if len(sa.Reasons) != 2 || sa.Reasons[0] != 0x87 || sa.Reasons[1] != 1 {
		t.Errorf("SUBACK %v, want [0x87 1]", sa.Reasons)
	}

	// A password changed through the CLI while the bridge runs applies to her next
	// CONNECT; the put names no rules, so hers are kept (a password change must not
	// open every topic to her).
	out = mqttUsersCLI(t, s, "alice-pw-2\n", "put", "alice", "--password-stdin")
	if !strings.Contains(out, `"publish":["dev/%u/#"]`) || !strings.Contains(out, `"subscribe":["dev/%u/#"]`) {
		t.Errorf("password change without rules dropped alice's rules: %s", out)
	}
	t.Logf("old password refused at CONNECT %d after the change", untilConnack(t, lis, "alice", "alice-pw", 0x86))
	alice2, code := mqttLogin(t, lis, "c-alice-new", "alice", "alice-pw-2")
	if code != 0 {
		t.Fatalf("alice's new password: CONNACK %#x, want 0", code)
	}
	if resp, err := alice2.Publish(ctx, &paho.Publish{QoS: 1, Topic: "dev/bob/y", Payload: []byte("dev/bob/y")}); resp == nil || resp.ReasonCode != 0x87 {
		t.Errorf("alice's publish to dev/bob/y after the password change: %+v %v, want PUBACK 0x87", resp, err)
	}
	_ = alice2.Disconnect(&paho.Disconnect{})
	// --scheme hashes a new password: alone it is refused, not silently ignored.
	bad := exec.Command(s.Bin(stack.Coordinator), "mqtt-users", "--addr", s.CoordinatorAddr, "put", "alice", "--scheme", "bcrypt")
	if b, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(b), "--scheme") {
		t.Errorf("put --scheme without a password: %v\n%s", err, b)
	}
	mqttUsersCLI(t, s, "", "delete", "dave")
	t.Logf("deleted dave refused at CONNECT %d after the deletion", untilConnack(t, lis, "dave", "dave-pw", 0x86))
	if list := mqttUsersCLI(t, s, "", "list"); strings.Count(list, "\n") != 2 || strings.Contains(list, "$argon2id") {
		t.Errorf("list after deleting dave:\n%s", list)
	}

	recs := consumeAll(t, s.KafkaAddrs, topic)
	if len(recs) != 1 || string(recs[0].Value) != "dev/alice/x" {
		var vs []string
		for _, r := range recs {
			vs = append(vs, string(r.Value))
		}
		t.Errorf("stored %q, want only dev/alice/x", vs)
	}
}
