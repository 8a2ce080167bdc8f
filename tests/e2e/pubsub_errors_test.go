package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// leakMarks are what a status message written for a Pub/Sub client never holds: the
// text of a wrapped gRPC error, the names of the backends, and channel names (a
// topic's log gcp.<id>, a subscription's queue gcp.sub.<id>).
var leakMarks = []string{"rpc error", "desc =", "storage-core", "coordinator", "postgres", "gcp."}

// wantClientError fails the test unless err has code want and a message written for
// the client (no leakMarks).
func wantClientError(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	st := status.Convert(err)
	t.Logf("%s: %v %q", what, st.Code(), st.Message())
	if st.Code() != want {
		t.Errorf("%s: code %v (%q), want %v", what, st.Code(), st.Message(), want)
	}
	msg := strings.ToLower(st.Message())
	for _, m := range leakMarks {
		if strings.Contains(msg, m) {
			t.Errorf("%s: status message %q holds %q: a backend's words, not the client's", what, st.Message(), m)
		}
	}
}

// streamingPullErr opens a StreamingPull on sub and returns the error that ends the
// stream (bound it with ctx).
func streamingPullErr(ctx context.Context, sc pubsubpb.SubscriberClient, sub string) error {
	st, err := sc.StreamingPull(ctx)
	if err != nil {
		return err
	}
	// Send answers io.EOF when the server has already ended the stream (a gateway
	// that is not ready refuses it at once); the stream's status is then Recv's.
	if err := st.Send(&pubsubpb.StreamingPullRequest{Subscription: sub, StreamAckDeadlineSeconds: 10}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

// TestPubSubErrorsForClients: every error a Pub/Sub client gets is written for it —
// Google's code, and a message that names the client's resources, never a backend's
// wrapped error or a channel name (issue 15). It drives the verbs on a detached
// subscription, missing topics, subscriptions, snapshots and schemas, existing ones
// created again, bad names and bad input, a subscription whose topic was deleted, and
// calls while storage-core, then the coordinator, are killed.
func TestPubSubErrorsForClients(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	sch := rawSchemas(t, s.PubSubAddrs[0])
	ctx := ctxT(t, 2*time.Minute)

	topic, sub, detached, orphan := psID("err"), psID("err-sub"), psID("err-det"), psID("err-orphan")
	gone := psID("err-gone")
	mustCreateTopic(t, pub, topic)
	mustCreateTopic(t, pub, gone)
	mustCreateSub(t, sc, sub, topic, nil)
	mustCreateSub(t, sc, detached, topic, nil)
	mustCreateSub(t, sc, orphan, gone, nil)
	snap := "projects/" + psProject + "/snapshots/" + psID("err-snap")
	if _, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: snap, Subscription: subPath(sub)}); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if _, err := pub.DetachSubscription(ctx, &pubsubpb.DetachSubscriptionRequest{Subscription: subPath(detached)}); err != nil {
		t.Fatalf("DetachSubscription: %v", err)
	}
	if _, err := pub.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: topicPath(gone)}); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	parent := "projects/" + psProject
	schemaID := psID("err-schema")
	avroString := &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `"string"`}
	if _, err := sch.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: schemaID, Schema: avroString}); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	missingTopic, missingSub := topicPath("missing-"+topic), subPath("missing-"+sub)
	missingSnap, missingSchema := parent+"/snapshots/missing-"+psID("s"), parent+"/schemas/missing-"+schemaID
	det := subPath(detached)

	cases := []badCase{
		// A detached subscription: it stays, but holds no messages and no queue state.
		{"Pull on a detached subscription", func() error {
			_, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: det, MaxMessages: 1})
			return err
		}, codes.FailedPrecondition},
		{"StreamingPull on a detached subscription", func() error { return streamingPullErr(ctx, sc, det) }, codes.FailedPrecondition},
		{"CreateSnapshot of a detached subscription", func() error {
			_, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: parent + "/snapshots/" + psID("err-dsnap"), Subscription: det})
			return err
		}, codes.FailedPrecondition},
		{"Seek of a detached subscription to a time", func() error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: det, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.Now()}})
			return err
		}, codes.FailedPrecondition},
		{"Seek of a detached subscription to a snapshot", func() error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: det, Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snap}})
			return err
		}, codes.FailedPrecondition},
		{"Acknowledge on a detached subscription", func() error {
			_, err := sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: det, AckIds: []string{"bogus"}})
			return err
		}, codes.FailedPrecondition},
		{"ModifyAckDeadline on a detached subscription", func() error {
			_, err := sc.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: det, AckIds: []string{"bogus"}, AckDeadlineSeconds: 10})
			return err
		}, codes.FailedPrecondition},

		// Missing resources.
		{"GetTopic missing", func() error {
			_, err := pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: missingTopic})
			return err
		}, codes.NotFound},
		{"UpdateTopic missing", func() error {
			_, err := pub.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{Topic: &pubsubpb.Topic{Name: missingTopic, Labels: map[string]string{"a": "b"}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
			return err
		}, codes.NotFound},
		{"DeleteTopic missing", func() error {
			_, err := pub.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: missingTopic})
			return err
		}, codes.NotFound},
		{"Publish to a missing topic", func() error {
			_, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: missingTopic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}})
			return err
		}, codes.NotFound},
		{"ListTopicSubscriptions of a missing topic", func() error {
			_, err := pub.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: missingTopic})
			return err
		}, codes.NotFound},
		{"ListTopicSnapshots of a missing topic", func() error {
			_, err := pub.ListTopicSnapshots(ctx, &pubsubpb.ListTopicSnapshotsRequest{Topic: missingTopic})
			return err
		}, codes.NotFound},
		{"CreateSubscription on a missing topic", func() error {
			_, err := sc.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(psID("err-s")), Topic: missingTopic})
			return err
		}, codes.NotFound},
		{"DetachSubscription missing", func() error {
			_, err := pub.DetachSubscription(ctx, &pubsubpb.DetachSubscriptionRequest{Subscription: missingSub})
			return err
		}, codes.NotFound},
		{"GetSubscription missing", func() error {
			_, err := sc.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: missingSub})
			return err
		}, codes.NotFound},
		{"UpdateSubscription missing", func() error {
			_, err := sc.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{Subscription: &pubsubpb.Subscription{Name: missingSub, AckDeadlineSeconds: 20},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ack_deadline_seconds"}}})
			return err
		}, codes.NotFound},
		{"DeleteSubscription missing", func() error {
			_, err := sc.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: missingSub})
			return err
		}, codes.NotFound},
		{"ModifyPushConfig missing", func() error {
			_, err := sc.ModifyPushConfig(ctx, &pubsubpb.ModifyPushConfigRequest{Subscription: missingSub, PushConfig: &pubsubpb.PushConfig{}})
			return err
		}, codes.NotFound},
		{"ModifyAckDeadline on a missing subscription", func() error {
			_, err := sc.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: missingSub, AckIds: []string{"bogus"}, AckDeadlineSeconds: 10})
			return err
		}, codes.NotFound},
		{"Seek of a missing subscription", func() error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: missingSub, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.Now()}})
			return err
		}, codes.NotFound},
		{"CreateSnapshot of a missing subscription", func() error {
			_, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: parent + "/snapshots/" + psID("err-msnap"), Subscription: missingSub})
			return err
		}, codes.NotFound},
		{"GetSnapshot missing", func() error {
			_, err := sc.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: missingSnap})
			return err
		}, codes.NotFound},
		{"UpdateSnapshot missing", func() error {
			_, err := sc.UpdateSnapshot(ctx, &pubsubpb.UpdateSnapshotRequest{Snapshot: &pubsubpb.Snapshot{Name: missingSnap, Labels: map[string]string{"a": "b"}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
			return err
		}, codes.NotFound},
		{"DeleteSnapshot missing", func() error {
			_, err := sc.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: missingSnap})
			return err
		}, codes.NotFound},
		{"Seek to a missing snapshot", func() error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: missingSnap}})
			return err
		}, codes.NotFound},
		{"GetSchema missing", func() error {
			_, err := sch.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: missingSchema})
			return err
		}, codes.NotFound},
		{"CommitSchema missing", func() error {
			_, err := sch.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: missingSchema, Schema: avroString})
			return err
		}, codes.NotFound},
		{"ListSchemaRevisions missing", func() error {
			_, err := sch.ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: missingSchema})
			return err
		}, codes.NotFound},
		{"RollbackSchema to a missing revision", func() error {
			_, err := sch.RollbackSchema(ctx, &pubsubpb.RollbackSchemaRequest{Name: parent + "/schemas/" + schemaID, RevisionId: "0badcafe"})
			return err
		}, codes.NotFound},
		{"DeleteSchemaRevision missing", func() error {
			_, err := sch.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: parent + "/schemas/" + schemaID + "@0badcafe"})
			return err
		}, codes.NotFound},
		{"DeleteSchema missing", func() error {
			_, err := sch.DeleteSchema(ctx, &pubsubpb.DeleteSchemaRequest{Name: missingSchema})
			return err
		}, codes.NotFound},
		{"ValidateMessage against a missing schema", func() error {
			_, err := sch.ValidateMessage(ctx, &pubsubpb.ValidateMessageRequest{Parent: parent, SchemaSpec: &pubsubpb.ValidateMessageRequest_Name{Name: missingSchema},
				Message: []byte(`"x"`), Encoding: pubsubpb.Encoding_JSON})
			return err
		}, codes.NotFound},
		{"CreateTopic with a missing schema", func() error {
			_, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(psID("err-t")), SchemaSettings: &pubsubpb.SchemaSettings{Schema: missingSchema, Encoding: pubsubpb.Encoding_JSON}})
			return err
		}, codes.NotFound},

		// Created again.
		{"CreateTopic existing", func() error {
			_, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(topic)})
			return err
		}, codes.AlreadyExists},
		{"CreateSubscription existing", func() error {
			_, err := sc.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(sub), Topic: topicPath(topic)})
			return err
		}, codes.AlreadyExists},
		{"CreateSnapshot existing", func() error {
			_, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: snap, Subscription: subPath(sub)})
			return err
		}, codes.AlreadyExists},
		{"CreateSchema existing", func() error {
			_, err := sch.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: schemaID, Schema: avroString})
			return err
		}, codes.AlreadyExists},

		// A subscription whose topic was deleted.
		{"CreateSnapshot of a subscription whose topic was deleted", func() error {
			_, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: parent + "/snapshots/" + psID("err-osnap"), Subscription: subPath(orphan)})
			return err
		}, codes.FailedPrecondition},
		{"Seek of a subscription whose topic was deleted to a snapshot", func() error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(orphan), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snap}})
			return err
		}, codes.FailedPrecondition},

		// Bad names.
		{"GetTopic bad name", func() error {
			_, err := pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + psProject + "/topics/x y"})
			return err
		}, codes.InvalidArgument},
		{"GetSnapshot bad name", func() error {
			_, err := sc.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: "snapshots/x"})
			return err
		}, codes.InvalidArgument},
		{"GetSchema bad name", func() error {
			_, err := sch.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: parent + "/schemas/a"})
			return err
		}, codes.InvalidArgument},
		{"Seek to a snapshot with a bad name", func() error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: "x"}})
			return err
		}, codes.InvalidArgument},
	}
	cases = append(cases, badInputCases(ctx, pub, sc, topic, sub)...)
	for _, tc := range cases {
		wantClientError(t, tc.name, tc.call(), tc.want)
	}
}

