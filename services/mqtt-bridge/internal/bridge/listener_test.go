package bridge

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/grpcx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeBackend is storage-core and the coordinator in one gRPC server. Append blocks
// while gate is closed and fails with fail when set. With producers, InitProducerId
// hands out producer ids and Append recognises a batch sent again (same channel,
// producer, epoch, base sequence and count) as storage-core does: answered, not stored
// again; hold, when set, keeps the answer of an Append that stored its records back
// until it is closed (or the caller gives up).
type fakeBackend struct {
	storagev1.UnimplementedStorageServiceServer
	coordinatorv1.UnimplementedCoordinatorServiceServer

	mu        sync.Mutex
	records   map[string][]*storagev1.AppendRecord
	gate      chan struct{} // Append waits for it to be closed (nil = open)
	fail      error
	entered   chan struct{}
	producers bool
	nextPID   int64
	batches   map[string]bool // channel, producer id, epoch, base sequence, count
	dups      int
	hold      chan struct{}
}

func (f *fakeBackend) Append(ctx context.Context, req *storagev1.AppendRequest) (*storagev1.AppendResponse, error) {
	f.mu.Lock()
	gate, fail, entered := f.gate, f.fail, f.entered
	f.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	f.mu.Lock()
	if p := req.GetProducer(); p != nil && f.producers {
		k := fmt.Sprint(req.GetChannel(), p.GetProducerId(), p.GetProducerEpoch(), p.GetBaseSequence(), len(req.GetRecords()))
		if f.batches[k] {
			f.dups++
			f.mu.Unlock()
			return &storagev1.AppendResponse{Duplicate: true}, nil
		}
		f.batches[k] = true
	}
	f.records[req.GetChannel()] = append(f.records[req.GetChannel()], req.GetRecords()...)
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &storagev1.AppendResponse{}, nil
}

func (f *fakeBackend) InitProducerId(context.Context, *coordinatorv1.InitProducerIdRequest) (*coordinatorv1.InitProducerIdResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.producers {
		return nil, status.Error(codes.Unimplemented, "no producer ids")
	}
	f.nextPID++
	return &coordinatorv1.InitProducerIdResponse{ProducerId: f.nextPID}, nil
}

func (f *fakeBackend) GetTopics(_ context.Context, req *coordinatorv1.GetTopicsRequest) (*coordinatorv1.GetTopicsResponse, error) {
	var out []*coordinatorv1.Topic
	for _, n := range req.GetNames() {
		out = append(out, &coordinatorv1.Topic{Name: n, Partitions: 1})
	}
	return &coordinatorv1.GetTopicsResponse{Topics: out}, nil
}

func (f *fakeBackend) stored(ch string) []*storagev1.AppendRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*storagev1.AppendRecord(nil), f.records[ch]...)
}

// startBackend serves a fake storage-core and coordinator (and what register adds
// to the same server).
func startBackend(t *testing.T, register ...func(*grpc.Server)) (*fakeBackend, string) {
	t.Helper()
	f := &fakeBackend{records: map[string][]*storagev1.AppendRecord{}, batches: map[string]bool{}}
	srv := grpcx.NewServer(zap.NewNop())
	storagev1.RegisterStorageServiceServer(srv, f)
	coordinatorv1.RegisterCoordinatorServiceServer(srv, f)
	for _, r := range register {
		r(srv)
	}
	grpcx.RegisterStandard(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return f, ln.Addr().String()
}

func startListenerBridge(t *testing.T, backend string, queue int, extra ...string) *Bridge {
	t.Helper()
	src := `
store-timeout: 500ms
http-addr: 127.0.0.1:0
listener:
  addr: 127.0.0.1:0
  queue-size: ` + strconv.Itoa(queue) + `
mqtt-to-kafka:
  - id: dev
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: devices
    max-record-bytes: 64
    headers: [mqtt-clientid]
` + strings.Join(extra, "\n")
	return startBridgeYAML(t, backend, src)
}

// startBridgeYAML runs a bridge with config src, its backends at backend.
func startBridgeYAML(t *testing.T, backend, src string) *Bridge {
	t.Helper()
	cfg, ps := config.Load([]byte(src), func(k string) (string, bool) {
		switch k {
		case "TRIBUTARY_MQTT_STORAGE_ADDR", "TRIBUTARY_MQTT_COORDINATOR_ADDR":
			return backend, true
		}
		return "", false
	})
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return b
}

func connect(t *testing.T, addr, id string) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr) // bound by New, before Run
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: id})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() })
	return c
}

func publish(c *paho.Client, topic, payload string) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(payload)})
	if resp != nil {
		return resp.ReasonCode, nil
	}
	return 0, err
}

