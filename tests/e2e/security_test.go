package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// secureStack starts a stack secured as `make up SECURE=1` secures it, with the
// certificates and tokens scripts/dev/certs.sh (make certs) writes: every service
// serves and dials its gRPC peers with mTLS, storage-core and the coordinator require
// a certificate or a token and authorize, pubsub-gateway serves TLS, kafka-gateway
// serves SASL_SSL beside PLAINTEXT with the users file. It returns the stack and the
// certificates directory.
func secureStack(t *testing.T) (*stack.Stack, string) {
	t.Helper()
	testenv.Require(t)
	testenv.RequireBinary(t, "openssl")
	certs := t.TempDir()
	cmd := exec.Command("../../scripts/dev/certs.sh")
	cmd.Env = append(os.Environ(), "TRIBUTARY_CERTS_DIR="+certs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, out)
	}
	f := func(name string) string { return filepath.Join(certs, name) }
	server := func(svc string) []string {
		return []string{"--tls-cert=" + f(svc+".pem"), "--tls-key=" + f(svc+"-key.pem"), "--tls-client-ca=" + f("ca.pem")}
	}
	client := func(svc string) []string {
		return []string{"--tls-client-cert=" + f(svc+".pem"), "--tls-client-key=" + f(svc+"-key.pem"),
			"--storage-tls-ca=" + f("ca.pem")}
	}
	auth := []string{"--auth=required", "--auth-credentials-file=" + f("credentials")}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	s, err := stack.Start(context.Background(), stack.Options{
		PubSubGateways:   1,
		StorageFlags:     cat(server("storage-core"), auth),
		CoordinatorFlags: cat(server("coordinator"), auth, client("coordinator")),
		Listeners:        []string{"SASL_SSL"},
		GatewayFlags: cat(client("kafka-gateway"), []string{"--coordinator-tls-ca=" + f("ca.pem"),
			"--tls-cert=" + f("kafka-gateway.pem"), "--tls-key=" + f("kafka-gateway-key.pem"), "--sasl-users-file=" + f("kafka-users")}),
		PubSubFlags: cat(server("pubsub-gateway"), client("pubsub-gateway"), []string{"--coordinator-tls-ca=" + f("ca.pem")}),
	})
	if err != nil {
		t.Fatalf("start secured stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("secured stack logs:\n%s", s.LogTails(40))
		}
		_ = s.Close()
	})
	return s, certs
}

func grpcurlBin(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../bin/tools/grpcurl")
	if err != nil {
		t.Fatal(err)
	}
	return testenv.RequireBinary(t, p) // make tools builds it; .ci/run does before make test
}

// grpcurl runs grpcurl with args and returns its combined output and whether it
// succeeded.
func grpcurl(t *testing.T, bin string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-max-time", "20"}, args...)...).CombinedOutput()
	return string(out), err == nil
}

