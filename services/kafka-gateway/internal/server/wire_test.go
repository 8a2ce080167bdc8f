package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"go.uber.org/zap/zaptest"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
	"github.com/tributary/tributary/services/kafka-gateway/internal/handler"
)

// rawConn is a hand-driven Kafka connection.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// send writes req with correlation id corr using the right request header version.
func (rc *rawConn) send(req kmsg.Request, corr int32) {
	rc.t.Helper()
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawConn) sendBytes(b []byte) {
	rc.t.Helper()
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

// recv reads one response frame and returns its correlation id and body (after the
// response header of the given flexibility).
func (rc *rawConn) recv(flexibleHeader bool) (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(rc.r, size[:]); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(rc.r, buf); err != nil {
		return 0, nil, err
	}
	corr := int32(binary.BigEndian.Uint32(buf))
	buf = buf[4:]
	if flexibleHeader {
		if len(buf) == 0 || buf[0] != 0 {
			return corr, nil, errors.New("bad response header tags")
		}
		buf = buf[1:]
	}
	return corr, buf, nil
}

// closed reports whether the server closed the connection (EOF or reset).
func (rc *rawConn) closed() bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := rc.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestEveryAPIEveryVersionRoundTrips(t *testing.T) {
	s := startServer(t, nil)
	rc := dialRaw(t, s.addr)
	corr := int32(0)
	for _, k := range handler.APIKeys() {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			req := kmsg.RequestForKey(k.ApiKey)
			req.SetVersion(v)
			if p, ok := req.(*kmsg.ProduceRequest); ok {
				p.Acks = 1
			}
			corr++
			rc.send(req, corr)
			flex := req.IsFlexible() && k.ApiKey != kmsg.ApiVersions.Int16()
			got, body, err := rc.recv(flex)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(k.ApiKey), v, err)
			}
			if got != corr {
				t.Fatalf("%s v%d: correlation %d, want %d", kmsg.NameForKey(k.ApiKey), v, got, corr)
			}
			resp := req.ResponseKind()
			resp.SetVersion(v)
			if err := resp.ReadFrom(body); err != nil {
				t.Fatalf("%s v%d: response does not decode: %v", kmsg.NameForKey(k.ApiKey), v, err)
			}
		}
	}
}

func TestAPIVersionsUnsupportedVersion(t *testing.T) {
	s := startServer(t, nil)
	rc := dialRaw(t, s.addr)
	// ApiVersions v99 with a body we cannot know: v0 answer, UNSUPPORTED_VERSION, ranges.
	rc.sendBytes([]byte{0, 0, 0, 12, 0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff, 0x42, 0x42})
	corr, body, err := rc.recv(false)
	if err != nil || corr != 7 {
		t.Fatalf("recv: %d %v", corr, err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) == 0 {
		t.Fatalf("answer %+v", resp)
	}
	// The connection stays usable.
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
	rc.send(req, 8)
	if corr, body, err = rc.recv(false); err != nil || corr != 8 {
		t.Fatalf("recv v3: %d %v", corr, err)
	}
	v3 := kmsg.NewPtrApiVersionsResponse()
	v3.Version = 3
	if err := v3.ReadFrom(body); err != nil || v3.ErrorCode != 0 {
		t.Fatalf("v3 answer %+v %v", v3, err)
	}
}

func TestBadFramesCloseOnlyThatConnection(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxFrameBytes = 1 << 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	keep, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.DefaultProduceTopic("keep"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	if err := keep.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	frames := map[string][]byte{
		"oversize":         {0x00, 0x20, 0x00, 0x00},
		"2GiB-1":           {0x7f, 0xff, 0xff, 0xff},
		"negative":         {0x80, 0x00, 0x00, 0x00},
		"tiny":             {0, 0, 0, 2, 0, 0},
		"unknown api key":  append([]byte{0, 0, 0, 16}, 0xff, 0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0x13, 0x37, 0x13, 0x37, 0x13, 0x37),
		"api key 999":      {0, 0, 0, 10, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff},
		"bad client id":    {0, 0, 0, 10, 0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0xff},
		"metadata v99":     {0, 0, 0, 10, 0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff},
		"truncated body":   {0, 0, 0, 11, 0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0x00},
		"fetch v0 (below)": {0, 0, 0, 10, 0, 1, 0, 0, 0, 0, 0, 1, 0xff, 0xff},
	}
	for name, f := range frames {
		rc := dialRaw(t, s.addr)
		rc.sendBytes(f)
		if !rc.closed() {
			t.Errorf("%s: connection not closed", name)
		}
	}
	if err := keep.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("existing client after bad frames: %v", err)
	}
}

func TestPipelinedResponsesInOrder(t *testing.T) {
	s := startServer(t, nil)
	rc := dialRaw(t, s.addr)
	// A long-poll fetch first, then metadata requests: answers stay in request order.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 4
	tp := kmsg.NewCreateTopicsRequestTopic()
	tp.Topic, tp.NumPartitions, tp.ReplicationFactor = "pipe", 1, 1
	ct.Topics = append(ct.Topics, tp)
	rc.send(ct, 1)
	if _, _, err := rc.recv(false); err != nil {
		t.Fatal(err)
	}
	f := kmsg.NewPtrFetchRequest()
	f.Version = 11
	f.MaxWaitMillis = 300
	f.MinBytes = 1
	f.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "pipe"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	f.Topics = append(f.Topics, ft)
	rc.send(f, 2)
	for i := int32(3); i < 40; i++ {
		m := kmsg.NewPtrMetadataRequest()
		m.Version = 8
		rc.send(m, i)
	}
	for want := int32(2); want < 40; want++ {
		got, _, err := rc.recv(false)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("response %d arrived when %d was due", got, want)
		}
	}
}