// The PUBACK of a mapped QoS 1 publish is held until storage-core's Append returned.
func TestListenerHoldsPubackUntilStored(t *testing.T) {
	f, addr := startBackend(t)
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate, f.entered = gate, make(chan struct{}, 10)
	f.mu.Unlock()
	b := startListenerBridge(t, addr, 8)
	c := connect(t, b.ListenerAddr(), "dev-1")
	res := make(chan byte, 1)
	go func() {
		rc, err := publish(c, "dev/1/temp", "21.5")
		if err != nil {
			t.Error(err)
		}
		res <- rc
	}()
	<-f.entered // the append is in progress: no PUBACK may have been sent
	select {
	case rc := <-res:
		t.Fatalf("PUBACK (%#x) before the append returned", rc)
	default:
	}
	close(gate)
	if rc := <-res; rc != 0 {
		t.Fatalf("PUBACK reason %#x, want 0", rc)
	}
	recs := f.stored("kafka.devices")
	if len(recs) != 1 || string(recs[0].GetValue()) != "21.5" || string(recs[0].GetKey()) != "dev/1/temp" ||
		len(recs[0].GetHeaders()) != 1 || string(recs[0].GetHeaders()[0].GetValue()) != "dev-1" {
		t.Fatalf("stored %v", recs)
	}
	// Not mapped: an ordinary broker publish, acknowledged, nothing stored.
	if rc, err := publish(c, "other/x", "y"); err != nil || rc != 0 {
		t.Fatalf("unmapped publish: %#x %v", rc, err)
	}
	if n := len(f.stored("kafka.devices")); n != 1 {
		t.Fatalf("unmapped publish stored: %d records", n)
	}
}

// countPublish counts the passes of the library's OnPublish hooks that reach it (the
// listener's, first, lets a message through only when it is answered).
type countPublish struct {
	mqtt.HookBase
	n atomic.Int32
}

func (h *countPublish) ID() string           { return "count-publish" }
func (h *countPublish) Provides(b byte) bool { return b == mqtt.OnPublish }
func (h *countPublish) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	h.n.Add(1)
	return pk, nil
}

// A stored QoS 1 publish that no one subscribes to is acknowledged by the client's
// flow (PUBACK 0x00, after the append), not handed back to the library for a second
// pass of its hooks; one that a subscriber gets still is, and is delivered.
func TestListenerStoredPublishAnsweredByFlow(t *testing.T) {
	f, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	h := &countPublish{}
	if err := b.listener.srv.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	c := connect(t, b.ListenerAddr(), "dev-1")
	if rc, err := publish(c, "dev/1/temp", "21.5"); err != nil || rc != 0 {
		t.Fatalf("publish: %#x %v", rc, err)
	}
	if n := len(f.stored("kafka.devices")); n != 1 {
		t.Fatalf("stored %d records, want 1", n)
	}
	if n := h.n.Load(); n != 0 {
		t.Fatalf("the stored publish nobody subscribes to went through the library's OnPublish hooks %d times after it was answered, want 0", n)
	}
	sub := stuckSubscriber(t, b.ListenerAddr(), "sub", "dev/2/#")
	if rc, err := publish(c, "dev/2/temp", "22.5"); err != nil || rc != 0 {
		t.Fatalf("publish with a subscriber: %#x %v", rc, err)
	}
	if typ, body := readPacket(t, sub); typ&0xf0 != 0x30 || !strings.HasSuffix(string(body), "22.5") {
		t.Fatalf("delivery: %#x %q", typ, body)
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("the stored publish with a subscriber went through the library's OnPublish hooks %d times after it was answered, want 1", n)
	}
	if n := len(f.stored("kafka.devices")); n != 2 {
		t.Fatalf("stored %d records, want 2", n)
	}
}

