package grpcx

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Serve serves s on ln until ctx ends or s.Serve returns. It returns nil when ctx
// ended first (s still serves: stop it with GracefulStop), else what s.Serve returned
// (grpc.ErrServerStopped when s was stopped before it started serving).
func Serve(ctx context.Context, s *grpc.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// GracefulStop stops s: it stops accepting connections and waits for the calls and
// streams in progress to end, at most grace; then it closes whatever is left
// (grpc.Server.Stop) and returns once s has stopped.
func GracefulStop(s *grpc.Server, grace time.Duration) {
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.Stop()
		<-stopped
	}
}

// HealthCheck is a readiness probe of a backend: the overall status (service "") of
// its standard gRPC health service (grpc.health.v1.Health/Check).
type HealthCheck struct {
	// Conn is the connection to the backend.
	Conn *grpc.ClientConn
	// Timeout bounds each call (0: only the caller's context does).
	Timeout time.Duration
	// Addr, when set, names the backend in every error: "Addr: ...".
	Addr string
	// NotServing, when set, is the error wrapped for an answer other than SERVING:
	// "Addr: NotServing (STATUS)". Unset, that answer is "Addr: health STATUS".
	NotServing error
}

// Check returns nil when the backend answers SERVING; otherwise the call's error (as
// it is, or prefixed with Addr) or the not-serving error described by the fields.
func (h HealthCheck) Check(ctx context.Context) error {
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	resp, err := healthpb.NewHealthClient(h.Conn).Check(ctx, &healthpb.HealthCheckRequest{})
	switch {
	case err != nil && h.Addr != "":
		return fmt.Errorf("%s: %w", h.Addr, err)
	case err != nil:
		return err
	case resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
		return nil
	case h.NotServing != nil && h.Addr != "":
		return fmt.Errorf("%s: %w (%s)", h.Addr, h.NotServing, resp.GetStatus())
	case h.NotServing != nil:
		return fmt.Errorf("%w (%s)", h.NotServing, resp.GetStatus())
	case h.Addr != "":
		return fmt.Errorf("%s: health %s", h.Addr, resp.GetStatus())
	default:
		return fmt.Errorf("health %s", resp.GetStatus())
	}
}
