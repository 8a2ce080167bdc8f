package pubsub

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

func snapProto(s *store.PubSubSnapshot) *coordinatorv1.PubSubSnapshot {
	return &coordinatorv1.PubSubSnapshot{
		Id: s.ID, SubscriptionId: s.SubscriptionID, TopicId: s.TopicID, Spec: s.Spec, CreatedMs: s.CreatedAt.UnixMilli(),
	}
}

// CreatePubSubSnapshot snapshots a subscription's queue (named by the snapshot id) and
// registers the snapshot with the subscription's topic. Locks: subscription, then
// snapshot.
func (r *Registry) CreatePubSubSnapshot(ctx context.Context, req *coordinatorv1.CreatePubSubSnapshotRequest) (*coordinatorv1.CreatePubSubSnapshotResponse, error) {
	in := req.GetSnapshot()
	id, subID := in.GetId(), in.GetSubscriptionId()
	if err := channel.ValidatePubSubID(id); err != nil {
		return nil, statusError(invalid(err))
	}
	var out *store.PubSubSnapshot
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSubscription(ctx, subID); err != nil {
			return err
		}
		sub, err := tx.Subscription(ctx, subID)
		if err != nil {
			return err
		}
		if sub.TopicID == "" {
			return fail(ErrNoTopic, "subscription %s has no topic (it was deleted)", subID)
		}
		if err := tx.LockSnapshot(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Snapshot(ctx, id); err == nil {
			return ErrSnapshotExists
		} else if !errors.Is(err, store.ErrSnapshotNotFound) {
			return err
		}
		create := &storagev1.CreateSnapshotRequest{Queue: channel.PubSubSubscription(subID), Name: id}
		_, err = r.queues.CreateSnapshot(ctx, create)
		if status.Code(err) == codes.AlreadyExists {
			// Not registered (we hold the id's lock and found no row): a leftover.
			if _, err := r.queues.DeleteSnapshot(ctx, &storagev1.DeleteSnapshotRequest{Name: id}); err != nil && status.Code(err) != codes.NotFound {
				return storageError("delete leftover snapshot "+id, err)
			}
			_, err = r.queues.CreateSnapshot(ctx, create)
		}
		if err != nil {
			return storageError("create snapshot "+id, err)
		}
		out = &store.PubSubSnapshot{ID: id, SubscriptionID: subID, TopicID: sub.TopicID, Spec: in.GetSpec()}
		return tx.InsertSnapshot(ctx, out)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.CreatePubSubSnapshotResponse{Snapshot: snapProto(out)}, nil
}

// GetPubSubSnapshot returns a snapshot.
func (r *Registry) GetPubSubSnapshot(ctx context.Context, req *coordinatorv1.GetPubSubSnapshotRequest) (*coordinatorv1.GetPubSubSnapshotResponse, error) {
	s, err := r.store.PubSubSnapshot(ctx, req.GetId())
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.GetPubSubSnapshotResponse{Snapshot: snapProto(s)}, nil
}

// UpdatePubSubSnapshot replaces a snapshot's spec.
func (r *Registry) UpdatePubSubSnapshot(ctx context.Context, req *coordinatorv1.UpdatePubSubSnapshotRequest) (*coordinatorv1.UpdatePubSubSnapshotResponse, error) {
	id := req.GetSnapshot().GetId()
	var out *store.PubSubSnapshot
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSnapshot(ctx, id); err != nil {
			return err
		}
		if err := tx.UpdateSnapshotSpec(ctx, id, req.GetSnapshot().GetSpec()); err != nil {
			return err
		}
		var err error
		out, err = tx.Snapshot(ctx, id)
		return err
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.UpdatePubSubSnapshotResponse{Snapshot: snapProto(out)}, nil
}

// ListPubSubSnapshots pages through snapshots by id.
func (r *Registry) ListPubSubSnapshots(ctx context.Context, req *coordinatorv1.ListPubSubSnapshotsRequest) (*coordinatorv1.ListPubSubSnapshotsResponse, error) {
	size, after, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusError(err)
	}
	if t := req.GetTopicId(); t != "" {
		if _, err := r.store.PubSubTopic(ctx, t); err != nil {
			return nil, statusError(err)
		}
	}
	ss, err := r.store.PubSubSnapshots(ctx, req.GetTopicId(), after, size+1)
	if err != nil {
		return nil, statusError(err)
	}
	resp := &coordinatorv1.ListPubSubSnapshotsResponse{}
	resp.Snapshots, resp.NextPageToken = pageOut(ss, size, func(s *store.PubSubSnapshot) string { return s.ID }, snapProto)
	return resp, nil
}

// DeletePubSubSnapshot deletes a snapshot's queue state (gone already with its queue is
// fine), then its row.
func (r *Registry) DeletePubSubSnapshot(ctx context.Context, req *coordinatorv1.DeletePubSubSnapshotRequest) (*coordinatorv1.DeletePubSubSnapshotResponse, error) {
	id := req.GetId()
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSnapshot(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Snapshot(ctx, id); err != nil {
			return err
		}
		if _, err := r.queues.DeleteSnapshot(ctx, &storagev1.DeleteSnapshotRequest{Name: id}); err != nil && status.Code(err) != codes.NotFound {
			return storageError("delete snapshot "+id, err)
		}
		return tx.DeleteSnapshot(ctx, id)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.DeletePubSubSnapshotResponse{}, nil
}
