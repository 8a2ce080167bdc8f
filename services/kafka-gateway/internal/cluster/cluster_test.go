package cluster

import (
	"context"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLiveIncludesSelfSortedAndExpires(t *testing.T) {
	m := New("c", Member{NodeID: 5, Host: "h", Port: 1}, zaptest.NewLogger(t))
	m.expiry = time.Hour
	m.observe(Member{NodeID: 9, Host: "h9", Port: 9})
	m.observe(Member{NodeID: 2, Host: "h2", Port: 2})
	m.observe(Member{NodeID: 5, Host: "impostor", Port: 5})
	live := m.Live()
	if len(live) != 3 || live[0].NodeID != 2 || live[1].NodeID != 5 || live[2].NodeID != 9 || live[1].Host != "h" {
		t.Fatalf("live = %+v", live)
	}
	m.expiry = 0
	if live := m.Live(); len(live) != 1 || live[0].NodeID != 5 {
		t.Fatalf("after expiry live = %+v", live)
	}
}

// natsURL returns the test NATS server, skipping (failing in CI) when it is not reachable.
func natsURL(t *testing.T) string {
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

func TestAnnouncementsOverNATS(t *testing.T) {
	u := natsURL(t)
	cluster := "test-" + time.Now().Format("150405.000000000")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ms []*Membership
	done := make(chan struct{}, 2)
	for i := int32(0); i < 2; i++ {
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		m := New(cluster, Member{NodeID: i, Host: "127.0.0.1", Port: 9092 + i}, zaptest.NewLogger(t))
		m.interval = 20 * time.Millisecond
		ms = append(ms, m)
		go func() {
			defer func() { done <- struct{}{} }()
			if err := m.Run(ctx, nc); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(ms[0].Live()) != 2 || len(ms[1].Live()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not see each other: %+v / %+v", ms[0].Live(), ms[1].Live())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	if got := ms[0].Live()[1]; got.NodeID != 1 || got.Port != 9093 {
		t.Fatalf("peer = %+v", got)
	}
	cancel()
	<-done
	<-done
}

// A replica that starts after its peer knows the peer as soon as it is Synced, long
// before the peer's next periodic announcement.
func TestLateJoinerDiscoversPeersAtOnce(t *testing.T) {
	u := natsURL(t)
	cluster := "test-late-" + time.Now().Format("150405.000000000")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 2)
	start := func(id int32) *Membership {
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		m := New(cluster, Member{NodeID: id, Host: "127.0.0.1", Port: 9092 + id}, zaptest.NewLogger(t))
		m.interval = time.Hour
		go func() {
			defer func() { done <- struct{}{} }()
			if err := m.Run(ctx, nc); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		select {
		case <-m.Synced():
		case <-time.After(10 * time.Second):
			t.Fatalf("replica %d never synced", id)
		}
		return m
	}
	first := start(0)
	second := start(1)
	if live := second.Live(); len(live) != 2 {
		t.Fatalf("late joiner sees %+v right after sync, want both replicas", live)
	}
	if live := first.Live(); len(live) != 2 {
		t.Fatalf("first replica sees %+v after the late joiner's first announcement", live)
	}
	cancel()
	<-done
	<-done
}
