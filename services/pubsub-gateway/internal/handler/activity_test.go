package handler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// activityRegistry records RecordPubSubActivity calls; the other methods are not used.
type activityRegistry struct {
	coordinatorv1.PubSubRegistryServiceClient

	mu    sync.Mutex
	calls [][]string
	fail  bool
}

func (r *activityRegistry) RecordPubSubActivity(_ context.Context, req *coordinatorv1.RecordPubSubActivityRequest, _ ...grpc.CallOption) (*coordinatorv1.RecordPubSubActivityResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return nil, errors.New("injected failure")
	}
	ids := append([]string(nil), req.GetSubscriptionIds()...)
	sort.Strings(ids)
	r.calls = append(r.calls, ids)
	return &coordinatorv1.RecordPubSubActivityResponse{}, nil
}

func (r *activityRegistry) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprint(r.calls)
	r.calls = nil
	return s
}

// TestActivityReports: touches are batched into one report per flush, a subscription
// is reported at most once per activityEvery, and a failed report is retried.
func TestActivityReports(t *testing.T) {
	reg := &activityRegistry{}
	now := time.Unix(1_700_000_000, 0)
	h := New(Deps{Registry: reg, Log: zap.NewNop(), Now: func() time.Time { return now }}).Subscriber
	ctx := context.Background()

	for range 1000 {
		h.touch("a")
		h.touch("b")
	}
	h.flushActivity(ctx)
	if got := reg.take(); got != "[[a b]]" {
		t.Fatalf("first flush sent %s", got)
	}
	now = now.Add(30 * time.Second)
	h.touch("a")
	h.touch("c")
	h.flushActivity(ctx)
	if got := reg.take(); got != "[[c]]" {
		t.Fatalf("30 s later sent %s, want only c", got)
	}
	h.flushActivity(ctx)
	if got := reg.take(); got != "[]" {
		t.Fatalf("nothing touched, sent %s", got)
	}
	now = now.Add(31 * time.Second) // a was reported 61 s ago, c 31 s ago
	h.touch("a")
	h.touch("c")
	reg.fail = true
	h.flushActivity(ctx)
	reg.fail = false
	h.flushActivity(ctx)
	if got := reg.take(); got != "[[a]]" {
		t.Fatalf("after a failed report sent %s, want a again", got)
	}
}

func TestExpirationTTLMs(t *testing.T) {
	for _, tc := range []struct {
		p    *pubsubpb.ExpirationPolicy
		want int64
	}{
		{&pubsubpb.ExpirationPolicy{Ttl: durationpb.New(48 * time.Hour)}, 48 * 3600 * 1000},
		{&pubsubpb.ExpirationPolicy{}, 0}, // explicit policy without ttl: never expires
	} {
		if got := expirationTTLMs(&pubsubpb.Subscription{ExpirationPolicy: tc.p}); got != tc.want {
			t.Errorf("expirationTTLMs(%v) = %d, want %d", tc.p, got, tc.want)
		}
	}
	s := &pubsubpb.Subscription{}
	if err := normalizeSub(s, resource{project: "p", id: "sub"}); err != nil {
		t.Fatal(err)
	}
	if got := expirationTTLMs(s); got != 31*24*3600*1000 {
		t.Errorf("default policy: %d ms, want 31 days", got)
	}
}
