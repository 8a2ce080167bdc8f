package grpcx

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A client whose server was down for a while reconnects within about ReconnectMaxDelay
// of the server coming back, not after gRPC's default two-minute backoff.
func TestDialReconnectsPromptlyAfterOutage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // the server is down

	cc, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	// Fail for long enough to climb the backoff ladder: with gRPC's default backoff the
	// attempts come at about 1, 2.6, 5.2, 9.3, 15.8 and 26.3 s, so a server back at 20 s
	// would be found about 6 s later; with the cap, within ReconnectMaxDelay (+20%
	// jitter).
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, _ = hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := NewServer(zaptest.NewLogger(t))
	RegisterStandard(srv)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 2*ReconnectMaxDelay)
	defer cancel()
	for {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			return
		} else if ctx.Err() != nil {
			t.Fatalf("not reconnected within %v of the server coming back: %v", 2*ReconnectMaxDelay, err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}
