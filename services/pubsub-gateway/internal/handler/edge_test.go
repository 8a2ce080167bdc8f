package handler

import (
	"context"
	"errors"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEdgeClientError: the edge answers a backend's error with the client's code and a
// message naming the client's resource, never the backend's text; the handler's own
// statuses pass as they are; an error that is no status is INTERNAL.
func TestEdgeClientError(t *testing.T) {
	// What the coordinator answered for CreateSnapshot on a detached subscription.
	leak := status.Error(codes.FailedPrecondition, "storage-core: create snapshot s1: rpc error: code = FailedPrecondition desc = queue is detached: gcp.sub.d1")
	raw := func(err error) error {
		return MarkBackend(context.Background(), "/m", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return err })
	}
	snapReq := &pubsubpb.CreateSnapshotRequest{Name: "projects/p/snapshots/s1", Subscription: "projects/p/subscriptions/d1"}
	const createSnapshot = "/google.pubsub.v1.Subscriber/CreateSnapshot"
	for _, tc := range []struct {
		name   string
		method string
		req    any
		err    error
		code   codes.Code
		msg    string
	}{
		{"raw, through the handler as it is", createSnapshot, snapReq, raw(leak),
			codes.FailedPrecondition, "Precondition check failed (resource=projects/p/subscriptions/d1)."},
		{"mapped by backendError", createSnapshot, snapReq, backendError(context.Background(), raw(leak), msgSubNotFound),
			codes.FailedPrecondition, "Precondition check failed (resource=projects/p/subscriptions/d1)."},
		{"mapped, unmarked", createSnapshot, snapReq, backendError(context.Background(), leak, ""),
			codes.FailedPrecondition, "Precondition check failed (resource=projects/p/subscriptions/d1)."},
		{"not found with the emulator's words", createSnapshot, snapReq, backendError(context.Background(), raw(status.Error(codes.NotFound, "subscription not found")), msgSubNotFound),
			codes.NotFound, msgSubNotFound},
		{"not found, no words", "/google.pubsub.v1.Subscriber/GetSnapshot", &pubsubpb.GetSnapshotRequest{Snapshot: "projects/p/snapshots/x"},
			raw(status.Error(codes.NotFound, "snapshot not found")), codes.NotFound, "Resource not found (resource=projects/p/snapshots/x)."},
		{"already exists names the created kind", createSnapshot, snapReq, raw(status.Error(codes.AlreadyExists, "storage-core: rpc error: gcp.sub.d1")),
			codes.AlreadyExists, "Snapshot already exists"},
		{"internal becomes unavailable", "/google.pubsub.v1.Publisher/Publish", &pubsubpb.PublishRequest{Topic: "projects/p/topics/t"},
			raw(status.Error(codes.Internal, "postgres: broken pipe")), codes.Unavailable, "The service is currently unavailable."},
		{"not a status", "/google.pubsub.v1.Publisher/Publish", &pubsubpb.PublishRequest{Topic: "projects/p/topics/t"},
			backendError(context.Background(), errors.New("proto: cannot parse gcp.t"), ""), codes.Unavailable, "The service is currently unavailable."},
		{"the handler's own", "/google.pubsub.v1.Publisher/GetTopic", &pubsubpb.GetTopicRequest{Topic: "x"},
			invalid("Invalid [topics] name: (name=x)"), codes.InvalidArgument, "Invalid [topics] name: (name=x)"},
		{"no status at all", "/google.pubsub.v1.Subscriber/StreamingPull", nil,
			errors.New("storage-core: decode: rpc error"), codes.Internal, "Internal error encountered."},
		{"cancelled", "/google.pubsub.v1.Subscriber/Pull", nil, context.Canceled, codes.Canceled, "context canceled"},
	} {
		got := status.Convert(NewEdge(zap.NewNop()).clientError(tc.method, tc.req, tc.err))
		if got.Code() != tc.code || got.Message() != tc.msg {
			t.Errorf("%s: %v %q, want %v %q", tc.name, got.Code(), got.Message(), tc.code, tc.msg)
		}
		for _, m := range []string{"rpc error", "storage-core", "postgres", "gcp."} {
			if strings.Contains(got.Message(), m) {
				t.Errorf("%s: message %q holds %q", tc.name, got.Message(), m)
			}
		}
	}
}

// TestMarkedErrorsReadAsTheBackends: a marked error reads as the backend's status to the
// handler's logic (codes and messages it branches on), and backendError's result reads
// as the client's.
func TestMarkedErrorsReadAsTheBackends(t *testing.T) {
	backend := status.Error(codes.NotFound, "schema revision not found")
	err := MarkBackend(context.Background(), "/m", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return backend })
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "schema revision not found" {
		t.Fatalf("marked error reads %v %q", st.Code(), st.Message())
	}
	if st := status.Convert(schemaError(context.Background(), err)); st.Code() != codes.NotFound || st.Message() != msgRevisionMissing {
		t.Fatalf("schemaError of the marked error: %v %q", st.Code(), st.Message())
	}
	if st := status.Convert(backendError(context.Background(), err, "")); st.Code() != codes.NotFound || st.Message() != "Resource not found." {
		t.Fatalf("backendError of the marked error: %v %q", st.Code(), st.Message())
	}
}
