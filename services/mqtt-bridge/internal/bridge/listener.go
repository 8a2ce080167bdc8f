package bridge

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/sessions"
)

// listener is the embedded broker devices connect to. A QoS 1/2 PUBLISH that a
// mapping takes is answered only once storage-core has the record: 0x00 then, 0x97
// when storage refused it, did not answer within store-timeout, or too many messages
// are waiting already (answered at once), 0x83 when it is over max-record-bytes.
// Persistent sessions are kept by sessions (on disk with listener.session-dir; see
// internal/sessions), fed by sessionHook.
type listener struct {
	b      *Bridge
	cfg    config.ListenerConfig
	routes []*mapping.Route
	srv    *mqtt.Server
	ln     *listeners.Net
	guard  *guardedListener
	inline *mqtt.Client
	slots  chan struct{}
	log    *zap.Logger
	doubts doubts
	// deadlines gives stored publishes their store-timeout.
	deadlines deadlines
	// flows holds each client's QoS 1/2 publishes waiting for their answer.
	flows flows
	// pace holds publishers back while a subscriber is full.
	pace pace
	// sessions keeps the persistent sessions and their clients' remembered messages.
	sessions *sessions.Store
	// events publishes the client events (events.enabled), or nil.
	events *eventsHook
	// retained keeps the retained messages in a topic (retained.store kafka), or nil.
	retained *retainedLog
	// logins looks users up in the coordinator (coordinator-logins), or is nil.
	logins *remoteLogins
	// dropped counts messages not delivered to subscribers that did not keep up.
	dropped prometheus.CounterFunc
	// refusedKeepAlive counts CONNECTs refused for their keep alive.
	refusedKeepAlive prometheus.Counter
}

