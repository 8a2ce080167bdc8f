package mapping

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/template"
)

// Sink is one compiled kafka-to-mqtt mapping.
type Sink struct {
	Cfg     config.KafkaToMQTT
	topics  []*template.Template
	pattern *regexp.Regexp
	qos     byte
}

// NewSink compiles a validated mapping.
func NewSink(c config.KafkaToMQTT) (*Sink, error) {
	s := &Sink{Cfg: c, qos: byte(config.QoSOr(c.QoS, 1))}
	for _, src := range c.MQTTTopic {
		t, err := template.Compile(src, template.Kafka)
		if err != nil {
			return nil, err
		}
		s.topics = append(s.topics, t)
	}
	if c.KafkaTopicPattern != "" {
		re, err := config.CompilePattern(c.KafkaTopicPattern)
		if err != nil {
			return nil, err
		}
		s.pattern = re
	}
	return s, nil
}

// Reads reports whether the sink consumes Kafka topic t.
func (s *Sink) Reads(t string) bool {
	if s.pattern != nil {
		return s.pattern.MatchString(t) && !strings.HasPrefix(t, "_")
	}
	for _, x := range s.Cfg.KafkaTopics {
		if x == t {
			return true
		}
	}
	return false
}

// Build makes the MQTT messages for one record of Kafka topic t: one per configured
// topic, or, with from-headers and an mqtt-topic header, the original message. A
// message whose topic is invalid or starts with $, or with a property MQTT cannot
// carry (a header value that is not UTF-8 or holds a NUL, a response topic with a
// wildcard), is left out and counted in invalid.
func (s *Sink) Build(t string, rec *storagev1.Record) (out []Message, invalid int) {
	base := Message{Payload: rec.GetValue(), QoS: s.qos, Retain: s.Cfg.Retain}
	if base.Payload == nil {
		base.Payload = []byte{}
	}
	p := s.Cfg.Properties
	base.ContentType = p.ContentType
	base.ResponseTopic = p.ResponseTopic
	if p.CorrelationData != "" {
		base.CorrelationData = []byte(p.CorrelationData)
	}
	base.MessageExpiryInterval = p.MessageExpiryInterval
	base.PayloadFormatIndicator = p.PayloadFormatIndicator
	for _, u := range p.UserProperties {
		base.UserProperties = append(base.UserProperties, UserProperty{Key: u.Name, Value: u.Value})
	}
	var topic string
	if s.Cfg.FromHeaders {
		topic = Restore(&base, rec.GetHeaders())
	}
	var topics []string
	if topic != "" {
		topics = []string{topic}
	} else {
		for _, tp := range s.topics {
			topics = append(topics, tp.ExpandKafka(t, rec.GetKey()))
		}
	}
	// A string property MQTT cannot carry makes the broker end the connection (not
	// refuse the message), and the record would be retried for ever.
	propsErr := ValidateProperties(&base)
	for _, tp := range topics {
		if propsErr != nil || ValidateTopic(tp) != nil {
			invalid++
			continue
		}
		m := base
		m.Topic = tp
		out = append(out, m)
	}
	return out, invalid
}

// Restore applies the mqtt-* headers to m and returns the mqtt-topic header ("" when
// absent). Headers that are not the bridge's metadata become user properties, in order;
// a null header value becomes an empty user property value, MQTT 5 having no null
// (§1.5.7: a UTF-8 string, maybe empty).
func Restore(m *Message, hs []*storagev1.Header) string {
	var topic string
	for _, h := range hs {
		v := h.GetValue()
		switch k := h.GetKey(); k {
		case config.HeaderTopic:
			topic = string(v)
		case config.HeaderQoS:
			if q, err := strconv.Atoi(string(v)); err == nil && q >= 0 && q <= 2 {
				m.QoS = byte(q)
			}
		case config.HeaderRetain:
			if b, err := strconv.ParseBool(string(v)); err == nil {
				m.Retain = b
			}
		case config.HeaderClientID, config.HeaderUsername:
			// Who published is not part of the message.
		case config.HeaderContentType:
			m.ContentType = string(v)
		case config.HeaderCorrelationData:
			m.CorrelationData = v
		case config.HeaderPayloadFormatIndicator:
			if n, err := strconv.ParseUint(string(v), 10, 8); err == nil && n <= 1 {
				b := byte(n)
				m.PayloadFormatIndicator = &b
			}
		case config.HeaderResponseTopic:
			m.ResponseTopic = string(v)
		case config.HeaderMessageExpiryInterval:
			if n, err := strconv.ParseUint(string(v), 10, 32); err == nil {
				e := uint32(n)
				m.MessageExpiryInterval = &e
			}
		default:
			name := strings.TrimPrefix(k, config.UserPropertyPrefix)
			m.UserProperties = append(m.UserProperties, UserProperty{Key: name, Value: string(v)})
		}
	}
	return topic
}

// ValidateProperties checks the string properties of a message to publish: content
// type and user properties are MQTT strings, a response topic a topic name (no
// wildcards), correlation data at most 65535 bytes.
func ValidateProperties(m *Message) error {
	if err := config.MQTTString(m.ContentType); err != nil {
		return fmt.Errorf("content type: %w", err)
	}
	if m.ResponseTopic != "" {
		if err := config.MQTTString(m.ResponseTopic); err != nil {
			return fmt.Errorf("response topic: %w", err)
		}
		if strings.ContainsAny(m.ResponseTopic, "+#") {
			return fmt.Errorf("response topic %q contains a wildcard", m.ResponseTopic)
		}
	}
	if len(m.CorrelationData) > 65535 {
		return fmt.Errorf("correlation data longer than 65535 bytes")
	}
	for _, u := range m.UserProperties {
		if err := config.MQTTString(u.Key); err != nil {
			return fmt.Errorf("user property name: %w", err)
		}
		if err := config.MQTTString(u.Value); err != nil {
			return fmt.Errorf("user property %q: %w", u.Key, err)
		}
	}
	return nil
}

// ValidateTopic checks a topic name to publish to: 1..65535 bytes of UTF-8, no NUL, no
// wildcards, not starting with $ (the broker's own topics).
func ValidateTopic(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case len(t) > 65535:
		return fmt.Errorf("%w: longer than 65535 bytes", ErrInvalidTopic)
	case strings.HasPrefix(t, "$"):
		return fmt.Errorf("%w: %q starts with $", ErrInvalidTopic, t)
	case strings.ContainsAny(t, "+#\x00"):
		return fmt.Errorf("%w: %q contains a wildcard or NUL", ErrInvalidTopic, t)
	case !utf8.ValidString(t):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidTopic)
	}
	return nil
}
