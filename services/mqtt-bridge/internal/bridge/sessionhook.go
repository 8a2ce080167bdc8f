package bridge

// The embedded broker's storage hook: it keeps the broker's session state in the
// listener's session store (internal/sessions, which says what is kept and when it is
// durable) and gives it back at start.

import (
	"bytes"
	"errors"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/sessions"
)

// persistent reports whether cl's session outlives its connection: MQTT 5 Session
// Expiry Interval > 0, MQTT 3.1.1 Clean Session 0.
func persistent(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func clientRecord(cl *mqtt.Client) storage.Client {
	props := cl.Properties.Props.Copy(false)
	return storage.Client{
		ID: cl.ID, T: storage.ClientKey, Remote: cl.Net.Remote, Listener: cl.Net.Listener,
		Username: bytes.Clone(cl.Properties.Username), Clean: cl.Properties.Clean, ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	}
}

// subscriptionRecord is client's subscription f, granted qos, as the journal keeps it.
func subscriptionRecord(client string, f packets.Subscription, qos byte) storage.Subscription {
	return storage.Subscription{
		ID: client + ":" + f.Filter, T: storage.SubscriptionKey, Client: client, Filter: f.Filter, Qos: qos,
		Identifier: f.Identifier, NoLocal: f.NoLocal, RetainHandling: f.RetainHandling, RetainAsPublished: f.RetainAsPublished,
	}
}

func messageRecord(cl *mqtt.Client, pk packets.Packet) storage.Message {
	p := pk.Properties.Copy(false)
	return storage.Message{
		T: storage.InflightKey, Client: cl.ID, Origin: pk.Origin, FixedHeader: pk.FixedHeader, TopicName: pk.TopicName,
		Payload: pk.Payload, Created: pk.Created, PacketID: pk.PacketID,
		Properties: storage.MessageProperties{
			PayloadFormat: p.PayloadFormat, PayloadFormatFlag: p.PayloadFormatFlag, MessageExpiryInterval: p.MessageExpiryInterval,
			ContentType: p.ContentType, ResponseTopic: p.ResponseTopic, CorrelationData: p.CorrelationData,
			SubscriptionIdentifier: p.SubscriptionIdentifier, TopicAlias: p.TopicAlias, User: p.User,
		},
	}
}

// sessionHook keeps the embedded broker's session state in the session store and
// gives it back at start (mochi's storage hook interface). Without a journal it only
// ends the remembered messages of sessions that end.
type sessionHook struct {
	mqtt.HookBase
	s   *sessions.Store
	srv *mqtt.Server
	// retained: the journal keeps the retained messages (listener.retained.store file).
	retained bool
}

func (h *sessionHook) ID() string { return "tributary-sessions" }

func (h *sessionHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablish, mqtt.OnDisconnect, mqtt.OnClientExpired:
		return true
	case mqtt.OnRetainMessage, mqtt.OnRetainedExpired, mqtt.StoredRetainedMessages:
		return h.s.Journaled() && h.retained
	case mqtt.OnSessionEstablished, mqtt.OnSubscribed, mqtt.OnUnsubscribed, mqtt.OnWillSent,
		mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnPacketEncode,
		mqtt.StoredClients, mqtt.StoredSubscriptions, mqtt.StoredInflightMessages:
		return h.s.Journaled()
	}
	return false
}

// OnSessionEstablish (before the CONNACK) records a persistent session, synced. A new
// session (Session Present 0) first ends what was kept under its client id; a
// connection whose session ends with it ends the kept one.
func (h *sessionHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	present := false
	if existing, ok := h.srv.Clients.Get(cl.ID); ok {
		// mochi's inheritClientSession: the session is taken over unless either side
		// starts clean.
		present = !pk.Connect.Clean && !(existing.Properties.Clean && existing.Properties.ProtocolVersion < 5)
	}
	keep := persistent(cl)
	var rec storage.Client
	if keep && h.s.Journaled() {
		rec = clientRecord(cl)
	}
	h.s.Establish(cl.ID, present, keep, rec)
}

// OnSessionEstablished (after the broker took the earlier session over) records the
// subscriptions the session has and the store does not: those of a session that was
// not persistent until this connection (Clean Start 0 with a Session Expiry Interval
// > 0 now, 0 before). Its messages in flight were recorded as the broker sent them
// again.
func (h *sessionHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	all := cl.State.Subscriptions.GetAll()
	subs := make([]storage.Subscription, 0, len(all))
	for _, f := range all {
		subs = append(subs, subscriptionRecord(cl.ID, f, f.Qos))
	}
	h.s.AddSubscriptions(cl.ID, subs)
}