func newListener(b *Bridge, c config.ListenerConfig, routes []*mapping.Route) (_ *listener, err error) {
	l := &listener{b: b, cfg: c, routes: routes, slots: make(chan struct{}, c.QueueSize), log: b.log.With(zap.String("listener", c.Addr))}
	l.pace.l = l
	l.pace.sessionBytes.Store(config.DefaultQueueBytesSession)
	if c.QueueBytes.Session > 0 {
		l.pace.sessionBytes.Store(c.QueueBytes.Session)
	}
	l.pace.totalBytes.Store(config.DefaultQueueBytesTotal)
	if c.QueueBytes.Total > 0 {
		l.pace.totalBytes.Store(c.QueueBytes.Total)
	}
	l.pace.stall.Store(int64(config.DefaultStallTimeout))
	if c.StallTimeout > 0 {
		l.pace.stall.Store(int64(c.StallTimeout))
	}
	if c.SessionDir != "" {
		if l.sessions, err = sessions.Open(c.SessionDir, l.log); err != nil {
			return nil, err
		}
	} else {
		l.sessions = sessions.New(l.log)
	}
	defer func() {
		if err != nil {
			l.sessions.Close()
		}
	}()
	caps := mqtt.NewDefaultServerCapabilities()
	// An acknowledgement carries no copy of the publish's properties; with them the
	// library would also encode its QoS 1 "granted" code (0x01) into a PUBACK.
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	// A message published without an expiry keeps none (the library's default would
	// give every delivered message a one-day Message Expiry Interval).
	caps.MaximumMessageExpiryInterval = 0
	// The library reads a packet into a buffer of the size its fixed header claims, up
	// to 256 MB, before anything else (even before CONNECT): without a limit, a few
	// connections claiming huge packets exhaust memory. A packet over the limit ends
	// the connection (0x95). The limit and the alias maximum are advertised in the
	// CONNACK (connackProps), which the library does not do itself.
	caps.MaximumPacketSize = maxPacketSize(routes)
	// Each alias can hold a topic of up to 64 KiB for the whole connection.
	caps.TopicAliasMaximum = topicAliasMaximum
	// What one slow (or stuck) subscriber can hold (the library's defaults are 8,192
	// of each, of up to a Maximum Packet Size apiece); pace keeps it under
	// subscriberQueue unless it stalls.
	caps.MaximumInflight = subscriberHardQueue
	caps.MaximumClientWritesPending = subscriberWritesPending
	// How many QoS 1/2 messages a client may have unacknowledged: the session store
	// remembers that many per session for their resends.
	caps.ReceiveMaximum = sessions.ReceiveMaximum
	// Limits (listener config): the library refuses a CONNECT past MaximumClients
	// (0x89 server busy, 0x03 for MQTT 3.1.1) and lowers a longer Session Expiry
	// Interval, telling the client in its CONNACK; OnConnect applies max-keepalive.
	if c.MaxConnections > 0 {
		caps.MaximumClients = c.MaxConnections
	}
	if c.MaxSessionExpiry > 0 {
		caps.MaximumSessionExpiryInterval = uint32(c.MaxSessionExpiry / time.Second)
	}
	opts := &mqtt.Options{
		InlineClient: true,
		Capabilities: caps,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	l.srv = mqtt.New(opts)
	if len(c.Users) > 0 || c.PasswordFile != "" || c.CertificateLogin || c.CoordinatorLogins {
		if c.CoordinatorLogins {
			if l.logins, err = newRemoteLogins(b.mqttUsers, b.cfg.NATSURL, b.cfg.ClusterID, l.log); err != nil {
				return nil, err
			}
			defer func() {
				if err != nil {
					l.logins.close()
				}
			}()
		}
		h, err := newAuthHook(l, c, l.logins)
		if err != nil {
			return nil, err
		}
		if err := l.srv.AddHook(h, nil); err != nil {
			return nil, err
		}
	} else if err := l.srv.AddHook(&allowHook{l: l}, nil); err != nil {
		return nil, err
	}
	if err := l.srv.AddHook(&storeHook{l: l}, nil); err != nil {
		return nil, err
	}
	if err := l.srv.AddHook(&sessionHook{s: l.sessions, srv: l.srv, retained: c.RetainedStore() == config.RetainedFile}, nil); err != nil {
		return nil, err
	}
	if c.Events.Enabled {
		l.events = newEventsHook(l)
		if err := l.srv.AddHook(l.events, nil); err != nil {
			return nil, err
		}
		go l.events.run(b.ctx)
	}
	if c.RetainedStore() == config.RetainedKafka {
		l.retained = newRetainedLog(l, c.Retained.Topic)
		if err := l.srv.AddHook(&retainedHook{r: l.retained}, nil); err != nil {
			return nil, err
		}
	}
	b.store.sessions = l.sessions
	var tlsCfg *tls.Config
	if t := c.TLS; t != nil {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if t.CAFile != "" {
			pool, err := loadPool(t.CAFile)
			if err != nil {
				return nil, err
			}
			tlsCfg.ClientCAs = pool
			tlsCfg.ClientAuth = tls.VerifyClientCertIfGiven
			if t.RequireClientCert {
				tlsCfg.ClientAuth = tls.RequireAndVerifyClientCert
			}
		}
	}
	raw, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("mqtt listen %s: %w", c.Addr, err)
	}
	// The library sets no deadline before CONNECT (only keep-alive ones after), so a
	// connection that sends nothing, or half a CONNECT, would stay for ever.
	timeout := config.DefaultConnectTimeout
	if c.ConnectTimeout > 0 {
		timeout = c.ConnectTimeout
	}
	l.guard = &guardedListener{Listener: raw, tls: tlsCfg, timeout: timeout, maxPacket: int(caps.MaximumPacketSize), pending: map[net.Conn]struct{}{}}
	l.ln = listeners.NewNet("tributary", l.guard)
	if err := l.srv.AddListener(l.ln); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("mqtt listen %s: %w", c.Addr, err)
	}
	info := l.srv.Info
	l.dropped = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tributary_mqtt_listener_dropped_total",
		Help: "listener: messages not delivered to a subscriber that stalled (its queue of " + strconv.Itoa(subscriberHardQueue) + " unacknowledged QoS 1/2 messages, or its queue-bytes, or " + strconv.Itoa(subscriberWritesPending) + " unwritten packets, was full).",
	}, func() float64 {
		return float64(atomic.LoadInt64(&info.MessagesDropped) + atomic.LoadInt64(&info.InflightDropped) + l.pace.bytesDropped.Load())
	})
	b.reg.MustRegister(l.dropped)
	b.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tributary_mqtt_listener_queue_bytes_dropped_total",
		Help: "listener: QoS 1/2 messages not delivered to a stalled subscriber because it held its listener.queue-bytes (session, or of the total); also in dropped_total.",
	}, func() float64 { return float64(l.pace.bytesDropped.Load()) }))
	b.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tributary_mqtt_listener_queued_bytes",
		Help: "listener: payload and topic bytes of the QoS 1/2 messages sent to subscribers and not acknowledged now (at most about listener.queue-bytes.total).",
	}, func() float64 { return float64(l.pace.queuedBytes.Load()) }))
	b.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tributary_mqtt_listener_connections",
		Help: "listener: clients connected now (at most listener.max-connections).",
	}, func() float64 { return float64(atomic.LoadInt64(&info.ClientsConnected)) }))
	l.refusedKeepAlive = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tributary_mqtt_listener_keepalive_refused_total",
		Help: "listener: MQTT 3.1.1 CONNECTs refused (0x02) for a keep alive over listener.max-keepalive.",
	})
	b.reg.MustRegister(l.refusedKeepAlive)
	l.inline = l.srv.NewClient(nil, "local", "tributary-kafka-to-mqtt", true)
	l.inline.Properties.ProtocolVersion = 5
	return l, nil
}

