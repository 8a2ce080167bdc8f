package e2e

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// TestServerReflection: storage-core and coordinator have gRPC server reflection on
// (what grpcurl needs: list services and resolve the service's file descriptors) and
// answer gRPC health checks with SERVING.
func TestServerReflection(t *testing.T) {
	s := sharedStack(t)
	for _, tc := range []struct{ addr, service string }{
		{s.StorageAddr, "tributary.storage.v1.StorageService"},
		{s.CoordinatorAddr, "tributary.coordinator.v1.CoordinatorService"},
	} {
		cc, err := grpc.NewClient(tc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatalf("dial %s: %v", tc.addr, err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		ctx := ctxT(t, 20*time.Second)
		stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatalf("%s: reflection: %v", tc.service, err)
		}
		if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatalf("%s: reflection send: %v", tc.service, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: reflection list services: %v", tc.service, err)
		}
		var names []string
		for _, svc := range resp.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		for _, want := range []string{tc.service, "grpc.health.v1.Health"} {
			if !slices.Contains(names, want) {
				t.Errorf("reflection at %s lists %v, missing %s", tc.addr, names, want)
			}
		}
		if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: tc.service}}); err != nil {
			t.Fatalf("%s: reflection send: %v", tc.service, err)
		}
		resp, err = stream.Recv()
		if err != nil {
			t.Fatalf("%s: reflection file containing symbol: %v", tc.service, err)
		}
		if fds := resp.GetFileDescriptorResponse().GetFileDescriptorProto(); len(fds) == 0 {
			t.Errorf("reflection at %s: no file descriptor for %s (%v)", tc.addr, tc.service, resp.GetErrorResponse())
		}
		_ = stream.CloseSend()

		hr, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health check at %s: %v %v, want SERVING", tc.addr, hr, err)
		}
	}
}
