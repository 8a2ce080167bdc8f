package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/natsx"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// rawCodec passes gRPC messages through as bytes (the proxy never decodes them).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// splitProxy is a gRPC proxy in front of two pubsub-gateway replicas, as a load
// balancer spreading calls over replicas would be: StreamingPull goes to one, every
// other call to the other. It counts the calls each side got.
type splitProxy struct {
	addr              string
	streams, elsewise atomic.Int64
}

func startSplitProxy(t *testing.T, streamTo, restTo string) *splitProxy {
	t.Helper()
	dial := func(addr string) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	streamCC, restCC := dial(streamTo), dial(restTo)
	p := &splitProxy{}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(64<<20),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(ss)
			to := restCC
			if strings.HasSuffix(method, "/StreamingPull") {
				to = streamCC
				p.streams.Add(1)
			} else {
				p.elsewise.Add(1)
			}
			md, _ := metadata.FromIncomingContext(ss.Context())
			ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), md.Copy()))
			defer cancel()
			cs, err := to.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
			if err != nil {
				return err
			}
			go func() {
				for {
					var m []byte
					if err := ss.RecvMsg(&m); err != nil {
						_ = cs.CloseSend()
						return
					}
					if err := cs.SendMsg(&m); err != nil {
						return
					}
				}
			}()
			for first := true; ; first = false {
				var m []byte
				if err := cs.RecvMsg(&m); err != nil {
					ss.SetTrailer(cs.Trailer())
					if err == io.EOF {
						return nil
					}
					return err
				}
				if first {
					if h, err := cs.Header(); err == nil {
						_ = ss.SendHeader(h)
					}
				}
				if err := ss.SendMsg(&m); err != nil {
					return err
				}
			}
		}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	p.addr = ln.Addr().String()
	return p
}

// receiveCrossReplica publishes n messages and receives them with the Go client
// through a proxy that sends its StreamingPull to gateway 0 and its acks and modacks to
// gateway 1, with server-side flow control max_outstanding_messages=1 (the client's
// setting, sent in the stream's first request). It returns how long receiving took
// (failing the test when within is exceeded) and the proxy.
func receiveCrossReplica(t *testing.T, s *stack.Stack, n int, within time.Duration) (time.Duration, *splitProxy) {
	t.Helper()
	topic, subID := psID("xr-topic"), psID("xr-sub")
	pub, sc := rawPubSub(t, s.PubSubAddrs[1])
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, subID, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 60})
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i))}
	}
	if _, err := pub.Publish(ctxT(t, 30*time.Second), &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	p := startSplitProxy(t, s.PubSubAddrs[0], s.PubSubAddrs[1])
	c := psClient(t, p.addr)
	sub := c.Subscriber(subID)
	sub.ReceiveSettings.MaxOutstandingMessages = 1
	sub.ReceiveSettings.NumGoroutines = 1
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]bool{}
	start := time.Now()
	err := sub.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Data)] = true
		if len(seen) == n {
			cancel()
		}
	})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("received %d of %d messages in %v: the stream on gateway 0 does not see the acks made through gateway 1", len(seen), n, within)
	}
	if p.streams.Load() == 0 || p.elsewise.Load() == 0 {
		t.Fatalf("proxy routed %d streams to gateway 0 and %d other calls to gateway 1", p.streams.Load(), p.elsewise.Load())
	}
	return took, p
}

// TestPubSubStreamSeesAcksThroughAnotherReplica: a StreamingPull on gateway A with
// max_outstanding_messages=1 (the Go client's MaxOutstandingMessages), whose messages
// the client acks through gateway B, keeps flowing: B announces the ended leases on
// NATS and A's stream re-reads them. Without that, A's window (the client's limit of
// one) freed only at the 60 s stream ack deadline: one message a minute, so the 60
// messages here would take an hour.
func TestPubSubStreamSeesAcksThroughAnotherReplica(t *testing.T) {
	s := pubsubStack(t)
	took, _ := receiveCrossReplica(t, s, 60, 40*time.Second)
	t.Logf("60 messages in %v with acks through the other replica", took)
}

// startPrivateNATS runs a nats-server of the test's own on a free port (so the test
// can stop it without touching the shared one) and returns its URL and a stop func.
func startPrivateNATS(t *testing.T) (string, func()) {
	t.Helper()
	bin := testenv.RequireBinary(t, "nats-server")
	addr := stack.FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	waitFor(t, 10*time.Second, "the private nats-server to listen", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return "nats://" + addr, stop
}

// TestPubSubStreamPollsWithoutNATS: when NATS goes down the gateways keep serving and stay
// ready (NATS only carries wake-ups; the gauge reports it down) and the same stream keeps
// flowing by re-reading its leases every second (the polling fallback), far faster than
// one window per ack deadline: at the client's limit of one, a message per re-read, so
// the 20 messages take about 20 s rather than 20 minutes.
func TestPubSubStreamPollsWithoutNATS(t *testing.T) {
	natsURL, stopNATS := startPrivateNATS(t)
	s := stack.StartT(t, stack.Options{PubSubGateways: 2, PubSubFlags: []string{"--nats-url", natsURL}})
	stopNATS()
	for _, p := range s.PubSub {
		waitFor(t, 10*time.Second, p.Name+" to report NATS down", func() bool {
			return procMetric(t, p.HTTPAddr, "tributary_pubsub_gateway_nats_connected") == 0
		})
		resp, err := http.Get("http://" + p.HTTPAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /readyz with NATS down: %d %s, want 200", p.Name, resp.StatusCode, body)
		}
	}
	took, _ := receiveCrossReplica(t, s, 20, 40*time.Second)
	t.Logf("20 messages in %v with acks through the other replica, NATS down", took)
}

// procMetric reads one series (name with its labels, as printed) of a process's
// /metrics; it fails the test when the series is absent.
func procMetric(t *testing.T, httpAddr, series string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", httpAddr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", series, l, err)
			}
			return f
		}
	}
	t.Fatalf("%s has no series %s", httpAddr, series)
	return 0
}