// topicAliasMaximum is how many topic aliases a listener client may set.
const topicAliasMaximum = 16

// packetOverhead is what a PUBLISH may carry beyond a record's max-record-bytes: the
// topic name (up to 64 KiB) and properties that are not stored.
const packetOverhead = 128 << 10

// maxPacketSize is the largest packet the listener reads: the largest max-record-bytes
// of its routes (at least the default) and packetOverhead.
func maxPacketSize(routes []*mapping.Route) uint32 {
	n := config.DefaultMaxRecordBytes
	for _, r := range routes {
		n = max(n, r.Cfg.MaxRecordBytes)
	}
	return uint32(min(n+packetOverhead, 268435455+5))
}

// Addr is the bound listener address.
func (l *listener) Addr() string { return l.ln.Address() }

// serve starts the broker (which reads the kept sessions back first) and sends the
// batches a previous process journaled without learning their outcome again.
func (l *listener) serve() error {
	l.sessions.Start(l.b.store.resend, inDoubt)
	return l.srv.Serve()
}

// close ends the connections that have not sent CONNECT yet (the library does not
// know them, and would wait for them for ever), then the server and its clients.
func (l *listener) close() {
	l.guard.closePending()
	// The listeners are closed with our own client closer first; the library's runs
	// only once per listener, so srv.Close then skips it. Its own closer
	// (Clients.GetByListener) takes the clients' read lock twice, and a client that
	// disconnects at that moment queues Clients.Delete's write lock between the two:
	// the read lock then never comes and Close hangs for ever (mochi-mqtt v2.7.9).
	l.srv.Listeners.CloseAll(l.closeClients)
	_ = l.srv.Close()
}

