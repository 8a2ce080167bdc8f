package server

import (
	"context"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func testNATSURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("TRIBUTARY_TEST_NATS_URL")
	if u == "" {
		u = "nats://127.0.0.1:4222"
	}
	pu, err := url.Parse(u)
	if err == nil {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", pu.Host, 2*time.Second); err == nil {
			_ = c.Close()
			return u
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("NATS at %s is required in CI: %v", u, err)
	}
	t.Skipf("SKIP: NATS at %s not reachable (%v); set TRIBUTARY_TEST_NATS_URL", u, err)
	return ""
}

func TestServesWithoutNATS(t *testing.T) {
	s := startServer(t, func(c *Config) { c.NATSURL = "nats://127.0.0.1:1" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.srv.Ready(ctx)
		if err != nil && strings.Contains(err.Error(), "nats") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness without NATS: %v, want a nats failure", err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 0 {
		t.Fatalf("brokers without NATS: %+v", md.Brokers)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "nonats", Value: []byte("x")}).FirstErr(); err != nil && !strings.Contains(err.Error(), "UNKNOWN_TOPIC") {
		t.Fatalf("produce without NATS: %v", err)
	}
}

func TestTwoGatewaysSeeEachOther(t *testing.T) {
	u := testNATSURL(t)
	cluster := "kgwtest-" + time.Now().Format("150405.000000000")
	a := startServer(t, func(c *Config) { c.NATSURL, c.ClusterID, c.NodeID = u, cluster, 0 })
	b := startServer(t, func(c *Config) {
		c.NATSURL, c.ClusterID, c.NodeID = u, cluster, 1
		c.Storage, c.Coordinator = a.storage, a.coord
	})
	for _, s := range []*stack{a, b} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			// A fresh client each time: kgo caches metadata for MetadataMinAge.
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 12
			rc := dialRaw(t, s.addr)
			rc.send(req, 1)
			_, body, err := rc.recv(true)
			resp := req.ResponseKind().(*kmsg.MetadataResponse)
			resp.Version = 12
			if err == nil {
				err = resp.ReadFrom(body)
			}
			_ = rc.c.Close()
			if err == nil && len(resp.Brokers) == 2 {
				if resp.ControllerID != 0 {
					t.Errorf("controller %d, want 0", resp.ControllerID)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway at %s lists %+v (%v), want 2 brokers", s.addr, resp.Brokers, err)
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
	}
}
