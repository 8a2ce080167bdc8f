package server

import (
	"context"
	"strings"
	"testing"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bad input on every QueueService verb answers a clear status, never a panic.
func TestQueueServiceBadInput(t *testing.T) {
	c, stop := startQueueServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.t"}}}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 300)
	cases := []struct {
		what string
		call func() error
		want codes.Code
	}{
		{"create empty name", func() error { _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{}); return err }, codes.InvalidArgument},
		{"create long name", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: strings.Repeat("a", 5000)})
			return err
		}, codes.InvalidArgument},
		{"create over a log", func() error { _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.t"}); return err }, codes.AlreadyExists},
		{"create nil binding", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.x", Bindings: []*storagev1.Binding{nil}})
			return err
		}, codes.InvalidArgument},
		{"create long filter", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.x", Bindings: []*storagev1.Binding{{Source: "gcp.t", Filter: "attributes:" + long}}})
			return err
		}, codes.InvalidArgument},
		{"create bind to queue", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.x", Bindings: []*storagev1.Binding{{Source: "gcp.sub.s"}}})
			return err
		}, codes.InvalidArgument},
		{"create dead letter to itself", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.x", Config: &storagev1.QueueConfig{DeadLetter: &storagev1.DeadLetterPolicy{Channel: "gcp.sub.x", MaxDeliveryAttempts: 5}}})
			return err
		}, codes.InvalidArgument},
		{"create dead letter reserved", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.x", Config: &storagev1.QueueConfig{DeadLetter: &storagev1.DeadLetterPolicy{Channel: "_x", MaxDeliveryAttempts: 5}}})
			return err
		}, codes.PermissionDenied},
		{"create ack deadline", func() error {
			_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.x", Config: &storagev1.QueueConfig{AckDeadlineMs: -1}})
			return err
		}, codes.InvalidArgument},
		{"get missing", func() error {
			_, err := c.q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: "gcp.sub.none"})
			return err
		}, codes.NotFound},
		{"get log", func() error { _, err := c.q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: "gcp.t"}); return err }, codes.FailedPrecondition},
		{"get reserved", func() error { _, err := c.q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: "_q"}); return err }, codes.PermissionDenied},
		{"receive 0", func() error { _, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s"}); return err }, codes.InvalidArgument},
		{"receive 10001", func() error {
			_, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10001})
			return err
		}, codes.InvalidArgument},
		{"receive negative", func() error {
			_, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: -5})
			return err
		}, codes.InvalidArgument},
		{"receive deadline", func() error {
			_, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 1, AckDeadlineMs: 600001})
			return err
		}, codes.InvalidArgument},
		{"receive negative wait", func() error {
			_, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 1, WaitMs: -1})
			return err
		}, codes.InvalidArgument},
		{"receive negative bytes", func() error {
			_, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 1, MaxBytes: -1})
			return err
		}, codes.InvalidArgument},
		{"ack missing queue", func() error {
			_, err := c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.none", AckIds: []string{"x"}})
			return err
		}, codes.NotFound},
		{"modack over max", func() error {
			_, err := c.q.ModifyAckDeadline(ctx, &storagev1.ModifyAckDeadlineRequest{Queue: "gcp.sub.s", AckIds: []string{"x"}, AckDeadlineMs: 600001})
			return err
		}, codes.InvalidArgument},
		{"update unknown mask", func() error {
			_, err := c.q.UpdateQueueConfig(ctx, &storagev1.UpdateQueueConfigRequest{Name: "gcp.sub.s", UpdateMask: []string{"bindings"}})
			return err
		}, codes.InvalidArgument},
		{"update dead letter to queue", func() error {
			_, err := c.q.UpdateQueueConfig(ctx, &storagev1.UpdateQueueConfigRequest{Name: "gcp.sub.s", UpdateMask: []string{"dead_letter"},
				Config: &storagev1.QueueConfig{DeadLetter: &storagev1.DeadLetterPolicy{Channel: "gcp.sub.s", MaxDeliveryAttempts: 5}}})
			return err
		}, codes.InvalidArgument},
		{"seek no target", func() error { _, err := c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s"}); return err }, codes.InvalidArgument},
		{"seek negative time", func() error {
			_, err := c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_TimeMs{TimeMs: -1}})
			return err
		}, codes.InvalidArgument},
		{"seek missing snapshot", func() error {
			_, err := c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_Snapshot{Snapshot: "none"}})
			return err
		}, codes.NotFound},
		{"snapshot empty name", func() error {
			_, err := c.q.CreateSnapshot(ctx, &storagev1.CreateSnapshotRequest{Queue: "gcp.sub.s"})
			return err
		}, codes.InvalidArgument},
		{"snapshot long name", func() error {
			_, err := c.q.CreateSnapshot(ctx, &storagev1.CreateSnapshotRequest{Queue: "gcp.sub.s", Name: long})
			return err
		}, codes.InvalidArgument},
		{"delete missing snapshot", func() error {
			_, err := c.q.DeleteSnapshot(ctx, &storagev1.DeleteSnapshotRequest{Name: "none"})
			return err
		}, codes.NotFound},
		{"purge log", func() error { _, err := c.q.Purge(ctx, &storagev1.PurgeRequest{Queue: "gcp.t"}); return err }, codes.FailedPrecondition},
		{"detach missing", func() error { _, err := c.q.Detach(ctx, &storagev1.DetachRequest{Name: "gcp.sub.none"}); return err }, codes.NotFound},
		{"delete log", func() error { _, err := c.q.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: "gcp.t"}); return err }, codes.FailedPrecondition},
	}
	for _, tc := range cases {
		if err := tc.call(); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}
	// Forged and malformed ack ids are per-id results, not statuses.
	ids := []string{"", "zz", "1.2.3", strings.Repeat("f", 70), "\x00.\x00.\x00"}
	r, err := c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.s", AckIds: ids})
	if err != nil || len(r.Results) != len(ids) {
		t.Fatalf("ack %v %v", r, err)
	}
	for i, res := range r.Results {
		if res != storagev1.AckResult_ACK_RESULT_INVALID {
			t.Errorf("ack id %q: %v", ids[i], res)
		}
	}
}