// closeClients disconnects the clients of one listener, reading the clients map
// under a single read lock.
func (l *listener) closeClients(listenerID string) {
	for _, cl := range l.srv.Clients.GetAll() {
		if cl.Net.Listener == listenerID && !cl.Closed() {
			_ = l.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
}

// guardedListener gives each accepted connection until its timeout (connect-timeout)
// to CONNECT
// (the library's keep-alive deadline replaces it after) and knows the connections
// still without one, so that close can end them.
type guardedListener struct {
	net.Listener
	tls *tls.Config
	// maxPacket is the Maximum Packet Size, in bytes, frames holds clients to.
	maxPacket int

	mu      sync.Mutex
	timeout time.Duration
	pending map[net.Conn]struct{}
	closed  bool
}

func (g *guardedListener) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if g.tls != nil {
		c = tls.Server(c, g.tls)
	}
	cc := &corkConn{Conn: c, frames: &frames{limit: g.maxPacket}}
	cc.forget = func() { g.connected(cc) }
	g.mu.Lock()
	_ = cc.SetDeadline(time.Now().Add(g.timeout))
	closed := g.closed
	if !closed {
		g.pending[cc] = struct{}{}
	}
	g.mu.Unlock()
	if closed {
		_ = cc.Close()
	}
	return cc, nil
}

// connected forgets c: it sent its CONNECT and is the library's now, or it is closed
// (refused before, by the library or by frames).
func (g *guardedListener) connected(c net.Conn) {
	g.mu.Lock()
	delete(g.pending, c)
	g.mu.Unlock()
}

func (g *guardedListener) closePending() {
	g.mu.Lock()
	g.closed = true
	pending := g.pending
	g.pending = map[net.Conn]struct{}{}
	g.mu.Unlock()
	for c := range pending {
		_ = c.Close() // which calls connected: not under g.mu
	}
}

// publish hands m to the embedded broker's subscribers, once those that get it have
// room (see pace).
func (l *listener) publish(ctx context.Context, m mapping.Message) (byte, error) {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: m.QoS, Retain: m.Retain},
		TopicName:   m.Topic,
		Payload:     m.Payload,
		PacketID:    uint16(m.QoS), // not used for inline publishes, but checked for validity
		Properties: packets.Properties{
			ContentType:     m.ContentType,
			CorrelationData: m.CorrelationData,
			ResponseTopic:   m.ResponseTopic,
		},
	}
	if m.PayloadFormatIndicator != nil {
		pk.Properties.PayloadFormat, pk.Properties.PayloadFormatFlag = *m.PayloadFormatIndicator, true
	}
	if m.MessageExpiryInterval != nil {
		pk.Properties.MessageExpiryInterval = *m.MessageExpiryInterval
	}
	for _, u := range m.UserProperties {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: u.Key, Val: u.Value})
	}
	l.pace.hold(ctx, m.Topic, m.QoS, nil, nil)
	return 0, l.srv.InjectPacket(l.inline, pk)
}

// errRejectPacket is packets.ErrRejectPacket as an error, made once: a packets.Code
// converted to an error where it is returned is an allocation, and every stored
// publish returns it.
var errRejectPacket error = packets.ErrRejectPacket

// sysMarker prefixes the topic of a PUBLISH to $SYS between OnPacketRead and
// OnPublish; no client topic holds a NUL (OnPacketRead ends such connections).
const sysMarker = "\x00sys\x00"

// storeHook holds a publish in the client's read loop until it is stored.
type storeHook struct {
	mqtt.HookBase
	l *listener
}

func (h *storeHook) ID() string { return "tributary-store" }

func (h *storeHook) Provides(b byte) bool {
	return b == mqtt.OnPublish || b == mqtt.OnPacketRead || b == mqtt.OnPacketEncode || b == mqtt.OnConnect || b == mqtt.OnDisconnect ||
		b == mqtt.OnQosComplete || b == mqtt.OnQosPublish || b == mqtt.OnQosDropped || b == mqtt.OnSubscribe || b == mqtt.OnSubscribed ||
		b == mqtt.OnSessionEstablish || b == mqtt.OnSessionEstablished
}

// OnConnect hands the connection from the CONNECT guard to the library, gives an
// MQTT 5 client's connection the way to DISCONNECT it when it breaks the protocol
// (corkConn.Read), and applies max-keepalive: an MQTT 5 client asking for a longer
// keep alive, or none, gets the maximum as Server Keep Alive; an MQTT 3.1.1 one is
// refused with CONNACK 0x02.
func (h *storeHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	h.l.guard.connected(cl.Net.Conn)
	if cc, ok := cl.Net.Conn.(*corkConn); ok && cl.Properties.ProtocolVersion == 5 {
		cc.disconnect = func(code packets.Code) { _ = h.l.srv.DisconnectClient(cl, code) }
	}
	maxKA := h.l.cfg.MaxKeepAlive / time.Second
	if maxKA <= 0 || maxKA >= 65535 {
		return nil
	}
	ka := time.Duration(cl.State.Keepalive)
	if ka != 0 && ka <= maxKA {
		return nil
	}
	if cl.Properties.ProtocolVersion == 5 {
		cl.State.Keepalive, cl.State.ServerKeepalive = uint16(maxKA), true
		return nil
	}
	h.l.refusedKeepAlive.Inc()
	h.l.log.Warn("keep alive over max-keepalive; refused", zap.String("client", cl.ID), zap.Uint16("keepalive", cl.State.Keepalive), zap.Duration("max_keepalive", h.l.cfg.MaxKeepAlive))
	_ = h.l.srv.SendConnack(cl, packets.ErrClientIdentifierNotValid, false, nil)
	return packets.ErrClientIdentifierNotValid
}

