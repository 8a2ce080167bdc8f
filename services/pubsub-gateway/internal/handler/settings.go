package handler

import (
	"context"
	"net/url"
	"time"
	"unicode"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/pubsubspec"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Subscription bounds and defaults (Google's pubsub.proto comments).
const (
	defaultAckDeadline   = 10
	minAckDeadline       = 10
	maxAckDeadline       = 600
	defaultSubRetention  = 7 * 24 * time.Hour
	minSubRetention      = 10 * time.Minute
	defaultExpiration    = 31 * 24 * time.Hour
	minExpiration        = 24 * time.Hour
	maxFilterBytes       = 256
	defaultMaxDeliveries = 5
	minMaxDeliveries     = 5
	maxMaxDeliveries     = 100
	defaultMinBackoff    = 10 * time.Second
	defaultMaxBackoff    = 600 * time.Second
	maxBackoff           = 600 * time.Second
	deadLetterSourceTime = pubsubspec.AttrDeadLetterSourceTime
)

// subUpdatable lists the Subscription fields UpdateSubscription may change;
// subImmutable those it refuses by name.
var (
	subUpdatable = map[string]bool{
		"ack_deadline_seconds": true, "push_config": true, "message_retention_duration": true,
		"retain_acked_messages": true, "labels": true, "expiration_policy": true,
		"dead_letter_policy": true, "retry_policy": true, "enable_exactly_once_delivery": true,
		"bigquery_config": true, "cloud_storage_config": true, "message_transforms": true,
	}
	subImmutable = map[string]bool{"filter": true, "topic": true, "enable_message_ordering": true, "name": true}
)

// normalizeSub validates a subscription's settings and fills Google's defaults, in
// place. sub is the subscription's resource, topic its topic's.
func normalizeSub(s *pubsubpb.Subscription, sub resource) error {
	s.Name = sub.name(collSubscriptions)
	if err := validateLabels(s.GetLabels()); err != nil {
		return err
	}
	switch d := s.GetAckDeadlineSeconds(); {
	case d == 0:
		s.AckDeadlineSeconds = defaultAckDeadline
	case d < minAckDeadline || d > maxAckDeadline:
		return invalid("ack_deadline_secs out of bounds: %d, it must be between %d and %d", d, minAckDeadline, maxAckDeadline)
	}
	if d := s.GetMessageRetentionDuration(); d == nil {
		s.MessageRetentionDuration = durationpb.New(defaultSubRetention)
	} else if d.CheckValid() != nil || d.AsDuration() < minSubRetention || d.AsDuration() > maxRetention {
		return invalid("message_retention_duration out of bounds: it must be between 10 minutes and 31 days")
	}
	if s.ExpirationPolicy == nil {
		s.ExpirationPolicy = &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(defaultExpiration)}
	} else if ttl := s.ExpirationPolicy.GetTtl(); ttl != nil {
		if ttl.CheckValid() != nil || ttl.AsDuration() < minExpiration {
			return invalid("Invalid expiration_policy.ttl: it must be at least 1 day")
		}
		if ttl.AsDuration() < s.GetMessageRetentionDuration().AsDuration() {
			return invalid("Invalid expiration_policy.ttl: it must not be shorter than message_retention_duration")
		}
	}
	if len(s.GetFilter()) > maxFilterBytes {
		return invalid("Invalid filter: it is %d bytes, longer than %d", len(s.GetFilter()), maxFilterBytes)
	}
	if err := validateFilter(s.GetFilter()); err != nil {
		return err
	}
	if p := s.GetDeadLetterPolicy(); p != nil {
		if p.GetDeadLetterTopic() == "" {
			// As the emulator answers a policy without a topic (Google's docs are silent).
			return status.Error(codes.NotFound, msgDeadLetterNotFound)
		}
		if _, err := parseName(p.GetDeadLetterTopic(), collTopics); err != nil {
			return invalid("Invalid dead_letter_policy.dead_letter_topic: %s", p.GetDeadLetterTopic())
		}
		switch n := p.GetMaxDeliveryAttempts(); {
		case n == 0:
			p.MaxDeliveryAttempts = defaultMaxDeliveries
		case n < minMaxDeliveries:
			return status.Errorf(codes.OutOfRange, "The value for max_delivery_attempts is too small. You passed %d in the request, but the minimum value is %d.", n, minMaxDeliveries)
		case n > maxMaxDeliveries:
			return status.Errorf(codes.OutOfRange, "The value for max_delivery_attempts is too large. You passed %d in the request, but the maximum value is %d.", n, maxMaxDeliveries)
		}
	}
	if p := s.GetRetryPolicy(); p != nil {
		if p.MinimumBackoff == nil {
			p.MinimumBackoff = durationpb.New(defaultMinBackoff)
		}
		if p.MaximumBackoff == nil {
			p.MaximumBackoff = durationpb.New(defaultMaxBackoff)
		}
		lo, hi := p.GetMinimumBackoff(), p.GetMaximumBackoff()
		if lo.CheckValid() != nil || hi.CheckValid() != nil || lo.AsDuration() < 0 || hi.AsDuration() > maxBackoff || lo.AsDuration() > hi.AsDuration() {
			return invalid("Invalid retry_policy: minimum_backoff and maximum_backoff must be between 0 and 600 seconds, minimum not above maximum")
		}
	}
	if pc := s.GetPushConfig(); pc != nil && pc.GetPushEndpoint() == "" && (pc.GetAttributes() != nil || pc.GetOidcToken() != nil || pc.GetWrapper() != nil) {
		return invalid("Invalid push_config: push_endpoint is empty")
	} else if ep := pc.GetPushEndpoint(); ep != "" && !validPushEndpoint(ep) {
		// As the emulator (Google also demands https): the pusher could never deliver to it.
		return invalid("Unsupported push_endpoint: %s", ep)
	}
	s.State = pubsubpb.Subscription_ACTIVE
	return nil
}