// lockHolder returns the coordinator replica holding sweep lock key, waiting until
// exactly one does.
func lockHolder(t *testing.T, s *stack.Stack, key string, within time.Duration) *stack.Proc {
	t.Helper()
	series := `tributary_coordinator_sweep_lock_held{lock="` + key + `"}`
	var holder *stack.Proc
	waitFor(t, within, "one coordinator holding "+key, func() bool {
		holder = nil
		n := 0
		for _, c := range s.Coordinators {
			if c.Running() && procMetric(t, c.HTTPAddr, series) == 1 {
				holder = c
				n++
			}
		}
		return n == 1
	})
	return holder
}

// TestPubSubLeaseSweepFailover: the Pub/Sub ack-deadline sweep runs on the one
// coordinator replica holding its lock; when that replica is killed (kill -9, the lock
// is not released) the other takes the lock over within its TTL (3 s) and sweeps:
// storage-core's SweepLeases calls go on, the lease of an unacked message expires and
// is announced on the queue's NATS subject by the new holder, and the message is
// redelivered.
func TestPubSubLeaseSweepFailover(t *testing.T) {
	s := stack.StartT(t, stack.Options{PubSubGateways: 1, Coordinators: 2})
	const lock = "pubsub-acks"
	holder := lockHolder(t, s, lock, 30*time.Second)
	if holder == s.Coordinator {
		// The gateway talks to the first coordinator: make the other one the holder
		// (a graceful stop releases the lock at once) so the kill below leaves the
		// gateway its registry.
		if err := s.Kill(holder.Name, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if holder = lockHolder(t, s, lock, 10*time.Second); holder == s.Coordinator {
			t.Fatal("the stopped coordinator still holds the lock")
		}
		if err := s.Restart(ctxT(t, time.Minute), s.Coordinator.Name); err != nil {
			t.Fatal(err)
		}
		// The gateway's readiness gate checks its backends every 500 ms: until it has
		// seen the restarted coordinator serving, every RPC is UNAVAILABLE.
		gw := s.PubSub[0]
		waitFor(t, 20*time.Second, gw.Name+" ready again", func() bool {
			resp, err := http.Get("http://" + gw.HTTPAddr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	survivor := s.Coordinator

	topic, subID := psID("sweep-topic"), psID("sweep-sub")
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, subID, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 10})
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(nc.Close)
	announced := make(chan *nats.Msg, 16)
	ns, err := nc.ChanSubscribe(natsx.QueueChangedSubject(s.ClusterID, channel.PubSubSubscription(subID)), announced)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctxT(t, 10*time.Second), &pubsubpb.PublishRequest{Topic: topicPath(topic),
		Messages: []*pubsubpb.PubsubMessage{{Data: []byte("lease me")}}}); err != nil {
		t.Fatal(err)
	}
	first, err := sc.Pull(ctxT(t, 30*time.Second), &pubsubpb.PullRequest{Subscription: subPath(subID), MaxMessages: 1})
	if err != nil || len(first.GetReceivedMessages()) != 1 {
		t.Fatalf("first pull: %v, %v", first, err)
	}
	leasedUntil := time.Now().Add(10 * time.Second)

	sweeps := `tributary_storage_calls_total{method="SweepLeases",outcome="ok"}`
	killed := time.Now()
	if err := s.Kill(holder.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, survivor.Name+" to take the lock over", func() bool {
		return procMetric(t, survivor.HTTPAddr, `tributary_coordinator_sweep_lock_held{lock="`+lock+`"}`) == 1
	})
	took := time.Since(killed)
	if took > 3*time.Second+time.Second {
		t.Errorf("take-over took %v, lock ttl 3s", took)
	}
	t.Logf("%s took the lock over %v after the kill", survivor.Name, took)
	before := procMetric(t, s.Storage.HTTPAddr, sweeps)
	waitFor(t, 5*time.Second, "the new holder's sweeps reaching storage-core", func() bool {
		return procMetric(t, s.Storage.HTTPAddr, sweeps) >= before+4
	})

	select {
	case m := <-announced:
		if early := time.Until(leasedUntil); early > time.Second {
			t.Fatalf("queue announced %v before the lease ended (%s)", early, m.Subject)
		}
	case <-time.After(time.Until(leasedUntil) + 5*time.Second):
		t.Fatal("the lease expiry was never announced: nobody sweeps")
	}
	again, err := sc.Pull(ctxT(t, 30*time.Second), &pubsubpb.PullRequest{Subscription: subPath(subID), MaxMessages: 1})
	if err != nil || len(again.GetReceivedMessages()) != 1 {
		t.Fatalf("pull after the expiry: %v, %v", again, err)
	}
	if got, want := again.GetReceivedMessages()[0].GetMessage().GetMessageId(), first.GetReceivedMessages()[0].GetMessage().GetMessageId(); got != want {
		t.Fatalf("redelivered message %s, want %s", got, want)
	}
}