// OnDisconnect forgets the client's flow and pace.
func (h *storeHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.l.flows.forget(cl)
	h.l.pace.forget(cl)
}

// OnSessionEstablish and OnSessionEstablished turn the library's send quota off for
// the client (its Inflight, then the one inherited from its session): with a quota,
// mochi-mqtt v2.7.9 holds messages past a subscriber's Receive Maximum and sends one
// after each packet the subscriber sends, without keeping it in flight (its PUBACK
// then never gives the quota back, so a subscriber ends up getting one message per
// round trip), in an order sorted by second only, and looks for them under its
// Inflight read lock taken twice (a publish storing into that Inflight meanwhile
// deadlocks both). pace keeps each subscriber within its Receive Maximum instead.
func (h *storeHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	cl.State.Inflight.ResetSendQuota(0)
}

func (h *storeHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	cl.State.Inflight.ResetSendQuota(0)
}

// OnQosPublish tells pace that the library holds a message for the client now.
func (h *storeHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if pk.FixedHeader.Type == packets.Publish {
		h.l.pace.queued(cl, &pk)
	}
}

// OnQosComplete tells pace that the client acknowledged a delivery. The library also
// calls it for the client's own QoS 1 publishes (with the PUBACK it built, which has
// a creation time; a PUBACK read from the client has none) and QoS 2 ones (PUBREL):
// those release no queue bytes.
func (h *storeHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	h.l.pace.acked(cl)
	if pk.FixedHeader.Type == packets.Puback && pk.Created == 0 || pk.FixedHeader.Type == packets.Pubcomp {
		h.l.pace.completed(cl, pk.PacketID)
	}
}

// OnQosDropped releases the queue bytes of a delivery the library gave up (the
// subscriber refused it in its PUBREC, or it expired).
func (h *storeHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if pk.FixedHeader.Type != packets.Pubrel {
		h.l.pace.completed(cl, pk.PacketID)
	}
}

// OnSubscribe and OnSubscribed mark the client while the library checks its
// SUBSCRIBE's filters, so that the check does not use up a drop (pace.deliverable).
func (h *storeHook) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	h.l.pace.subscribing(cl, true)
	return pk
}

func (h *storeHook) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	h.l.pace.subscribing(cl, false)
}

// OnPacketEncode advertises the listener's Maximum Packet Size and Topic Alias
// Maximum in a successful MQTT 5 CONNACK, so that a client knows the limits it is held
// to (the library enforces them without saying so).
//
// It also answers a QoS 2 PUBLISH received again before its PUBREL with PUBREC 0x00,
// as [MQTT-4.3.3-10] wants (the library, which rightly does not deliver it again,
// answers 0x91 "packet identifier in use", the one PUBREC it sends with that code: a
// publisher whose PUBREC was lost would take its stored message for refused).
func (h *storeHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Pubrec && pk.ReasonCode == packets.ErrPacketIdentifierInUse.Code {
		pk.ReasonCode = packets.CodeSuccess.Code
		pk.Properties = packets.Properties{}
	}
	if pk.FixedHeader.Type == packets.Connack && pk.ReasonCode < 0x80 && cl.Properties.ProtocolVersion == 5 {
		caps := h.l.srv.Options.Capabilities
		pk.Properties.MaximumPacketSize = caps.MaximumPacketSize
		pk.Properties.TopicAliasMaximum = caps.TopicAliasMaximum
	}
	return pk
}