// Label limits (Google's "Requirements for labels"; the emulator checks none).
const (
	maxLabels   = 64
	maxLabelLen = 63
)

// validateLabels checks a resource's labels as Google does: at most 64; keys 1..63
// characters starting with a lowercase letter, values 0..63; both only lowercase
// letters (international ones too), digits, "_" and "-".
func validateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid("Too many labels: %d, at most %d are allowed.", len(labels), maxLabels)
	}
	for k, v := range labels {
		if k == "" || !labelText(k) || !labelLetter([]rune(k)[0]) {
			return invalid("Invalid label key %q: it must be 1 to %d lowercase letters, digits, '_' or '-', starting with a letter.", k, maxLabelLen)
		}
		if !labelText(v) {
			return invalid("Invalid label value %q for key %q: it must be at most %d lowercase letters, digits, '_' or '-'.", v, k, maxLabelLen)
		}
	}
	return nil
}

func labelText(s string) bool {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > maxLabelLen {
		return false
	}
	for _, r := range s {
		if !(labelLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// labelLetter: a lowercase letter, or an international letter without case (Google
// allows international characters; keys may start with one).
func labelLetter(r rune) bool {
	return unicode.IsLower(r) || (r > unicode.MaxASCII && unicode.IsLetter(r) && !unicode.IsUpper(r) && !unicode.IsTitle(r))
}

// validPushEndpoint accepts absolute http and https URLs with a host.
func validPushEndpoint(ep string) bool {
	u, err := url.Parse(ep)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// checkDeadLetterTopic answers NOT_FOUND when the dead-letter topic does not exist.
func (h *Subscriber) checkDeadLetterTopic(ctx context.Context, s *pubsubpb.Subscription) error {
	p := s.GetDeadLetterPolicy()
	if p == nil {
		return nil
	}
	r, err := parseName(p.GetDeadLetterTopic(), collTopics)
	if err != nil {
		return err
	}
	if err := h.topicExists(ctx, r.id); status.Code(err) == codes.NotFound {
		return status.Error(codes.NotFound, msgDeadLetterNotFound)
	} else if err != nil {
		return err
	}
	return nil
}

// queueConfig builds the queue's delivery settings from a normalized subscription
// (pubsubspec.QueueConfig, which the coordinator also rebuilds lost queues with).
func queueConfig(s *pubsubpb.Subscription, sub resource) *storagev1.QueueConfig {
	return pubsubspec.QueueConfig(s, sub.project, sub.id)
}