// Refusals: too large is 0x83 at once; a storage error or timeout is 0x97; a full
// queue is 0x97 at once.
func TestListenerRefusals(t *testing.T) {
	f, addr := startBackend(t)
	b := startListenerBridge(t, addr, 1)
	c := connect(t, b.ListenerAddr(), "dev-2")
	if rc, err := publish(c, "dev/2", strings.Repeat("x", 100)); err != nil || rc != 0x83 {
		t.Errorf("too large: %#x %v, want 0x83", rc, err)
	}
	f.mu.Lock()
	f.fail = status.Error(codes.Unavailable, "disk gone")
	f.mu.Unlock()
	if rc, err := publish(c, "dev/2", "a"); err != nil || rc != 0x97 {
		t.Errorf("storage refusal: %#x %v, want 0x97", rc, err)
	}
	gate := make(chan struct{})
	f.mu.Lock()
	f.fail, f.gate, f.entered = nil, gate, make(chan struct{}, 10)
	f.mu.Unlock()
	start := time.Now()
	if rc, err := publish(c, "dev/2", "slow"); err != nil || rc != 0x97 {
		t.Errorf("timeout: %#x %v, want 0x97", rc, err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("timeout answered after %v, before store-timeout (500ms)", d)
	}
	<-f.entered
	// Queue of 1: while one publish waits for storage, another client is refused at once.
	held := make(chan byte, 1)
	go func() { rc, _ := publish(c, "dev/2", "held"); held <- rc }()
	<-f.entered
	c2 := connect(t, b.ListenerAddr(), "dev-3")
	if rc, err := publish(c2, "dev/3", "b"); err != nil || rc != 0x97 {
		t.Errorf("full queue: %#x %v, want 0x97", rc, err)
	}
	close(gate)
	if rc := <-held; rc != 0 {
		t.Errorf("held publish: %#x, want 0", rc)
	}
}

// A PUBLISH to a topic name with a wildcard is a protocol error: DISCONNECT 0x90.
func TestListenerInvalidTopicName(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	conn, err := net.Dial("tcp", b.ListenerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// CONNECT (MQTT 5, clean start, keep alive 60, client id "x").
	if _, err := conn.Write([]byte{0x10, 0x0e, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 60, 0, 0, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	connack := make([]byte, 2)
	if _, err := io.ReadFull(conn, connack); err != nil || connack[0] != 0x20 {
		t.Fatalf("CONNACK: % x %v", connack, err)
	}
	if _, err := io.ReadFull(conn, make([]byte, connack[1])); err != nil {
		t.Fatal(err)
	}
	// PUBLISH QoS 1 to "a/#", packet id 1, no properties, payload "x".
	if _, err := conn.Write([]byte{0x32, 0x09, 0, 3, 'a', '/', '#', 0, 1, 0, 'x'}); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 3)
	if _, err := io.ReadFull(conn, hdr); err != nil {
		t.Fatalf("no answer to a PUBLISH with a wildcard topic: %v", err)
	}
	if hdr[0] != 0xe0 || hdr[2] != 0x90 {
		t.Fatalf("answer % x, want DISCONNECT with reason 0x90", hdr)
	}
}

// acknowledge: routed answers at once; the record is stored after.
func TestListenerAcknowledgeRouted(t *testing.T) {
	f, addr := startBackend(t)
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	b := startListenerBridge(t, addr, 8, `  - id: fast
    mqtt-topic-filters: ["fast/#"]
    kafka-topic: fast
    acknowledge: routed`)
	c := connect(t, b.ListenerAddr(), "dev-4")
	if rc, err := publish(c, "fast/1", "x"); err != nil || rc != 0 {
		t.Fatalf("routed publish: %#x %v", rc, err)
	}
	if n := len(f.stored("kafka.fast")); n != 0 {
		t.Fatalf("stored before the append returned: %d", n)
	}
	close(gate)
	deadline := time.Now().Add(5 * time.Second)
	for len(f.stored("kafka.fast")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("routed message never stored")
		}
		<-time.After(10 * time.Millisecond)
	}
}

// A key template cannot carry a record past max-record-bytes: the key counts toward
// the limit, so a topic repeated by the template is answered 0x83 and nothing is
// stored, while the same message under the limit is stored.
func TestListenerKeyTemplateCountsTowardMaxRecordBytes(t *testing.T) {
	f, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8, `  - id: amp
    mqtt-topic-filters: ["amp/#"]
    kafka-topic: amp
    key: "${MQTT_TOPIC}${MQTT_TOPIC}${MQTT_TOPIC}${MQTT_TOPIC}${MQTT_TOPIC}${MQTT_TOPIC}${MQTT_TOPIC}${MQTT_TOPIC}"
    max-record-bytes: 1024`)
	c := connect(t, b.ListenerAddr(), "dev-amp")
	long := "amp/" + strings.Repeat("t", 200) // 8 x 204 bytes of key: 1632 > 1024
	if rc, err := publish(c, long, "v"); err != nil || rc != 0x83 {
		t.Errorf("amplified key: %#x %v, want 0x83", rc, err)
	}
	if rc, err := publish(c, "amp/short", "v"); err != nil || rc != 0 {
		t.Errorf("short key: %#x %v, want 0", rc, err)
	}
	recs := f.stored("kafka.amp")
	if len(recs) != 1 || string(recs[0].GetKey()) != strings.Repeat("amp/short", 8) {
		t.Fatalf("stored %v, want the short-keyed record only", recs)
	}
	if got := testutil.ToFloat64(b.m.tooLarge.WithLabelValues("amp")); got != 1 {
		t.Errorf("too_large_total = %v, want 1", got)
	}
}