// OnPacketRead ends the connection of a client whose PUBLISH names an invalid topic
// (wildcards, NUL) with DISCONNECT 0x90 (topic name invalid), where the library would
// drop the packet without an answer and leave a QoS 1/2 publisher waiting.
//
// A PUBLISH to a $SYS topic, which the library also drops without an answer, or to
// an event topic ($events/client/..., the listener's own: see events.go), is
// refused: 0x87 (not authorized) to an MQTT 5 client, the connection ended for 3.1.1.
func (h *storeHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline {
		return pk, nil
	}
	switch {
	case strings.ContainsAny(pk.TopicName, "+#\x00"):
		h.l.log.Warn("publish to an invalid topic name; disconnecting", zap.String("client", cl.ID), zap.String("topic", pk.TopicName))
		_ = h.l.srv.DisconnectClient(cl, packets.ErrTopicNameInvalid)
		return pk, errRejectPacket
	case len(pk.TopicName) >= len(mqtt.SysPrefix) && strings.EqualFold(pk.TopicName[:len(mqtt.SysPrefix)], mqtt.SysPrefix),
		strings.HasPrefix(pk.TopicName, eventsPrefix):
		h.l.log.Warn("publish to a $SYS or event topic; refused", zap.String("client", cl.ID), zap.String("topic", pk.TopicName))
		if pk.FixedHeader.Qos > 0 && cl.Properties.ProtocolVersion != 5 {
			_ = h.l.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
			return pk, errRejectPacket
		}
		// An error here would end the connection; marked, it reaches OnPublish, which
		// refuses it (the library itself would drop it before).
		pk.TopicName = sysMarker + pk.TopicName
	}
	return pk, nil
}

// OnPublish stores a publish that a mapping takes. A QoS 1/2 one goes to its
// client's flow (see flow), which answers it once it is durable or refused; the
// library then acknowledges and delivers it (the flow hands it back marked released).
// Every QoS 1/2 answer goes through the flow while it holds anything, so that the
// client gets its acknowledgements in the order of its PUBLISHes.
func (h *storeHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	l := h.l
	if cl.Net.Inline {
		return pk, nil // our own kafka-to-mqtt publishes are never stored again
	}
	if pk.ReasonCode == released {
		pk.ReasonCode = 0
		return pk, nil
	}
	var f *flow
	if pk.FixedHeader.Qos > 0 {
		f = l.flows.of(l, cl)
	}
	// answer gives pk the answer code (known now) in its turn.
	answer := func(code packets.Code) (packets.Packet, error) {
		// A QoS 1/2 publish waits in the flow while a subscriber is full (see pace).
		if f == nil || f.idle() && (code != packets.CodeSuccess || l.pace.admit(pk.TopicName, pk.FixedHeader.Qos, cl)) {
			if code == packets.CodeSuccess {
				return pk, nil
			}
			return h.refuse(cl, pk, code)
		}
		if !f.push(&pending{pk: pk, code: code}) {
			return h.overReceiveMaximum(cl)
		}
		return pk, errRejectPacket
	}
	if strings.HasPrefix(pk.TopicName, sysMarker) {
		if pk.FixedHeader.Qos == 0 {
			return pk, errRejectPacket
		}
		return answer(packets.ErrNotAuthorized)
	}
	if pk.TopicName == "" {
		// An empty topic name with a topic alias the client never set (the library
		// resolves aliases before this hook and lets an unknown one through).
		h.l.log.Warn("publish with an unknown topic alias; disconnecting", zap.String("client", cl.ID), zap.Uint16("alias", pk.Properties.TopicAlias))
		_ = h.l.srv.DisconnectClient(cl, packets.ErrProtocolViolation)
		return pk, errRejectPacket
	}
	msg := fromMochi(cl, pk)
	routes := l.routes[:0:0]
	routed := true
	for _, r := range l.routes {
		if r.Matches(msg.Topic) {
			routes = append(routes, r)
			routed = routed && r.Cfg.Acknowledge == config.AckRouted
		}
	}
	if len(routes) == 0 {
		return answer(packets.CodeSuccess)
	}
	ctx := l.b.ctx
	stored := pk.FixedHeader.Qos > 0 && !routed
	// A persistent session's message is remembered, so that its resend (after a
	// reconnection, after a restart) is not stored again (internal/sessions).
	var rc *sessions.Receipt
	if stored && persistent(cl) {
		wctx, cancel := context.WithTimeout(ctx, l.b.cfg.StoreTimeout)
		rc = l.sessions.Receive(wctx, cl.ID, pk.PacketID, pk.FixedHeader.Dup, sessions.Digest(msg))
		cancel()
	}
	// answerNow answers at once (in its turn), releasing the receipt.
	answerNow := func(code packets.Code) (packets.Packet, error) {
		if rc != nil {
			l.sessions.Release(rc)
		}
		return answer(code)
	}
	var groups []*target
	if stored && (rc == nil || !rc.Resent()) {
		groups = l.doubts.take(cl.ID, msg)
	}
	if groups == nil {
		var tooLarge []bool
		var err error
		groups, tooLarge, err = l.b.build(ctx, []*mapping.Message{msg}, [][]*mapping.Route{routes}, []time.Time{time.Now()})
		if err == nil && tooLarge[0] {
			return answerNow(packets.ErrImplementationSpecificError)
		}
		if err != nil {
			l.log.Warn("partition lookup failed", zap.Error(err))
			return answerNow(packets.ErrQuotaExceeded)
		}
		if rc != nil && rc.Resent() {
			// Each group waits for the batch it was sent in before, if it was, and is
			// appended again only if that one was not stored.
			for _, g := range groups {
				if out := l.sessions.Sent(rc, g.route.Cfg.ID, g.partition); out != nil {
					g.pending = out
				}
			}
		}
	}
	if rc != nil {
		for _, g := range groups {
			g.origin = rc.Origin(g.route.Cfg.ID, g.partition)
		}
	}
	select {
	case l.slots <- struct{}{}:
	default:
		if inDoubtGroups(groups) {
			l.doubts.keep(cl.ID, msg, groups)
		}
		return answerNow(packets.ErrQuotaExceeded)
	}
	if !stored {
		q := l.b.queueGroups(ctx, groups, nil)
		go func() {
			defer func() { <-l.slots }()
			if err := q.wait(); err != nil {
				l.log.Warn("store failed after acknowledging (QoS 0 or acknowledge: routed)", zap.Error(err))
			}
		}()
		return answer(packets.CodeSuccess)
	}
	p := &pending{pk: pk, code: packets.CodeSuccess, rc: rc}
	if !f.reserve(p) {
		<-l.slots
		if rc != nil {
			l.sessions.Release(rc)
		}
		return h.overReceiveMaximum(cl)
	}
	if p.first != nil {
		<-l.slots // a repeat of a PUBLISH still queued: answered with it
		f.enqueue(p)
		return pk, errRejectPacket
	}
	l.b.m.held.Inc()
	// Queued now, in the read loop: the client's messages reach each channel in the
	// order they came. The flow's goroutine waits for them (flow.outcome).
	p.msg = msg
	p.queued = l.b.queueGroups(l.deadlines.get(ctx, l.b.cfg.StoreTimeout), groups, f.wake)
	f.enqueue(p)
	return pk, errRejectPacket
}

