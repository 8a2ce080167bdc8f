// Package mapping turns MQTT messages into Kafka records (mqtt-to-kafka) and Kafka
// records into MQTT messages (kafka-to-mqtt), as the config describes. It knows no
// network: the bridge feeds it decoded messages and records.
package mapping

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/murmur2"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/template"
)

// Errors.
var (
	// ErrTooLarge is returned for a record larger than the mapping's max-record-bytes.
	ErrTooLarge = errors.New("record too large")
	// ErrInvalidTopic is returned when a Kafka record makes no valid MQTT topic to
	// publish to (empty, wildcards, NUL, starting with $).
	ErrInvalidTopic = errors.New("invalid MQTT topic")
)

// UserProperty is one MQTT 5 user property.
type UserProperty struct{ Key, Value string }

// Message is an MQTT PUBLISH as the bridge received or will send it.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
	// ClientID and Username of the publisher (listener mode only).
	ClientID, Username string

	ContentType            string
	CorrelationData        []byte
	PayloadFormatIndicator *byte
	ResponseTopic          string
	MessageExpiryInterval  *uint32
	UserProperties         []UserProperty
}

// Record is what an mqtt-to-kafka route makes of a message.
type Record struct {
	Topic     string
	Partition int32
	Key       []byte // nil for key none
	Value     []byte
	Headers   []*storagev1.Header
	// Size is key + value + header names and values, in bytes.
	Size int
}

// Route is one compiled mqtt-to-kafka mapping.
type Route struct {
	Cfg     config.MQTTToKafka
	filters []string
	key     *template.Template
	// want is the set of headers.Names, made once rather than for every message.
	want map[string]bool
	rr   atomic.Uint32
}

// NewRoute compiles a validated mapping.
func NewRoute(c config.MQTTToKafka) (*Route, error) {
	r := &Route{Cfg: c, filters: c.Filters}
	if len(c.Headers.Names) > 0 {
		r.want = make(map[string]bool, len(c.Headers.Names))
		for _, n := range c.Headers.Names {
			r.want[n] = true
		}
	}
	switch c.Key {
	case config.KeyTopic, config.KeyClientID, config.KeyNone:
	default:
		t, err := template.Compile(c.Key, template.MQTT)
		if err != nil {
			return nil, err
		}
		r.key = t
	}
	return r, nil
}

// Filters are the route's MQTT topic filters.
func (r *Route) Filters() []string { return r.filters }

// Matches reports whether topic matches one of the route's filters.
func (r *Route) Matches(topic string) bool {
	for _, f := range r.filters {
		if MatchFilter(f, topic) {
			return true
		}
	}
	return false
}

// Build makes the record for m among partitions partitions (≥ 1). ErrTooLarge when
// it exceeds max-record-bytes.
func (r *Route) Build(m *Message, partitions int32) (Record, error) {
	rec := Record{Topic: r.Cfg.KafkaTopic, Value: m.Payload}
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	switch r.Cfg.Key {
	case config.KeyTopic:
		rec.Key = []byte(m.Topic)
	case config.KeyClientID:
		rec.Key = []byte(m.ClientID)
	case config.KeyNone:
	default:
		rec.Key = []byte(r.key.ExpandMQTT(m.Topic, m.ClientID))
	}
	rec.Headers = r.headers(m)
	rec.Size = len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		rec.Size += len(h.Key) + len(h.Value)
	}
	if r.Cfg.MaxRecordBytes > 0 && rec.Size > r.Cfg.MaxRecordBytes {
		return rec, fmt.Errorf("%w: %d bytes, max-record-bytes of %q is %d", ErrTooLarge, rec.Size, r.Cfg.ID, r.Cfg.MaxRecordBytes)
	}
	if partitions < 1 {
		partitions = 1
	}
	if r.Cfg.PartitionStrategy == config.KeyBased && rec.Key != nil {
		rec.Partition = murmur2.Partition(rec.Key, partitions)
	} else {
		rec.Partition = int32((r.rr.Add(1) - 1) % uint32(partitions))
	}
	return rec, nil
}

// MetadataHeaders are every metadata header of m in the bridge's order, then its user
// properties, each its own header, in order, repeats kept.
func MetadataHeaders(m *Message) []*storagev1.Header {
	return appendHeaders(nil, m, func(string) bool { return true }, true)
}

func (r *Route) headers(m *Message) []*storagev1.Header {
	h := r.Cfg.Headers
	var out []*storagev1.Header
	switch {
	case h.All:
		out = MetadataHeaders(m)
	case r.want != nil:
		out = appendHeaders(nil, m, func(n string) bool { return r.want[n] }, r.want[config.UserProperties])
	}
	for _, f := range h.Fixed {
		out = append(out, &storagev1.Header{Key: f.Name, Value: []byte(f.Value)})
	}
	return out
}

// Header values every record of a QoS or retain flag shares (read only: a record's
// headers are only ever marshalled), so that they are not made for every message.
var (
	qosValues   = [3][]byte{[]byte("0"), []byte("1"), []byte("2")}
	retainTrue  = []byte("true")
	retainFalse = []byte("false")
)

func appendHeaders(out []*storagev1.Header, m *Message, want func(string) bool, users bool) []*storagev1.Header {
	add := func(k string, v []byte) {
		if want(k) {
			out = append(out, &storagev1.Header{Key: k, Value: v})
		}
	}
	add(config.HeaderTopic, []byte(m.Topic))
	add(config.HeaderQoS, qosValues[min(m.QoS, 2)])
	retain := retainFalse
	if m.Retain {
		retain = retainTrue
	}
	add(config.HeaderRetain, retain)
	if m.ClientID != "" {
		add(config.HeaderClientID, []byte(m.ClientID))
	}
	if m.Username != "" {
		add(config.HeaderUsername, []byte(m.Username))
	}
	if m.ContentType != "" {
		add(config.HeaderContentType, []byte(m.ContentType))
	}
	if m.CorrelationData != nil {
		add(config.HeaderCorrelationData, m.CorrelationData)
	}
	if m.PayloadFormatIndicator != nil {
		add(config.HeaderPayloadFormatIndicator, []byte(strconv.Itoa(int(*m.PayloadFormatIndicator))))
	}
	if m.ResponseTopic != "" {
		add(config.HeaderResponseTopic, []byte(m.ResponseTopic))
	}
	if m.MessageExpiryInterval != nil {
		add(config.HeaderMessageExpiryInterval, []byte(strconv.FormatUint(uint64(*m.MessageExpiryInterval), 10)))
	}
	if users {
		for _, u := range m.UserProperties {
			k := u.Key
			if strings.HasPrefix(k, "mqtt-") {
				k = config.UserPropertyPrefix + k
			}
			// []byte of an empty string is empty, not nil: an empty user property is an
			// empty header, never a null one.
			out = append(out, &storagev1.Header{Key: k, Value: []byte(u.Value)})
		}
	}
	return out
}

// MatchFilter reports whether an MQTT topic matches a filter ([MQTT-4.7]): + is one
// level, # the rest (including the parent level), and a topic starting with $ is not
// matched by a wildcard in the first level. $share/<group>/ is stripped.
func MatchFilter(filter, topic string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			filter = rest[i+1:]
		}
	}
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore || !tmore {
			if !fmore && !tmore {
				return true
			}
			// "a/#" matches "a".
			return !tmore && fmore && frest == "#"
		}
		filter, topic = frest, trest
	}
}