// TestPubSubErrorsForClientsBackendKilled: while storage-core, then also the
// coordinator, are down, every call is UNAVAILABLE with a message for the client —
// both while the gateway has not yet noticed (the call reaches the dead backend) and
// once its readiness gate refuses calls.
func TestPubSubErrorsForClientsBackendKilled(t *testing.T) {
	s, err := stack.Start(ctxT(t, 2*time.Minute), stack.Options{PubSubGateways: 1})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	sch := rawSchemas(t, s.PubSubAddrs[0])
	topic, sub := psID("errk"), psID("errk-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, nil)

	type call struct {
		name string
		do   func(ctx context.Context) error
		// coordinatorOnly: the call needs no storage-core, so it may succeed while
		// only storage-core is down and the gateway has not noticed.
		coordinatorOnly bool
	}
	calls := []call{
		{"Publish", func(ctx context.Context) error {
			_, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}})
			return err
		}, false},
		{"Pull", func(ctx context.Context) error {
			_, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 1})
			return err
		}, false},
		{"StreamingPull", func(ctx context.Context) error { return streamingPullErr(ctx, sc, subPath(sub)) }, false},
		{"Acknowledge", func(ctx context.Context) error {
			_, err := sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subPath(sub), AckIds: []string{"bogus"}})
			return err
		}, false},
		{"CreateTopic", func(ctx context.Context) error {
			_, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(psID("errk-t"))})
			return err
		}, false},
		{"CreateSnapshot", func(ctx context.Context) error {
			_, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: "projects/" + psProject + "/snapshots/" + psID("errk-snap"), Subscription: subPath(sub)})
			return err
		}, false},
		{"Seek", func(ctx context.Context) error {
			_, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.Now()}})
			return err
		}, false},
		{"ListSchemas", func(ctx context.Context) error {
			_, err := sch.ListSchemas(ctx, &pubsubpb.ListSchemasRequest{Parent: "projects/" + psProject})
			return err
		}, true},
	}
	// Each call is bounded, and the bound's DEADLINE_EXCEEDED (which clients retry too)
	// is taken as well: a StreamingPull opened before the gateway noticed rides out the
	// outage (its receive loops retry) until the client gives up.
	round := func(what string, coordinatorUp bool) {
		for _, c := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.do(ctx)
			cancel()
			if err == nil && c.coordinatorOnly && coordinatorUp {
				continue
			}
			want := codes.Unavailable
			if status.Code(err) == codes.DeadlineExceeded {
				want = codes.DeadlineExceeded
			}
			wantClientError(t, what+": "+c.name, err, want)
		}
	}
	if err := s.KillStorage(); err != nil {
		t.Fatalf("kill storage-core: %v", err)
	}
	round("storage-core killed, at once", true)
	waitUnready(t, pub, topic)
	round("storage-core killed, gateway not ready", true)
	if err := s.Kill(stack.Coordinator, syscall.SIGKILL); err != nil {
		t.Fatalf("kill coordinator: %v", err)
	}
	round("storage-core and coordinator killed", false)
}

// waitUnready polls until the gateway's readiness gate refuses calls (GetTopic, which
// needs only the coordinator, turns UNAVAILABLE).
func waitUnready(t *testing.T, pub pubsubpb.PublisherClient, topic string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := pub.GetTopic(ctxT(t, 10*time.Second), &pubsubpb.GetTopicRequest{Topic: topicPath(topic)})
		if status.Code(err) == codes.Unavailable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway still serving GetTopic 30 s after storage-core died: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
