package bridge

// Client events of the listener (listener.events.enabled): each connection,
// disconnection, subscription and unsubscription is published, QoS 0 and not
// retained, on $events/client/<client id>/<event> as JSON. A topic starting with $
// is not matched by a filter starting with a wildcard ([MQTT-4.7.2-1]): a client sees
// them by subscribing to $events/#. mqtt-to-kafka mappings of source listener whose
// filters match an event take it as they take a client's publish.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// eventsPrefix begins every event topic.
const eventsPrefix = "$events/client/"

// eventQueue bounds the events waiting to be published; a hook waits for room.
const eventQueue = 4096

// event is the JSON payload of an event.
type event struct {
	Event    string `json:"event"`
	Time     string `json:"time"`
	ClientID string `json:"clientid"`
	Username string `json:"username"`
	Remote   string `json:"remote"`
	// Protocol is the MQTT protocol level: 3 (3.1), 4 (3.1.1), 5.
	Protocol byte `json:"protocol"`
	// Reason: why a client disconnected ("" when it sent DISCONNECT 0x00).
	Reason        string        `json:"reason,omitempty"`
	CleanStart    *bool         `json:"clean_start,omitempty"`
	KeepAlive     *uint16       `json:"keepalive,omitempty"`
	Subscriptions []eventFilter `json:"subscriptions,omitempty"`
	Filters       []string      `json:"filters,omitempty"`
}

// eventFilter is one filter of a SUBSCRIBE with the code it was granted (0, 1, 2 the
// QoS, 0x80 and up a refusal).
type eventFilter struct {
	Filter string `json:"filter"`
	Code   byte   `json:"code"`
}

// eventTopicEscaper keeps a client id one topic level: /, + and # (and %) are
// percent-encoded.
var eventTopicEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "+", "%2B", "#", "%23")

// eventsHook publishes the listener's client events, in the order they happen, from
// one goroutine.
type eventsHook struct {
	mqtt.HookBase
	l     *listener
	queue chan event
}

func newEventsHook(l *listener) *eventsHook {
	return &eventsHook{l: l, queue: make(chan event, eventQueue)}
}

func (h *eventsHook) ID() string { return "tributary-events" }

func (h *eventsHook) Provides(b byte) bool {
	return b == mqtt.OnSessionEstablished || b == mqtt.OnDisconnect || b == mqtt.OnSubscribed || b == mqtt.OnUnsubscribed
}

func (h *eventsHook) base(name string, cl *mqtt.Client) event {
	return event{
		Event: name, Time: time.Now().UTC().Format(time.RFC3339Nano), ClientID: cl.ID,
		Username: string(cl.Properties.Username), Remote: cl.Net.Remote, Protocol: cl.Properties.ProtocolVersion,
	}
}

func (h *eventsHook) put(e event) {
	select {
	case h.queue <- e:
	case <-h.l.b.ctx.Done():
	}
}

// OnSessionEstablished: connected, after the CONNACK.
func (h *eventsHook) OnSessionEstablished(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	e := h.base("connected", cl)
	clean, ka := pk.Connect.Clean, pk.Connect.Keepalive
	e.CleanStart, e.KeepAlive = &clean, &ka
	h.put(e)
}

// OnDisconnect: disconnected, with the reason (the error that ended the connection).
func (h *eventsHook) OnDisconnect(cl *mqtt.Client, err error, _ bool) {
	if cl.Net.Inline || cl.Net.Conn == nil {
		return
	}
	e := h.base("disconnected", cl)
	if err == nil {
		err = cl.StopCause()
	}
	if err != nil && !errors.Is(err, packets.CodeDisconnect) && !errors.Is(err, io.EOF) {
		e.Reason = err.Error()
	}
	h.put(e)
}

// OnSubscribed: subscribed, each filter with its granted code.
func (h *eventsHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	if cl.Net.Inline {
		return
	}
	e := h.base("subscribed", cl)
	for i, f := range pk.Filters {
		ef := eventFilter{Filter: f.Filter}
		if i < len(codes) {
			ef.Code = codes[i]
		}
		e.Subscriptions = append(e.Subscriptions, ef)
	}
	h.put(e)
}

// OnUnsubscribed: unsubscribed, with the filters, for an UNSUBSCRIBE (not for the
// library's removing the subscriptions of a session that ended).
func (h *eventsHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline || cl.Closed() {
		return
	}
	e := h.base("unsubscribed", cl)
	for _, f := range pk.Filters {
		e.Filters = append(e.Filters, f.Filter)
	}
	h.put(e)
}

// run publishes the queued events until ctx ends: to the listener's subscribers,
// and, stored, to the mappings whose filters match the event's topic.
func (h *eventsHook) run(ctx context.Context) {
	for {
		var e event
		select {
		case e = <-h.queue:
		case <-ctx.Done():
			return
		}
		payload, err := json.Marshal(e)
		if err != nil {
			continue
		}
		topic := eventsPrefix + eventTopicEscaper.Replace(e.ClientID) + "/" + e.Event
		h.store(ctx, topic, payload, e)
		if err := h.l.srv.Publish(topic, payload, false, 0); err != nil {
			h.l.log.Warn("event not published", zap.String("topic", topic), zap.Error(err))
		}
	}
}

// store appends the event to the mappings that take its topic (before it is
// published, so that what a subscriber saw is stored).
func (h *eventsHook) store(ctx context.Context, topic string, payload []byte, e event) {
	var routes []*mapping.Route
	for _, r := range h.l.routes {
		if r.Matches(topic) {
			routes = append(routes, r)
		}
	}
	if len(routes) == 0 {
		return
	}
	m := &mapping.Message{Topic: topic, Payload: payload, ClientID: e.ClientID, Username: e.Username, ContentType: "application/json"}
	ctx, cancel := context.WithTimeout(ctx, h.l.b.cfg.StoreTimeout)
	defer cancel()
	groups, _, err := h.l.b.build(ctx, []*mapping.Message{m}, [][]*mapping.Route{routes}, []time.Time{time.Now()})
	if err == nil {
		err = h.l.b.appendGroups(ctx, groups)
	}
	if err != nil {
		h.l.log.Warn("event not stored", zap.String("topic", topic), zap.Error(err))
	}
}
