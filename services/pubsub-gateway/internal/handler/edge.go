package handler

import (
	"context"
	"errors"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The gateway's two gRPC edges. Toward the backends, MarkBackend marks every error of a
// storage-core or coordinator call as the backend's (backendFailure). Toward the
// clients, Edge is the one place that writes the status a Pub/Sub client gets for an
// error: a backend's as Google words its code, naming the resource the client sent,
// never with the backend's text (which names channels, wraps other services' errors,
// and means nothing to a Pub/Sub client); the statuses the handler wrote for the client
// as they are; anything else as INTERNAL. The backend's text goes to the log.

// MarkBackend is the unary client interceptor of the gateway's connections to
// storage-core and the coordinator: their errors become raw backendFailures, which
// read as the backend's status (so the handler's logic is unchanged) until Edge maps
// them.
func MarkBackend(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return &backendFailure{cause: err, raw: true}
	}
	return nil
}

// Edge maps the errors of the Pub/Sub services for their clients; its interceptors go
// innermost, so logs and metrics see what the client got.
type Edge struct {
	log *zap.Logger
}

// NewEdge returns the edge, logging the backend errors it rewrites to log.
func NewEdge(log *zap.Logger) *Edge { return &Edge{log: log} }

// Unary is the unary server interceptor.
func (e *Edge) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		return nil, e.clientError(info.FullMethod, req, err)
	}
	return resp, nil
}

// Stream is the stream server interceptor; a stream's resource is the subscription its
// first request names.
func (e *Edge) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	fs := &firstRequest{ServerStream: ss}
	if err := h(srv, fs); err != nil {
		var req any
		if p := fs.first.Load(); p != nil {
			req = *p
		}
		return e.clientError(info.FullMethod, req, err)
	}
	return nil
}

// firstRequest keeps the first message a stream received.
type firstRequest struct {
	grpc.ServerStream
	first atomic.Pointer[any]
}

func (s *firstRequest) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.first.Load() == nil {
		s.first.CompareAndSwap(nil, &m)
	}
	return err
}

// clientError is the status the client of method gets for err, returned by the
// handler for request req (nil: unknown).
func (e *Edge) clientError(method string, req any, err error) error {
	var bf *backendFailure
	if errors.As(err, &bf) {
		code, notFound := bf.clientView()
		if code == codes.Unavailable {
			e.log.Warn("backend call failed", zap.String("method", method), zap.String("code", code.String()), zap.Error(bf.cause))
		} else if ce := e.log.Check(zap.DebugLevel, "backend call failed"); ce != nil {
			ce.Write(zap.String("method", method), zap.String("code", code.String()), zap.Error(bf.cause))
		}
		created := code == codes.AlreadyExists
		return status.Error(code, clientMessage(code, notFound, method, resourceOf(req, created)))
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	if st, ok := status.FromError(err); ok {
		return st.Err() // written for the client
	}
	e.log.Error("rpc failed with an error that is not a status", zap.String("method", method), zap.Error(err))
	return status.Error(codes.Internal, clientMessage(codes.Internal, "", method, ""))
}

// resourceOf is the resource name request req names for an error (created: the
// resource it creates, for ALREADY_EXISTS; else the one whose state the call depends
// on, for CreateSnapshot the subscription); "" when req names none.
func resourceOf(req any, created bool) string {
	switch r := req.(type) {
	case nil:
		return ""
	case *pubsubpb.Topic:
		return r.GetName()
	case *pubsubpb.Subscription:
		return r.GetName()
	case *pubsubpb.UpdateTopicRequest:
		return r.GetTopic().GetName()
	case *pubsubpb.UpdateSubscriptionRequest:
		return r.GetSubscription().GetName()
	case *pubsubpb.UpdateSnapshotRequest:
		return r.GetSnapshot().GetName()
	case *pubsubpb.CreateSnapshotRequest:
		if created {
			return r.GetName()
		}
		return r.GetSubscription()
	case *pubsubpb.CreateSchemaRequest:
		return r.GetParent() + "/" + collSchemas + "/" + r.GetSchemaId()
	case interface{ GetSubscription() string }:
		return r.GetSubscription()
	case interface{ GetTopic() string }:
		return r.GetTopic()
	case interface{ GetSnapshot() string }:
		return r.GetSnapshot()
	case interface{ GetName() string }:
		return r.GetName()
	case interface{ GetParent() string }:
		return r.GetParent()
	}
	return ""
}