// The issue's must-show for storage-core, with grpcurl against a secured stack, and a
// Kafka produce/consume and a Pub/Sub publish/pull through gateways that reach their
// backends only over mTLS.
func TestSecureStack(t *testing.T) {
	s, certs := secureStack(t)
	bin := grpcurlBin(t)
	f := func(name string) string { return filepath.Join(certs, name) }
	token := func(name string) string {
		b, err := os.ReadFile(f(name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	// Kafka through the gateway, whose calls to storage-core and the coordinator all
	// go over mTLS with its certificate.
	topic := topicName("secure")
	cl := newClient(t, s.KafkaAddrs, kgo.AllowAutoTopicCreation())
	ctx := ctxT(t, 60*time.Second)
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))}).FirstErr(); err != nil {
			t.Fatalf("produce over the secured stack: %v", err)
		}
	}
	if recs := consumeAll(t, s.KafkaAddrs, topic); len(recs) != 5 || string(recs[4].Value) != "v4" {
		t.Fatalf("consumed %d records, want the 5 produced", len(recs))
	}

	// The same over SASL_SSL with SCRAM-SHA-512 as the user certs.sh wrote.
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(f("ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.pem: %v", err)
	}
	scramAdmin := scram.Auth{User: "admin", Pass: token("kafka-admin.password")}.AsSha512Mechanism()
	sasls := []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: pool}), kgo.SASL(scramAdmin)}
	sslTopic := topicName("secure-sasl")
	scl := newClient(t, s.ListenerAddrs["SASL_SSL"], append([]kgo.Opt{kgo.AllowAutoTopicCreation()}, sasls...)...)
	if err := scl.ProduceSync(ctx, &kgo.Record{Topic: sslTopic, Value: []byte("over sasl_ssl")}).FirstErr(); err != nil {
		t.Fatalf("produce over SASL_SSL: %v", err)
	}
	ccl := newClient(t, s.ListenerAddrs["SASL_SSL"], append([]kgo.Opt{kgo.ConsumeTopics(sslTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, sasls...)...)
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		fs := ccl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
			t.Fatalf("consume over SASL_SSL: %v", errs)
		}
		got = append(got, fs.Records()...)
	}
	if len(got) != 1 || string(got[0].Value) != "over sasl_ssl" {
		t.Fatalf("consumed %d records over SASL_SSL, want the one produced", len(got))
	}

	read := fmt.Sprintf(`{"channel": "kafka.%s", "from_sequence": 1}`, topic)
	reader := "authorization: Bearer " + token("reader.token")
	tlsArgs := []string{"-cacert", f("ca.pem")}
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
		want string // in the output
	}{
		{"plaintext, nothing", []string{"-plaintext", s.StorageAddr, "list"}, false, "Unauthenticated"},
		{"plaintext Read", []string{"-plaintext", "-d", read, s.StorageAddr, "tributary.storage.v1.StorageService/Read"}, false, "Unauthenticated"},
		{"TLS without certificate or token", append(tlsArgs, "-d", read, s.StorageAddr, "tributary.storage.v1.StorageService/Read"), false, "Unauthenticated"},
		{"unknown token", append(tlsArgs, "-H", "authorization: Bearer nope", "-d", read, s.StorageAddr, "tributary.storage.v1.StorageService/Read"), false, "Unauthenticated"},
		{"read-only token Read", append(tlsArgs, "-H", reader, "-d", read, s.StorageAddr, "tributary.storage.v1.StorageService/Read"), true, "djQ="}, // v4
		{"read-only token Append", append(tlsArgs, "-H", reader, "-d", fmt.Sprintf(`{"channel": "kafka.%s", "records": [{"value": "eA=="}]}`, topic),
			s.StorageAddr, "tributary.storage.v1.StorageService/Append"), false, "PermissionDenied"},
		{"read-only token DeleteChannel", append(tlsArgs, "-H", reader, "-d", fmt.Sprintf(`{"name": "kafka.%s"}`, topic),
			s.StorageAddr, "tributary.storage.v1.StorageService/DeleteChannel"), false, "PermissionDenied"},
		{"read-only token on the coordinator", append(tlsArgs, "-H", reader, "-d", `{}`,
			s.CoordinatorAddr, "tributary.coordinator.v1.CoordinatorService/GetTopics"), false, "PermissionDenied"},
		{"admin token on the coordinator", append(tlsArgs, "-H", "authorization: Bearer "+token("admin.token"), "-d", `{"all": true}`,
			s.CoordinatorAddr, "tributary.coordinator.v1.CoordinatorService/GetTopics"), true, topic},
		{"admin certificate Append", append(tlsArgs, "-cert", f("admin.pem"), "-key", f("admin-key.pem"),
			"-d", fmt.Sprintf(`{"channel": "kafka.%s", "records": [{"value": "eA=="}]}`, topic),
			s.StorageAddr, "tributary.storage.v1.StorageService/Append"), true, "firstSequence"},
		{"admin certificate, reserved channel", append(tlsArgs, "-cert", f("admin.pem"), "-key", f("admin-key.pem"),
			"-d", `{"channel": "_TRIBUTARY_x", "from_sequence": 1}`, s.StorageAddr, "tributary.storage.v1.StorageService/Read"), false, "PermissionDenied"},
	} {
		out, ok := grpcurl(t, bin, tc.args...)
		if ok != tc.ok || !strings.Contains(out, tc.want) {
			t.Errorf("%s: succeeded=%v, want %v with %q in:\n%s", tc.name, ok, tc.ok, tc.want, out)
		}
	}
	// What was refused was not done: the 5 records and the admin's one are all there.
	if recs := consumeAll(t, s.KafkaAddrs, topic); len(recs) != 6 {
		t.Errorf("after the refused calls: %d records, want 6", len(recs))
	}

	// A certificate from another CA, named as a service, is refused at the handshake.
	other := tlsxtest.NewCA(t)
	oc, ok := other.Issue(t, "gw", "kafka-gateway")
	out, succeeded := grpcurl(t, bin, append(tlsArgs, "-cert", oc, "-key", ok, "-d", read, s.StorageAddr, "tributary.storage.v1.StorageService/Read")...)
	if succeeded || strings.Contains(out, "djQ=") {
		t.Errorf("certificate of another CA: succeeded=%v:\n%s", succeeded, out)
	}

	// Pub/Sub over TLS on the gateway's port, with credentials as a client outside the
	// emulator sends them (an OAuth token, not checked in emulator mode).
	// An emulator client (plaintext) gets no answer from the TLS port.
	_, plainSub := rawPubSub(t, s.PubSubAddrs[0])
	shortCtx, cancelShort := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = plainSub.GetSubscription(shortCtx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/" + psProject + "/subscriptions/none"})
	cancelShort()
	if err == nil || status.Code(err) == codes.NotFound {
		t.Errorf("plaintext Pub/Sub client on the TLS port: %v, want a transport failure", err)
	}
	t.Setenv("PUBSUB_EMULATOR_HOST", "")
	pctx := ctxT(t, 60*time.Second)
	pc, err := pubsub.NewClient(pctx, psProject,
		option.WithEndpoint(s.PubSubAddrs[0]),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"}))),
		option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "any-token"})),
		option.WithTelemetryDisabled())
	if err != nil {
		t.Fatalf("pubsub client over TLS: %v", err)
	}
	defer pc.Close()
	ptopic := "projects/" + psProject + "/topics/" + topicName("secure")
	psub := "projects/" + psProject + "/subscriptions/" + topicName("secure-sub")
	if _, err := pc.TopicAdminClient.CreateTopic(pctx, &pubsubpb.Topic{Name: ptopic}); err != nil {
		t.Fatalf("CreateTopic over TLS: %v", err)
	}
	if _, err := pc.SubscriptionAdminClient.CreateSubscription(pctx, &pubsubpb.Subscription{Name: psub, Topic: ptopic}); err != nil {
		t.Fatalf("CreateSubscription over TLS: %v", err)
	}
	if _, err := pc.Publisher(ptopic).Publish(pctx, &pubsub.Message{Data: []byte("over tls")}).Get(pctx); err != nil {
		t.Fatalf("Publish over TLS: %v", err)
	}
	resp, err := pc.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: psub, MaxMessages: 10})
	if err != nil || len(resp.ReceivedMessages) != 1 || string(resp.ReceivedMessages[0].Message.Data) != "over tls" {
		t.Fatalf("Pull over TLS: %v %v, want the one message", resp, err)
	}

	// MQTT listener logins on the secured coordinator: the admin API needs admin
	// (a read-only token is refused the put and the hash), the CLI dials it over TLS
	// with the admin token.
	for m, body := range map[string]string{"PutMqttUser": `{"username": "eve", "password": "eve-pw"}`, "GetMqttUser": `{"username": "eve"}`} {
		out, ok := grpcurl(t, bin, append(tlsArgs, "-H", reader, "-d", body, s.CoordinatorAddr, "tributary.coordinator.v1.MqttUserService/"+m)...)
		if ok || !strings.Contains(out, "PermissionDenied") {
			t.Errorf("read-only token %s: succeeded=%v, want PermissionDenied in:\n%s", m, ok, out)
		}
	}
	cli := exec.Command(s.Bin(stack.Coordinator), "mqtt-users", "--addr", s.CoordinatorAddr, "--coordinator-tls-ca", f("ca.pem"),
		"--token-file", f("admin.token"), "put", "eve", "--password-stdin", "--publish", "dev/#")
	cli.Stdin = strings.NewReader("eve-pw\n")
	if out, err := cli.CombinedOutput(); err != nil || !strings.Contains(string(out), `"username":"eve"`) {
		t.Fatalf("coordinator mqtt-users put eve with the admin token: %v\n%s", err, out)
	}

	// mqtt-bridge presents its certificate to both backends: eve, kept by the
	// coordinator, logs in; her QoS 1 publish on its listener is acknowledged once
	// stored, and reaches Kafka.
	lis := stack.FreeAddr()
	mtopic := topicName("secure-mqtt")
	startBridge(t, s, "mqtt-bridge-secure", fmt.Sprintf(`
id: secure
listener:
  addr: %[1]s
  coordinator-logins: true
storage-tls: {ca-file: %[2]s, cert-file: %[3]s, key-file: %[4]s}
coordinator-tls: {ca-file: %[2]s, cert-file: %[3]s, key-file: %[4]s}
mqtt-to-kafka:
  - id: devices
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %[5]s
`, lis, f("ca.pem"), f("mqtt-bridge.pem"), f("mqtt-bridge-key.pem"), mtopic))
	if _, code := mqttLogin(t, lis, "secure-mallory", "eve", "wrong"); code != 0x86 {
		t.Errorf("eve with a wrong password: CONNACK %#x, want 0x86", code)
	}
	mc, code := mqttLogin(t, lis, "secure-dev", "eve", "eve-pw")
	if code != 0 {
		t.Fatalf("eve on the secured bridge: CONNACK %#x", code)
	}
	pr, err := mc.Publish(ctx, &paho.Publish{Topic: "dev/1", QoS: 1, Payload: []byte("from mqtt")})
	if err != nil || pr.ReasonCode != 0 {
		t.Fatalf("QoS 1 publish through the secured bridge: %v %+v", err, pr)
	}
	if recs := consumeAll(t, s.KafkaAddrs, mtopic); len(recs) != 1 || string(recs[0].Value) != "from mqtt" {
		t.Fatalf("Kafka topic %s after the MQTT publish: %d records", mtopic, len(recs))
	}
}
