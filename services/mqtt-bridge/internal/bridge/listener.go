package bridge

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// listener is the embedded broker devices connect to. A QoS 1/2 PUBLISH that a
// mapping takes is answered only once storage-core has the record: 0x00 then, 0x97
// when storage refused it, did not answer within store-timeout, or too many messages
// are waiting already (answered at once), 0x83 when it is over max-record-bytes.
type listener struct {
	b      *Bridge
	cfg    config.ListenerConfig
	routes []*mapping.Route
	srv    *mqtt.Server
	ln     *listeners.TCP
	inline *mqtt.Client
	slots  chan struct{}
	log    *zap.Logger
}

func newListener(b *Bridge, c config.ListenerConfig, routes []*mapping.Route) (*listener, error) {
	l := &listener{b: b, cfg: c, routes: routes, slots: make(chan struct{}, c.QueueSize), log: b.log.With(zap.String("listener", c.Addr))}
	caps := mqtt.NewDefaultServerCapabilities()
	// An acknowledgement carries no copy of the publish's properties; with them the
	// library would also encode its QoS 1 "granted" code (0x01) into a PUBACK.
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	// A message published without an expiry keeps none (the library's default would
	// give every delivered message a one-day Message Expiry Interval).
	caps.MaximumMessageExpiryInterval = 0
	opts := &mqtt.Options{
		InlineClient: true,
		Capabilities: caps,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	l.srv = mqtt.New(opts)
	if err := l.srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, err
	}
	if err := l.srv.AddHook(&storeHook{l: l}, nil); err != nil {
		return nil, err
	}
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
	l.ln = listeners.NewTCP(listeners.Config{ID: "tributary", Address: c.Addr, TLSConfig: tlsCfg})
	if err := l.srv.AddListener(l.ln); err != nil {
		return nil, fmt.Errorf("mqtt listen %s: %w", c.Addr, err)
	}
	l.inline = l.srv.NewClient(nil, "local", "tributary-kafka-to-mqtt", true)
	l.inline.Properties.ProtocolVersion = 5
	return l, nil
}

// Addr is the bound listener address.
func (l *listener) Addr() string { return l.ln.Address() }

func (l *listener) serve() error { return l.srv.Serve() }

func (l *listener) close() { _ = l.srv.Close() }

// publish hands m to the embedded broker's subscribers (nothing to wait for).
func (l *listener) publish(_ context.Context, m mapping.Message) (byte, error) {
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
	return 0, l.srv.InjectPacket(l.inline, pk)
}

// storeHook holds a publish in the client's read loop until it is stored.
type storeHook struct {
	mqtt.HookBase
	l *listener
}

func (h *storeHook) ID() string { return "tributary-store" }

func (h *storeHook) Provides(b byte) bool { return b == mqtt.OnPublish || b == mqtt.OnPacketRead }

// OnPacketRead ends the connection of a client whose PUBLISH names an invalid topic
// (wildcards, NUL) with DISCONNECT 0x90 (topic name invalid), where the library would
// drop the packet without an answer and leave a QoS 1/2 publisher waiting.
func (h *storeHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline || !strings.ContainsAny(pk.TopicName, "+#\x00") {
		return pk, nil
	}
	h.l.log.Warn("publish to an invalid topic name; disconnecting", zap.String("client", cl.ID), zap.String("topic", pk.TopicName))
	_ = h.l.srv.DisconnectClient(cl, packets.ErrTopicNameInvalid)
	return pk, packets.ErrRejectPacket
}

func (h *storeHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	l := h.l
	if cl.Net.Inline {
		return pk, nil // our own kafka-to-mqtt publishes are never stored again
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
		return pk, nil
	}
	ctx := l.b.ctx
	groups, tooLarge, err := l.b.build(ctx, []*mapping.Message{msg}, [][]*mapping.Route{routes}, []time.Time{time.Now()})
	if err == nil && tooLarge[0] {
		return h.refuse(cl, pk, packets.ErrImplementationSpecificError)
	}
	if err != nil {
		l.log.Warn("partition lookup failed", zap.Error(err))
		return h.refuse(cl, pk, packets.ErrQuotaExceeded)
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return h.refuse(cl, pk, packets.ErrQuotaExceeded)
	}
	if pk.FixedHeader.Qos == 0 || routed {
		go func() {
			defer func() { <-l.slots }()
			if err := l.b.appendGroups(ctx, groups); err != nil {
				l.log.Warn("store failed after acknowledging (QoS 0 or acknowledge: routed)", zap.Error(err))
			}
		}()
		return pk, nil
	}
	l.b.m.held.Inc()
	sctx, cancel := context.WithTimeout(ctx, l.b.cfg.StoreTimeout)
	err = l.b.appendGroups(sctx, groups)
	cancel()
	l.b.m.held.Dec()
	<-l.slots
	if err != nil {
		l.log.Warn("store failed; refusing the publish", zap.String("client", cl.ID), zap.Error(err))
		return h.refuse(cl, pk, packets.ErrQuotaExceeded)
	}
	return pk, nil
}

// refuse answers a QoS 1/2 publish with code. An MQTT 3.1.1 client cannot be told:
// the library acknowledges it (a reason code it does not answer for 3.1.1) and the
// refusal is counted. QoS 0 is dropped.
func (h *storeHook) refuse(cl *mqtt.Client, pk packets.Packet, code packets.Code) (packets.Packet, error) {
	for _, r := range h.l.routes {
		if r.Matches(pk.TopicName) {
			h.l.b.m.refused.WithLabelValues(r.Cfg.ID).Inc()
		}
	}
	if pk.FixedHeader.Qos == 0 {
		return pk, packets.ErrRejectPacket
	}
	if pk.FixedHeader.Qos == 2 && cl.Properties.ProtocolVersion == 5 {
		// The library answers a refused QoS 2 publish with a PUBACK; send the PUBREC.
		_ = cl.WritePacket(packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Pubrec},
			PacketID:    pk.PacketID,
			ReasonCode:  code.Code,
		})
		return pk, packets.ErrRejectPacket
	}
	return pk, code
}

func fromMochi(cl *mqtt.Client, pk packets.Packet) *mapping.Message {
	m := &mapping.Message{
		Topic: pk.TopicName, Payload: pk.Payload, QoS: pk.FixedHeader.Qos, Retain: pk.FixedHeader.Retain,
		ClientID: cl.ID, Username: string(bytes.Clone(cl.Properties.Username)),
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
