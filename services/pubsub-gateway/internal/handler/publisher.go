package handler

import (
	"context"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tributary/tributary/libs/pubsubspec"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Topic message retention bounds (Google: 10 minutes to 31 days).
const (
	minTopicRetention = 10 * time.Minute
	maxRetention      = 31 * 24 * time.Hour
)

// topicUpdatable lists the Topic fields UpdateTopic may change.
var topicUpdatable = map[string]bool{
	"labels": true, "message_storage_policy": true, "kms_key_name": true, "schema_settings": true,
	"schema_settings.schema": true, "schema_settings.encoding": true,
	"schema_settings.first_revision_id": true, "schema_settings.last_revision_id": true,
	"message_retention_duration": true, "ingestion_data_source_settings": true, "message_transforms": true,
}

// Publisher serves google.pubsub.v1.Publisher: topics, Publish, and the schema
// settings of topics (schema_topic.go).
type Publisher struct {
	pubsubpb.UnimplementedPublisherServer
	*registry
	store storagev1.StorageServiceClient
}

func newPublisher(r *registry, d Deps) *Publisher {
	return &Publisher{registry: r, store: d.Storage}
}

// CreateTopic registers a topic and its log gcp.<id>; schema settings are checked as
// Google does (checkSchemaSettings).
func (h *Publisher) CreateTopic(ctx context.Context, t *pubsubpb.Topic) (*pubsubpb.Topic, error) {
	r, err := parseName(t.GetName(), collTopics)
	if err != nil {
		return nil, err
	}
	spec := proto.Clone(t).(*pubsubpb.Topic)
	spec.State = pubsubpb.Topic_ACTIVE
	cfg, err := topicChannelConfig(spec)
	if err != nil {
		return nil, err
	}
	schemaID, err := h.checkSchemaSettings(ctx, spec.GetSchemaSettings())
	if err != nil {
		return nil, err
	}
	b, _ := proto.Marshal(spec)
	if _, err := h.reg.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{
		Topic: &coordinatorv1.PubSubTopic{Id: r.id, Spec: b, SchemaId: schemaID}, ChannelConfig: cfg,
	}); err != nil {
		return nil, topicSchemaError(ctx, err)
	}
	h.forget(r.id, "")
	return spec, nil
}

// topicChannelConfig validates a topic's labels and retention and returns the config
// of its log (pubsubspec.TopicChannelConfig, which the coordinator also rebuilds lost
// logs with).
func topicChannelConfig(t *pubsubpb.Topic) (*storagev1.ChannelConfig, error) {
	if err := validateLabels(t.GetLabels()); err != nil {
		return nil, err
	}
	if d := t.GetMessageRetentionDuration(); d != nil && (d.CheckValid() != nil || d.AsDuration() < minTopicRetention || d.AsDuration() > maxRetention) {
		return nil, invalid("message_retention_duration out of bounds: it must be between 10 minutes and 31 days")
	}
	return pubsubspec.TopicChannelConfig(t), nil
}

// loadTopic returns a topic as stored (with its name) and the id of its schema in the
// registry ("" when none, or once the schema was deleted).
func (h *Publisher) loadTopic(ctx context.Context, name string) (resource, *pubsubpb.Topic, string, error) {
	r, err := parseName(name, collTopics)
	if err != nil {
		return r, nil, "", err
	}
	resp, err := h.reg.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: r.id})
	if err != nil {
		return r, nil, "", backendError(ctx, err, msgTopicNotFound)
	}
	t := &pubsubpb.Topic{}
	if err := proto.Unmarshal(resp.GetTopic().GetSpec(), t); err != nil {
		return r, nil, "", backendError(ctx, err, "")
	}
	t.Name = r.name(collTopics)
	return r, t, resp.GetTopic().GetSchemaId(), nil
}

// GetTopic returns a topic.
func (h *Publisher) GetTopic(ctx context.Context, req *pubsubpb.GetTopicRequest) (*pubsubpb.Topic, error) {
	_, t, schemaID, err := h.loadTopic(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	if err := h.showSchemaSettings(ctx, t, schemaID); err != nil {
		return nil, err
	}
	return t, nil
}

// UpdateTopic changes the fields named in update_mask (required, non-empty).
func (h *Publisher) UpdateTopic(ctx context.Context, req *pubsubpb.UpdateTopicRequest) (*pubsubpb.Topic, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid("The update_mask in the UpdateTopicRequest must be set, and must be non-empty.")
	}
	for _, p := range paths {
		if !topicUpdatable[p] {
			return nil, invalid("Invalid update_mask provided in the UpdateTopicRequest: the '%s' field cannot be updated.", p)
		}
	}
	if req.GetTopic() == nil {
		return nil, invalid("The topic in the UpdateTopicRequest must be set.")
	}
	r, cur, schemaID, err := h.loadTopic(ctx, req.GetTopic().GetName())
	if err != nil {
		return nil, err
	}
	in := req.GetTopic()
	var mask []string
	schemaChanged := false
	for _, p := range paths {
		if field, ok := strings.CutPrefix(p, "schema_settings."); ok {
			schemaChanged = true
			if cur.SchemaSettings == nil {
				cur.SchemaSettings = &pubsubpb.SchemaSettings{}
			}
			setSchemaSetting(cur.SchemaSettings, in.GetSchemaSettings(), field)
			continue
		}
		switch p {
		case "labels":
			cur.Labels = in.GetLabels()
		case "message_storage_policy":
			cur.MessageStoragePolicy = in.GetMessageStoragePolicy()
		case "kms_key_name":
			cur.KmsKeyName = in.GetKmsKeyName()
		case "schema_settings":
			cur.SchemaSettings, schemaChanged = in.GetSchemaSettings(), true
		case "message_retention_duration":
			cur.MessageRetentionDuration = in.GetMessageRetentionDuration()
			mask = []string{"retention_ms"}
		case "ingestion_data_source_settings":
			cur.IngestionDataSourceSettings = in.GetIngestionDataSourceSettings()
		case "message_transforms":
			cur.MessageTransforms = in.GetMessageTransforms()
		}
	}
	cfg, err := topicChannelConfig(cur)
	if err != nil {
		return nil, err
	}
	if schemaChanged {
		if schemaID, err = h.checkSchemaSettings(ctx, cur.GetSchemaSettings()); err != nil {
			return nil, err
		}
	}
	b, _ := proto.Marshal(cur)
	if _, err := h.reg.UpdatePubSubTopic(ctx, &coordinatorv1.UpdatePubSubTopicRequest{
		Topic: &coordinatorv1.PubSubTopic{Id: r.id, Spec: b, SchemaId: schemaID}, ChannelConfig: cfg, ChannelConfigMask: mask,
	}); err != nil {
		return nil, topicSchemaError(ctx, err)
	}
	h.forget(r.id, "")
	if err := h.showSchemaSettings(ctx, cur, schemaID); err != nil {
		return nil, err
	}
	return cur, nil
}

