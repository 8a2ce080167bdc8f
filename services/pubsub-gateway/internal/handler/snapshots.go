package handler

import (
	"context"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// snapshotLifetime is how long a snapshot lives (Google: up to 7 days from the oldest
// unacked message; here from its creation).
const snapshotLifetime = 7 * 24 * time.Hour

const msgSnapshotNotFound = "Snapshot does not exist"

// snapUpdatable lists the Snapshot fields UpdateSnapshot may change.
var snapUpdatable = map[string]bool{"labels": true, "expire_time": true}

func (h *Subscriber) snapshotProto(project string, s *coordinatorv1.PubSubSnapshot) (*pubsubpb.Snapshot, error) {
	spec := &pubsubpb.Snapshot{}
	if err := proto.Unmarshal(s.GetSpec(), spec); err != nil {
		return nil, backendError(context.Background(), err, "")
	}
	spec.Name = resource{project: project, id: s.GetId()}.name(collSnapshots)
	spec.Topic = resource{project: project, id: s.GetTopicId()}.name(collTopics)
	return spec, nil
}

// CreateSnapshot records a subscription's acknowledgement state.
func (h *Subscriber) CreateSnapshot(ctx context.Context, req *pubsubpb.CreateSnapshotRequest) (*pubsubpb.Snapshot, error) {
	snap, err := parseName(req.GetName(), collSnapshots)
	if err != nil {
		return nil, err
	}
	sub, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	if err := validateLabels(req.GetLabels()); err != nil {
		return nil, err
	}
	spec := &pubsubpb.Snapshot{Labels: req.GetLabels(), ExpireTime: timestamppb.New(h.now().Add(snapshotLifetime))}
	b, _ := proto.Marshal(spec)
	resp, err := h.reg.CreatePubSubSnapshot(ctx, &coordinatorv1.CreatePubSubSnapshotRequest{
		Snapshot: &coordinatorv1.PubSubSnapshot{Id: snap.id, SubscriptionId: sub.id, Spec: b},
	})
	if err != nil {
		return nil, h.onDetached(ctx, sub.id, backendError(ctx, err, msgSubNotFound))
	}
	return h.snapshotProto(snap.project, resp.GetSnapshot())
}

// GetSnapshot returns a snapshot.
func (h *Subscriber) GetSnapshot(ctx context.Context, req *pubsubpb.GetSnapshotRequest) (*pubsubpb.Snapshot, error) {
	snap, err := parseName(req.GetSnapshot(), collSnapshots)
	if err != nil {
		return nil, err
	}
	resp, err := h.reg.GetPubSubSnapshot(ctx, &coordinatorv1.GetPubSubSnapshotRequest{Id: snap.id})
	if err != nil {
		return nil, backendError(ctx, err, msgSnapshotNotFound)
	}
	return h.snapshotProto(snap.project, resp.GetSnapshot())
}

// UpdateSnapshot changes a snapshot's labels or expire time.
func (h *Subscriber) UpdateSnapshot(ctx context.Context, req *pubsubpb.UpdateSnapshotRequest) (*pubsubpb.Snapshot, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid("The update_mask in the UpdateSnapshotRequest must be set, and must be non-empty.")
	}
	for _, p := range paths {
		if !snapUpdatable[p] {
			return nil, invalid("Invalid update_mask provided in the UpdateSnapshotRequest: the '%s' field cannot be updated.", p)
		}
	}
	snap, err := parseName(req.GetSnapshot().GetName(), collSnapshots)
	if err != nil {
		return nil, err
	}
	cur, err := h.reg.GetPubSubSnapshot(ctx, &coordinatorv1.GetPubSubSnapshotRequest{Id: snap.id})
	if err != nil {
		return nil, backendError(ctx, err, msgSnapshotNotFound)
	}
	spec := &pubsubpb.Snapshot{}
	if err := proto.Unmarshal(cur.GetSnapshot().GetSpec(), spec); err != nil {
		return nil, backendError(ctx, err, "")
	}
	for _, p := range paths {
		switch p {
		case "labels":
			if err := validateLabels(req.GetSnapshot().GetLabels()); err != nil {
				return nil, err
			}
			spec.Labels = req.GetSnapshot().GetLabels()
		case "expire_time":
			spec.ExpireTime = req.GetSnapshot().GetExpireTime()
		}
	}
	b, _ := proto.Marshal(spec)
	resp, err := h.reg.UpdatePubSubSnapshot(ctx, &coordinatorv1.UpdatePubSubSnapshotRequest{Snapshot: &coordinatorv1.PubSubSnapshot{Id: snap.id, Spec: b}})
	if err != nil {
		return nil, backendError(ctx, err, msgSnapshotNotFound)
	}
	return h.snapshotProto(snap.project, resp.GetSnapshot())
}