func TestReadyzAndMetrics(t *testing.T) {
	s := startServer(t, nil)
	// Fakes have no health service to ask; readiness with injected clients has no
	// backend checks, so it is ready.
	if err := s.srv.Ready(context.Background()); err != nil {
		t.Fatalf("ready: %v", err)
	}
	if s.srv.HTTPAddr() == "" {
		t.Fatal("no http address")
	}
}

func TestShutdownAnswersInFlightRequests(t *testing.T) {
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	srv, err := New(Config{Listen: "127.0.0.1:0", ClusterID: "test", Storage: st, Coordinator: co, AutoCreateTopics: true}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	rc := dialRaw(t, srv.KafkaAddr())
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 4
	tp := kmsg.NewCreateTopicsRequestTopic()
	tp.Topic, tp.NumPartitions, tp.ReplicationFactor = "drain", 1, 1
	ct.Topics = append(ct.Topics, tp)
	rc.send(ct, 1)
	if _, _, err := rc.recv(false); err != nil {
		t.Fatal(err)
	}
	f := kmsg.NewPtrFetchRequest()
	f.Version = 11
	f.MaxWaitMillis = 500
	f.MinBytes = 1
	f.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "drain"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	f.Topics = append(f.Topics, ft)
	rc.send(f, 2)
	// Wait until the fetch reached storage, then stop the server.
	deadline := time.Now().Add(10 * time.Second)
	for st.Calls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("fetch never reached storage")
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	cancel()
	corr, body, err := rc.recv(false)
	if err != nil || corr != 2 {
		t.Fatalf("in-flight fetch during shutdown: corr %d err %v", corr, err)
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 11
	// The long poll ends at once with NOT_LEADER_OR_FOLLOWER: the client moves on.
	if err := resp.ReadFrom(body); err != nil || resp.Topics[0].Partitions[0].ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch answer: %+v %v", resp, err)
	}
	if !rc.closed() {
		t.Fatal("connection still open after shutdown")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Clients that announce large frames and then stall hold only (about twice, as the
// buffer doubles) the bytes they sent: the memory budget stays available to everyone else (it used to be reserved for the
// announced size, so a few stalled connections froze the gateway).
func TestStalledLargeFramesDoNotStarveOthers(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxInFlightBytes = 64 << 20 })
	for i := 0; i < 2; i++ {
		rc := dialRaw(t, s.addr)
		b := binary.BigEndian.AppendUint32(nil, 32<<20) // 32 MiB announced
		rc.sendBytes(append(b, 0, 0, 0, 0))             // then 4 bytes, then nothing
	}
	// Wait until both stalled readers hold their reservation.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.srv.mem.mu.Lock()
		used := s.srv.mem.used
		s.srv.mem.mu.Unlock()
		if used >= 2*bodyChunk {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled readers reserved %d bytes", used)
		}
	}
	rc := dialRaw(t, s.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
	rc.send(req, 7)
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	corr, _, err := rc.recv(false)
	if err != nil || corr != 7 {
		t.Fatalf("ApiVersions behind stalled large frames: corr %d, err %v", corr, err)
	}
}