// overReceiveMaximum ends the connection of a client that has more QoS 1/2 publishes
// unanswered than the Receive Maximum it was given (0x93, MQTT 5 section 3.3.4).
func (h *storeHook) overReceiveMaximum(cl *mqtt.Client) (packets.Packet, error) {
	h.l.log.Warn("more publishes in flight than Receive Maximum; disconnecting", zap.String("client", cl.ID))
	_ = h.l.srv.DisconnectClient(cl, packets.ErrReceiveMaximum)
	return packets.Packet{}, errRejectPacket
}

// retryWindow is how long a message refused while its append was in doubt is
// remembered for its publisher's retry (after the append's outcome is known), and
// maxDoubts how many such messages are remembered per client id (the oldest are
// forgotten first).
const (
	retryWindow = time.Minute
	maxDoubts   = 64
)

// doubts remembers, per client id, the QoS 1/2 messages answered 0x97 while their
// append was in doubt (sent to storage-core, not answered within store-timeout: the
// store keeps sending that batch until it is answered, so it may well end up stored).
// A PUBLISH of the same client that repeats such a message (same topic, payload, QoS,
// retain flag and properties; the packet identifier may differ, since 0x97 ended the
// first one's flow) is the publisher's retry: it is answered from the first append's
// outcome, and stored only if that one was not. So a publisher that retries until
// success gets its message stored exactly once; one that does not retry may find it
// stored all the same (0x97 after store-timeout means "not known to be stored").
// A publisher cannot tell an equal new message from a retry, and neither does the
// bridge: one stored copy then answers for both, which is what the publisher saw
// succeed once.
type doubts struct {
	mu        sync.Mutex
	byClient  map[string][]*doubt
	lastSweep time.Time
}

