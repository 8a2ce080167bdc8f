package handler

import (
	"context"
	"io"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedStream is a StreamingPull server stream whose client sends reqs, then EOF.
type scriptedStream struct {
	grpc.ServerStream
	reqs []*pubsubpb.StreamingPullRequest
	sent int
}

func (s *scriptedStream) Recv() (*pubsubpb.StreamingPullRequest, error) {
	if len(s.reqs) == 0 {
		return nil, io.EOF
	}
	r := s.reqs[0]
	s.reqs = s.reqs[1:]
	return r, nil
}

func (s *scriptedStream) Send(*pubsubpb.StreamingPullResponse) error { s.sent++; return nil }

// A request after the first that names a subscription, even the stream's own, fails
// the stream with INVALID_ARGUMENT, as Google documents ("must not be set in
// subsequent requests") and the emulator answers; it was ignored, so acks a client
// meant for another subscription went to this stream's and silently failed there.
func TestStreamSubscriptionOnlyFirst(t *testing.T) {
	h := New(Deps{Log: zap.NewNop()}).Subscriber
	sub := &subInfo{id: "sub1", spec: &pubsubpb.Subscription{}}
	for _, name := range []string{"projects/p/subscriptions/sub1", "projects/p/subscriptions/other"} {
		ss := &scriptedStream{reqs: []*pubsubpb.StreamingPullRequest{{}, {Subscription: name}}}
		st := &stream{h: h, ss: ss, sub: sub, queue: "gcp.sub.sub1", outstanding: map[string]lease{}}
		err := st.readLoop(context.Background())
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a later request naming %s: %v, want INVALID_ARGUMENT", name, err)
		}
		if ss.sent != 1 {
			t.Fatalf("%d responses, want 1 (the keepalive's)", ss.sent)
		}
	}
	// A stream whose later requests name none ends cleanly at the client's EOF.
	ss := &scriptedStream{reqs: []*pubsubpb.StreamingPullRequest{{}, {}}}
	st := &stream{h: h, ss: ss, sub: sub, queue: "gcp.sub.sub1", outstanding: map[string]lease{}}
	if err := st.readLoop(context.Background()); err != io.EOF {
		t.Fatalf("keepalives then EOF: %v", err)
	}
}

// A later request that sets flow control fails the stream with INVALID_ARGUMENT, as
// google/pubsub/v1 documents; it was ignored, so a client lowering its limit mid-stream
// kept getting messages up to the first request's.
func TestStreamFlowControlOnlyFirst(t *testing.T) {
	h := New(Deps{Log: zap.NewNop()}).Subscriber
	sub := &subInfo{id: "sub1", spec: &pubsubpb.Subscription{}}
	for _, req := range []*pubsubpb.StreamingPullRequest{{MaxOutstandingMessages: 1}, {MaxOutstandingBytes: -1}} {
		ss := &scriptedStream{reqs: []*pubsubpb.StreamingPullRequest{{}, req}}
		st := &stream{h: h, ss: ss, sub: sub, queue: "gcp.sub.sub1", outstanding: map[string]lease{}}
		if err := st.readLoop(context.Background()); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a later request with %v: %v, want INVALID_ARGUMENT", req, err)
		}
		if ss.sent != 1 {
			t.Fatalf("%d responses, want 1 (the keepalive's)", ss.sent)
		}
	}
}