// setSchemaSetting copies one field of SchemaSettings (an update_mask path below
// schema_settings) from in to cur.
func setSchemaSetting(cur, in *pubsubpb.SchemaSettings, field string) {
	switch field {
	case "schema":
		cur.Schema = in.GetSchema()
	case "encoding":
		cur.Encoding = in.GetEncoding()
	case "first_revision_id":
		cur.FirstRevisionId = in.GetFirstRevisionId()
	case "last_revision_id":
		cur.LastRevisionId = in.GetLastRevisionId()
	}
}

// ListTopics pages through the project's topics (ids are global: every topic).
func (h *Publisher) ListTopics(ctx context.Context, req *pubsubpb.ListTopicsRequest) (*pubsubpb.ListTopicsResponse, error) {
	project, err := parseProject(req.GetProject())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.reg.ListPubSubTopics(ctx, &coordinatorv1.ListPubSubTopicsRequest{PageSize: req.GetPageSize(), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, backendError(ctx, err, "")
	}
	out := &pubsubpb.ListTopicsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, t := range resp.GetTopics() {
		spec := &pubsubpb.Topic{}
		if err := proto.Unmarshal(t.GetSpec(), spec); err != nil {
			return nil, backendError(ctx, err, "")
		}
		spec.Name = resource{project: project, id: t.GetId()}.name(collTopics)
		if err := h.showSchemaSettings(ctx, spec, t.GetSchemaId()); err != nil {
			return nil, err
		}
		out.Topics = append(out.Topics, spec)
	}
	return out, nil
}

// ListTopicSubscriptions pages through the names of a topic's subscriptions.
func (h *Publisher) ListTopicSubscriptions(ctx context.Context, req *pubsubpb.ListTopicSubscriptionsRequest) (*pubsubpb.ListTopicSubscriptionsResponse, error) {
	r, err := parseName(req.GetTopic(), collTopics)
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.reg.ListPubSubSubscriptions(ctx, &coordinatorv1.ListPubSubSubscriptionsRequest{
		TopicId: r.id, PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, backendError(ctx, err, msgTopicNotFound)
	}
	out := &pubsubpb.ListTopicSubscriptionsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, s := range resp.GetSubscriptions() {
		out.Subscriptions = append(out.Subscriptions, resource{project: r.project, id: s.GetId()}.name(collSubscriptions))
	}
	return out, nil
}

// ListTopicSnapshots pages through the names of a topic's snapshots.
func (h *Publisher) ListTopicSnapshots(ctx context.Context, req *pubsubpb.ListTopicSnapshotsRequest) (*pubsubpb.ListTopicSnapshotsResponse, error) {
	r, err := parseName(req.GetTopic(), collTopics)
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.reg.ListPubSubSnapshots(ctx, &coordinatorv1.ListPubSubSnapshotsRequest{
		TopicId: r.id, PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, backendError(ctx, err, msgTopicNotFound)
	}
	out := &pubsubpb.ListTopicSnapshotsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, s := range resp.GetSnapshots() {
		out.Snapshots = append(out.Snapshots, resource{project: r.project, id: s.GetId()}.name(collSnapshots))
	}
	return out, nil
}

// DeleteTopic unregisters a topic and deletes its log; its subscriptions stay, with
// topic "_deleted-topic_".
func (h *Publisher) DeleteTopic(ctx context.Context, req *pubsubpb.DeleteTopicRequest) (*emptypb.Empty, error) {
	r, err := parseName(req.GetTopic(), collTopics)
	if err != nil {
		return nil, err
	}
	if _, err := h.reg.DeletePubSubTopic(ctx, &coordinatorv1.DeletePubSubTopicRequest{Id: r.id}); err != nil {
		return nil, backendError(ctx, err, msgTopicNotFound)
	}
	h.forget(r.id, "")
	return &emptypb.Empty{}, nil
}

// DetachSubscription detaches a subscription: its backlog is dropped, and pulls fail
// with FAILED_PRECONDITION.
func (h *Publisher) DetachSubscription(ctx context.Context, req *pubsubpb.DetachSubscriptionRequest) (*pubsubpb.DetachSubscriptionResponse, error) {
	r, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	if _, err := h.reg.DetachPubSubSubscription(ctx, &coordinatorv1.DetachPubSubSubscriptionRequest{Id: r.id}); err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	h.forget("", r.id)
	return &pubsubpb.DetachSubscriptionResponse{}, nil
}