type doubt struct {
	msg    *mapping.Message
	groups []*target
}

// keep remembers msg, whose groups have an append in doubt, for client.
func (d *doubts) keep(client string, msg *mapping.Message, groups []*target) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if d.byClient == nil {
		d.byClient = map[string][]*doubt{}
	}
	if now.Sub(d.lastSweep) > retryWindow {
		d.lastSweep = now
		for c, list := range d.byClient {
			if list = live(list, now); len(list) == 0 {
				delete(d.byClient, c)
			} else {
				d.byClient[c] = list
			}
		}
	}
	list := append(live(d.byClient[client], now), &doubt{msg: msg, groups: groups})
	if len(list) > maxDoubts {
		list = list[len(list)-maxDoubts:]
	}
	d.byClient[client] = list
}

// take returns and forgets the groups of client's remembered message equal to msg
// (nil when there is none).
func (d *doubts) take(client string, msg *mapping.Message) []*target {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := d.byClient[client]
	for i, e := range list {
		if reflect.DeepEqual(e.msg, msg) {
			d.byClient[client] = append(list[:i:i], list[i+1:]...)
			return e.groups
		}
	}
	return nil
}

// live drops the entries of list whose appends' outcomes have been known for longer
// than retryWindow, or are known and not stored (a retry is then an ordinary publish).
func live(list []*doubt, now time.Time) []*doubt {
	out := list[:0]
	for _, e := range list {
		keep := false
		for _, g := range e.groups {
			if g.pending == nil {
				continue
			}
			select {
			case <-g.pending.Done:
				keep = keep || (g.pending.Stored && now.Sub(g.pending.At) <= retryWindow)
			default:
				keep = true
			}
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// refuse answers a QoS 1/2 publish with code. An MQTT 3.1.1 client cannot be told:
// it is acknowledged and the refusal counted. QoS 0 is dropped. A refused message is
// neither delivered to the listener's subscribers nor retained.
func (h *storeHook) refuse(cl *mqtt.Client, pk packets.Packet, code packets.Code) (packets.Packet, error) {
	for _, r := range h.l.routes {
		if r.Matches(pk.TopicName) {
			h.l.b.m.refused.WithLabelValues(r.Cfg.ID).Inc()
		}
	}
	if pk.FixedHeader.Qos == 0 {
		return pk, errRejectPacket
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}
	if pk.FixedHeader.Qos == 2 {
		ack.FixedHeader.Type = packets.Pubrec
	}
	if cl.Properties.ProtocolVersion == 5 {
		// Given the code, the library would answer a QoS 2 publish with a PUBACK.
		ack.ReasonCode, ack.Properties.ReasonString = code.Code, code.Reason
	}
	// Acknowledged ourselves for MQTT 3.1.1: given the code, the library would also
	// deliver the message to the listener's subscribers and retain it, stored or not.
	_ = cl.WritePacket(ack)
	return pk, errRejectPacket
}

func fromMochi(cl *mqtt.Client, pk packets.Packet) *mapping.Message {
	m := &mapping.Message{
		Topic: pk.TopicName, Payload: pk.Payload, QoS: pk.FixedHeader.Qos, Retain: pk.FixedHeader.Retain,
		ClientID: cl.ID, Username: string(cl.Properties.Username),
	}
	p := pk.Properties
	m.ContentType = p.ContentType
	m.CorrelationData = p.CorrelationData
	m.ResponseTopic = p.ResponseTopic
	if p.PayloadFormatFlag {
		pf := p.PayloadFormat
		m.PayloadFormatIndicator = &pf
	}
	if p.MessageExpiryInterval > 0 {
		e := p.MessageExpiryInterval
		m.MessageExpiryInterval = &e
	}
	for _, u := range p.User {
		m.UserProperties = append(m.UserProperties, mapping.UserProperty{Key: u.Key, Value: u.Val})
	}
	return m
}
