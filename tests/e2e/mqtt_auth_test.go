package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"golang.org/x/crypto/bcrypt"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// mqttLogin connects an MQTT 5 paho client with a user name (when not "") and
// password and returns the client (nil when refused) and the CONNACK reason code.
func mqttLogin(t *testing.T, addr, clientID, user, password string) (*paho.Client, byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: clientID})
	cp := &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}
	if user != "" {
		cp.Username, cp.UsernameFlag = user, true
		cp.Password, cp.PasswordFlag = []byte(password), true
	}
	ca, err := c.Connect(ctxT(t, 10*time.Second), cp)
	if ca == nil {
		t.Fatalf("CONNECT %s/%s: no CONNACK: %v", clientID, user, err)
	}
	if ca.ReasonCode != 0 {
		_ = conn.Close()
		return nil, ca.ReasonCode
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, 0
}

// argon2idHunter2 is password "hunter2" hashed by the argon2 reference CLI (Debian's
// argon2 package), not by our code: echo -n hunter2 | argon2 somesalt1234 -id -t 2 -m 12 -p 2 -l 32 -e
const argon2idHunter2 = "$argon2id$v=19$m=4096,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0"

func bcryptHash(t *testing.T, password string) string {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// TestMQTTListenerLogins: a listener with a users: entry (alice, bcrypt hash, rules
// dev/%u/# for publish and subscribe) and password-file users (bob, bcrypt, and carol,
// argon2id, every topic).
// A wrong password, an unknown user: CONNACK 0x86 (MQTT 3.1.1 mosquitto_pub: 0x04 "bad
// user name or password"); no user name: 0x87; the right ones: 0x00. alice's publish
// to dev/bob/x: PUBACK 0x87 and nothing in Kafka; to dev/alice/x: 0x00 and stored;
// her SUBSCRIBE to dev/bob/# gets 0x87, to dev/alice/# QoS 1. bob's password changed
// in the file while the bridge runs applies to the next CONNECT.
func TestMQTTListenerLogins(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic := "mqtt-auth-" + mqttID()
	lis := stack.FreeAddr()
	pwFile := filepath.Join(t.TempDir(), "passwords")
	if err := os.WriteFile(pwFile, []byte("# listener users\nbob:"+bcryptHash(t, "bob-pw")+"\ncarol:"+argon2idHunter2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startBridge(t, s, "mqtt-bridge-auth", fmt.Sprintf(`
id: auth
listener:
  addr: %s
  password-file: %s
  users:
    - username: alice
      password-hash: "%s"
      publish: ["dev/%%u/#"]
      subscribe: ["dev/%%u/#"]
mqtt-to-kafka:
  - id: dev
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %s
`, lis, pwFile, bcryptHash(t, "alice-pw"), topic))

	for _, c := range []struct {
		user, password string
		want           byte
	}{
		{"alice", "wrong", 0x86},
		{"mallory", "alice-pw", 0x86},
		{"bob", "alice-pw", 0x86},
		{"", "", 0x87},
		{"bob", "bob-pw", 0},
		{"carol", "hunter3", 0x86},
		{"carol", "hunter2", 0},
	} {
		if _, code := mqttLogin(t, lis, "c-"+c.user, c.user, c.password); code != c.want {
			t.Errorf("CONNECT %q/%q: CONNACK %#x, want %#x", c.user, c.password, code, c.want)
		}
	}
	out, err := mosq(t, "mosquitto_pub", lis, "-V", "mqttv311", "-d", "-u", "alice", "-P", "wrong", "-t", "dev/alice/x", "-m", "m")
	if err == nil || !strings.Contains(out, "received CONNACK (4)") {
		t.Errorf("MQTT 3.1.1 wrong password: %v\n%s", err, out)
	}

	alice, code := mqttLogin(t, lis, "c-alice", "alice", "alice-pw")
	if code != 0 {
		t.Fatalf("alice: CONNACK %#x", code)
	}
	ctx := ctxT(t, time.Minute)
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
	// bob's password changed in the file while the bridge runs: the next CONNECT
	// is held to the new one.
	tmp := pwFile + ".new"
	if err := os.WriteFile(tmp, []byte("bob:"+bcryptHash(t, "bob-pw-2")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, pwFile); err != nil {
		t.Fatal(err)
	}
	if _, code := mqttLogin(t, lis, "c-bob2", "bob", "bob-pw"); code != 0x86 {
		t.Errorf("bob's old password after the change: CONNACK %#x, want 0x86", code)
	}
	if _, code := mqttLogin(t, lis, "c-bob3", "bob", "bob-pw-2"); code != 0 {
		t.Errorf("bob's new password: CONNACK %#x, want 0", code)
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
