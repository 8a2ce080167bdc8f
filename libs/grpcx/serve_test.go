package grpcx

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// startHealth serves a health service on a free loopback port and returns it with a
// client connection to it; both end with the test.
func startHealth(t *testing.T) (*health.Server, *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(zaptest.NewLogger(t))
	hs := RegisterStandard(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc, err := Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return hs, cc
}

func TestHealthCheck(t *testing.T) {
	hs, cc := startHealth(t)
	ctx := context.Background()
	errDown := errors.New("backend not serving")
	bare := HealthCheck{Conn: cc}
	named := HealthCheck{Conn: cc, Addr: "core:7400", NotServing: errDown, Timeout: time.Second}
	if err := bare.Check(ctx); err != nil {
		t.Fatalf("SERVING: %v", err)
	}
	if err := named.Check(ctx); err != nil {
		t.Fatalf("SERVING: %v", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := bare.Check(ctx); err == nil || err.Error() != "health NOT_SERVING" {
		t.Fatalf("NOT_SERVING: %v, want health NOT_SERVING", err)
	}
	err := named.Check(ctx)
	if !errors.Is(err, errDown) || err.Error() != "core:7400: backend not serving (NOT_SERVING)" {
		t.Fatalf("NOT_SERVING: %v", err)
	}
	if err := (HealthCheck{Conn: cc, Addr: "core:7400"}).Check(ctx); err == nil || err.Error() != "core:7400: health NOT_SERVING" {
		t.Fatalf("NOT_SERVING: %v", err)
	}
}

// A backend that never answers fails the check within its timeout.
func TestHealthCheckTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // accepts (the kernel's backlog) and never speaks HTTP/2
	cc, err := Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	start := time.Now()
	err = HealthCheck{Conn: cc, Addr: "silent", Timeout: 200 * time.Millisecond}.Check(context.Background())
	if err == nil {
		t.Fatal("check of a silent backend passed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("check took %v with a 200ms timeout", d)
	}
}

// Serve returns nil once ctx ends, with the server still serving; GracefulStop then
// cuts a stream that does not end by itself after its grace.
func TestServeAndGracefulStop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(zaptest.NewLogger(t))
	RegisterStandard(srv)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, srv, ln) }()

	cc, err := Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// A Watch stream stays open until the server ends it.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	w, err := healthpb.NewHealthClient(cc).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first watch answer: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after ctx ended: %v, want nil", err)
	}
	if err := (HealthCheck{Conn: cc}).Check(context.Background()); err != nil {
		t.Fatalf("server stopped serving before GracefulStop: %v", err)
	}
	start := time.Now()
	GracefulStop(srv, 300*time.Millisecond)
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("GracefulStop with a stream open took %v, want about the 300ms grace", d)
	}
	if _, err := w.Recv(); err == nil {
		t.Fatal("watch stream still open after GracefulStop")
	}
	if err := Serve(context.Background(), srv, ln); !errors.Is(err, grpc.ErrServerStopped) {
		t.Fatalf("Serve of a stopped server: %v, want ErrServerStopped", err)
	}
}