// OnDisconnect ends a session that ends with its connection, and notes when a
// persistent one went offline. A connection whose session was taken over by a newer
// one, and the sessions the broker restores at start, are left alone.
func (h *sessionHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.Net.Conn == nil || cl.Net.Inline || cl.IsTakenOver() || errors.Is(cl.StopCause(), packets.ErrSessionTakenOver) {
		return
	}
	if expire {
		h.s.EndSession(cl.ID)
		return
	}
	if h.s.Journaled() {
		h.s.Disconnected(cl.ID, clientRecord(cl))
	}
}

// OnClientExpired ends a session whose expiry interval ran out, and its subscriptions
// in the broker (which mochi would otherwise keep matching for a client it forgot).
func (h *sessionHook) OnClientExpired(cl *mqtt.Client) {
	h.s.EndSession(cl.ID)
	h.srv.UnsubscribeClient(cl)
}

// OnSubscribed records a persistent session's granted subscriptions, synced before the
// SUBACK.
func (h *sessionHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	subs := make([]storage.Subscription, 0, len(pk.Filters))
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		subs = append(subs, subscriptionRecord(cl.ID, f, codes[i]))
	}
	h.s.Subscribed(cl.ID, subs)
}

// OnUnsubscribed forgets a session's subscriptions, synced before the UNSUBACK.
func (h *sessionHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	filters := make([]string, len(pk.Filters))
	for i, f := range pk.Filters {
		filters[i] = f.Filter
	}
	h.s.Unsubscribed(cl.ID, filters)
}

// OnRetainMessage records the broker's retained message for a topic (r -1: cleared).
func (h *sessionHook) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	if r == -1 {
		h.s.ClearRetained(pk.TopicName)
		return
	}
	m := messageRecord(cl, pk)
	m.T, m.Client, m.PacketID = storage.RetainedKey, "", 0
	h.s.Retain(m)
}

// OnRetainedExpired forgets a retained message whose expiry passed.
func (h *sessionHook) OnRetainedExpired(topic string) { h.s.ClearRetained(topic) }

// OnWillSent records that a session's will was published (it is not sent again).
func (h *sessionHook) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	h.s.WillSent(cl.ID, storage.ClientWill(cl.Properties.Will))
}

// OnQosPublish records a QoS 1/2 flow of a persistent session: a message to the
// client (queued or sent), or the PUBREC of a QoS 2 message from it. The PUBACK of a
// QoS 1 message from it is not recorded: it ends its flow at once (its resend is
// recognised by the remembered messages instead).
func (h *sessionHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if pk.FixedHeader.Type == packets.Puback {
		return
	}
	h.putInflight(cl, pk)
}

func (h *sessionHook) putInflight(cl *mqtt.Client, pk packets.Packet) {
	h.s.PutInflight(cl.ID, func() storage.Message { return messageRecord(cl, pk) })
}

// OnPacketEncode records the PUBREL the broker sends for a QoS 2 message to a
// persistent session (mochi keeps it in flight without telling the storage hooks), so
// that it, not the PUBLISH, is sent again after a restart.
func (h *sessionHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Pubrel && pk.ReasonCode < packets.ErrUnspecifiedError.Code && !cl.Net.Inline {
		h.putInflight(cl, pk)
	}
	return pk
}

// OnQosComplete forgets a finished QoS 1/2 flow.
func (h *sessionHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	h.s.InflightDone(cl.ID, pk.PacketID)
}

// OnQosDropped forgets a QoS 1/2 flow the broker gave up (refused, expired).
func (h *sessionHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) { h.OnQosComplete(cl, pk) }

// StoredClients gives the broker the kept sessions at start, each with what remains
// of its expiry interval.
func (h *sessionHook) StoredClients() ([]storage.Client, error) { return h.s.Clients(), nil }

// StoredSubscriptions gives the broker the kept sessions' subscriptions at start.
func (h *sessionHook) StoredSubscriptions() ([]storage.Subscription, error) {
	return h.s.Subscriptions(), nil
}

// StoredInflightMessages gives the broker the kept sessions' QoS 1/2 flows at start.
func (h *sessionHook) StoredInflightMessages() ([]storage.Message, error) {
	return h.s.Inflight(), nil
}

// StoredRetainedMessages gives the broker its retained messages at start.
func (h *sessionHook) StoredRetainedMessages() ([]storage.Message, error) {
	return h.s.Retained(), nil
}