// ListSnapshots pages through every snapshot (ids are global).
func (h *Subscriber) ListSnapshots(ctx context.Context, req *pubsubpb.ListSnapshotsRequest) (*pubsubpb.ListSnapshotsResponse, error) {
	project, err := parseProject(req.GetProject())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.reg.ListPubSubSnapshots(ctx, &coordinatorv1.ListPubSubSnapshotsRequest{PageSize: req.GetPageSize(), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, backendError(ctx, err, "")
	}
	out := &pubsubpb.ListSnapshotsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, s := range resp.GetSnapshots() {
		p, err := h.snapshotProto(project, s)
		if err != nil {
			return nil, err
		}
		out.Snapshots = append(out.Snapshots, p)
	}
	return out, nil
}

// DeleteSnapshot deletes a snapshot.
func (h *Subscriber) DeleteSnapshot(ctx context.Context, req *pubsubpb.DeleteSnapshotRequest) (*emptypb.Empty, error) {
	snap, err := parseName(req.GetSnapshot(), collSnapshots)
	if err != nil {
		return nil, err
	}
	if _, err := h.reg.DeletePubSubSnapshot(ctx, &coordinatorv1.DeletePubSubSnapshotRequest{Id: snap.id}); err != nil {
		return nil, backendError(ctx, err, msgSnapshotNotFound)
	}
	return &emptypb.Empty{}, nil
}

// Seek moves a subscription's acknowledgement state to a time (messages published
// before it become acked, the rest unacked, as far as retention allows; acked ones
// only when retained: with retain_acked_messages, or when the topic has
// message_retention_duration, as Google's Seek restores only retained messages) or to a
// snapshot of the same topic, taken of this subscription or of another one (also a
// deleted one): storage-core applies another queue's snapshot by topic sequences, to
// the messages this subscription still holds, as the official emulator does. A
// snapshot of another topic, or of an earlier topic of the same name, is
// FAILED_PRECONDITION (Google: "The snapshot's topic must be the same as that of the
// provided subscription").
func (h *Subscriber) Seek(ctx context.Context, req *pubsubpb.SeekRequest) (*pubsubpb.SeekResponse, error) {
	sub, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	seek := &storagev1.SeekRequest{Queue: channel.PubSubSubscription(sub.id)}
	switch t := req.GetTarget().(type) {
	case *pubsubpb.SeekRequest_Time:
		if err := t.Time.CheckValid(); err != nil {
			return nil, invalid("Invalid time in the SeekRequest: %v", err)
		}
		// A time before 1970 is valid (Timestamp goes back to year 1) and, as Google
		// and the emulator take it, before every message; storage-core's time_ms is
		// not negative.
		seek.Target = &storagev1.SeekRequest_TimeMs{TimeMs: max(t.Time.AsTime().UnixMilli(), 0)}
		if seek.ReplayAcked, err = h.topicRetains(ctx, sub.id); err != nil {
			return nil, err
		}
	case *pubsubpb.SeekRequest_Snapshot:
		snap, err := parseName(t.Snapshot, collSnapshots)
		if err != nil {
			return nil, err
		}
		info, err := h.subscription(ctx, sub.id)
		if err != nil {
			return nil, err
		}
		sr, err := h.reg.GetPubSubSnapshot(ctx, &coordinatorv1.GetPubSubSnapshotRequest{Id: snap.id})
		if err != nil {
			return nil, backendError(ctx, err, msgSnapshotNotFound)
		}
		subTopic, _ := parseName(info.spec.GetTopic(), collTopics)
		if subTopic.id != sr.GetSnapshot().GetTopicId() {
			return nil, status.Errorf(codes.FailedPrecondition, "The subscription's topic %s is different from that of the snapshot %s; they must match in order for Seek to work.",
				info.spec.GetTopic(), resource{project: sub.project, id: sr.GetSnapshot().GetTopicId()}.name(collTopics))
		}
		seek.Target = &storagev1.SeekRequest_Snapshot{Snapshot: snap.id}
	default:
		return nil, invalid("No target was specified in the SeekRequest. Must specify either a time or a snapshot")
	}
	if _, err := h.queues.Seek(ctx, seek); err != nil {
		return nil, h.onDetached(ctx, sub.id, backendError(ctx, err, msgSubNotFound))
	}
	h.queueChanged(seek.Queue) // every lease of the queue ended
	h.touch(sub.id)
	return &pubsubpb.SeekResponse{}, nil
}

// topicRetains reports whether subscription id's topic has message retention, so a
// Seek to a time replays acked messages too (Google: topic retention lets
// subscriptions replay acked messages). Read from the registry, not the caches: the
// topic's retention may have just changed. A deleted topic retains nothing.
func (h *Subscriber) topicRetains(ctx context.Context, id string) (bool, error) {
	sr, err := h.reg.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: id})
	if err != nil {
		return false, backendError(ctx, err, msgSubNotFound)
	}
	topicID := sr.GetSubscription().GetTopicId()
	if topicID == "" {
		return false, nil
	}
	tr, err := h.reg.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: topicID})
	if status.Code(err) == codes.NotFound {
		return false, nil // deleted meanwhile
	}
	if err != nil {
		return false, backendError(ctx, err, "")
	}
	t := &pubsubpb.Topic{}
	if err := proto.Unmarshal(tr.GetTopic().GetSpec(), t); err != nil {
		return false, backendError(ctx, err, "")
	}
	return t.GetMessageRetentionDuration().AsDuration() > 0, nil
}
