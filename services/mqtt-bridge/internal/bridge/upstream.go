package bridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/eclipse/paho.golang/paho/store/file"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// upstreamBatch bounds the messages stored (and then acknowledged) together.
const upstreamBatch = 500

// upstream is the bridge as a client of one broker: a persistent session whose QoS 1/2
// messages are acknowledged only after storage-core has them, in the order received.
type upstream struct {
	b      *Bridge
	cfg    config.Cluster
	routes []*mapping.Route
	log    *zap.Logger

	cm  *autopaho.ConnectionManager
	ctx context.Context
	// filters are the distinct filters of the routes, in order; filter i is subscribed
	// with subscription identifier i+1 when the broker supports them, so that each
	// route takes one of the copies a broker sends for overlapping subscriptions.
	filters    []string
	in         chan *inbound
	subscribed atomic.Bool
	connected  atomic.Bool
}

type inbound struct {
	msg    *mapping.Message
	routes []*mapping.Route // the routes that take this copy
	pkt    *paho.Publish
	client *paho.Client
	at     time.Time
	acked  bool
}

func newUpstream(b *Bridge, c config.Cluster, routes []*mapping.Route) *upstream {
	u := &upstream{b: b, cfg: c, routes: routes, log: b.log.With(zap.String("cluster", c.Name)), in: make(chan *inbound, upstreamBatch*2)}
	seen := map[string]bool{}
	for _, r := range routes {
		for _, f := range r.Filters() {
			if !seen[f] {
				seen[f] = true
				u.filters = append(u.filters, f)
			}
		}
	}
	return u
}

// routesFor picks the routes that take a received copy. With a subscription
// identifier, a route takes the copy of the first of its filters that matches (a
// broker sends one copy per matching subscription); without one, every route whose
// filters match takes it.
func (u *upstream) routesFor(topic string, subID *int) []*mapping.Route {
	var out []*mapping.Route
	for _, r := range u.routes {
		var firstMatch string
		for _, f := range r.Filters() {
			if mapping.MatchFilter(f, topic) {
				firstMatch = f
				break
			}
		}
		if firstMatch == "" {
			continue
		}
		if subID != nil && *subID >= 1 && *subID <= len(u.filters) && u.filters[*subID-1] != firstMatch {
			continue
		}
		out = append(out, r)
	}
	return out
}

// ready is nil once connected and subscribed.
func (u *upstream) ready(context.Context) error {
	switch {
	case !u.connected.Load():
		return fmt.Errorf("not connected to %s", u.cfg.Name)
	case !u.subscribed.Load():
		return fmt.Errorf("not subscribed on %s", u.cfg.Name)
	}
	return nil
}

func (u *upstream) start(ctx context.Context) error {
	u.ctx = ctx
	var urls []*url.URL
	for _, s := range u.cfg.URLs {
		p, err := url.Parse(s)
		if err != nil {
			return err
		}
		urls = append(urls, p)
	}
	tlsCfg, err := clientTLS(u.cfg.TLS)
	if err != nil {
		return err
	}
	sess := state.NewInMemory()
	if u.cfg.SessionDir != "" {
		dir := filepath.Join(u.cfg.SessionDir, u.cfg.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("session dir: %w", err)
		}
		cs, err := file.New(dir, "client-", ".pkt")
		if err != nil {
			return fmt.Errorf("session store: %w", err)
		}
		ss, err := file.New(dir, "server-", ".pkt")
		if err != nil {
			return fmt.Errorf("session store: %w", err)
		}
		sess = state.New(cs, ss)
	}
	if len(u.routes) == 0 {
		u.subscribed.Store(true)
	}
	cc := autopaho.ClientConfig{
		ServerUrls:                    urls,
		TlsCfg:                        tlsCfg,
		KeepAlive:                     u.cfg.KeepAlive,
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         uint32(u.cfg.SessionExpiry / time.Second),
		ReconnectBackoff:              autopaho.NewExponentialBackoff(100*time.Millisecond, 5*time.Second, 500*time.Millisecond, 2),
		ConnectTimeout:                10 * time.Second,
		ConnectUsername:               u.cfg.Username,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			u.connected.Store(true)
			subIDs := ca.Properties == nil || ca.Properties.SubIDAvailable
			u.log.Info("connected to broker", zap.Bool("session_present", ca.SessionPresent), zap.Bool("subscription_identifiers", subIDs))
			go u.subscribe(ctx, cm, subIDs)
		},
		OnConnectionDown: func() bool {
			u.connected.Store(false)
			u.subscribed.Store(len(u.routes) == 0)
			u.log.Warn("connection to broker lost")
			return true
		},
		OnConnectError: func(err error) { u.log.Warn("connect to broker failed", zap.Error(err)) },
		ClientConfig: paho.ClientConfig{
			ClientID:                   u.cfg.ClientID,
			Session:                    sess,
			EnableManualAcknowledgment: true,
			SendAcksInterval:           time.Millisecond,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){u.received},
			OnClientError:              func(err error) { u.log.Warn("mqtt client error", zap.Error(err)) },
		},
	}
	if u.cfg.Password != "" {
		cc.ConnectPassword = []byte(u.cfg.Password)
	}
	cm, err := autopaho.NewConnection(ctx, cc)
	if err != nil {
		return err
	}
	u.cm = cm
	return nil
}

// subscribe makes the subscriptions of this connection (every connect: the broker may
// have dropped the session): one SUBSCRIBE per filter, each with its subscription
// identifier, or, when the broker has none, one SUBSCRIBE for all.
func (u *upstream) subscribe(ctx context.Context, cm *autopaho.ConnectionManager, subIDs bool) {
	if len(u.filters) == 0 {
		return
	}
	qos := map[string]byte{}
	for _, r := range u.routes {
		for _, f := range r.Filters() {
			qos[f] = max(qos[f], byte(config.QoSOr(r.Cfg.QoS, 1)))
		}
	}
	opts := func(f string) paho.SubscribeOptions {
		return paho.SubscribeOptions{Topic: f, QoS: qos[f], NoLocal: true, RetainAsPublished: true}
	}
	var reqs []*paho.Subscribe
	if subIDs {
		for i, f := range u.filters {
			id := i + 1
			reqs = append(reqs, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{opts(f)}, Properties: &paho.SubscribeProperties{SubscriptionIdentifier: &id}})
		}
	} else {
		all := &paho.Subscribe{}
		for _, f := range u.filters {
			all.Subscriptions = append(all.Subscriptions, opts(f))
		}
		reqs = append(reqs, all)
	}
	for _, req := range reqs {
		backoff := 100 * time.Millisecond
		for {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			sa, err := cm.Subscribe(sctx, req)
			cancel()
			if sa != nil {
				for i, rc := range sa.Reasons {
					if rc >= 0x80 && i < len(req.Subscriptions) {
						u.log.Error("subscription refused", zap.String("filter", req.Subscriptions[i].Topic), zap.Uint8("reason", rc))
					}
				}
				break
			}
			u.log.Error("subscribe failed; retrying", zap.Error(err))
			if !u.connected.Load() || !retry(ctx, &backoff) {
				return // the next connection subscribes again
			}
		}
	}
	u.subscribed.Store(true)
	u.log.Info("subscribed", zap.Int("filters", len(u.filters)), zap.Bool("subscription_identifiers", subIDs))
}

// received is paho's callback, called in the order messages arrive.
func (u *upstream) received(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	msg := fromPaho(p)
	var subID *int
	if p.Properties != nil {
		subID = p.Properties.SubscriptionIdentifier
	}
	in := &inbound{msg: msg, routes: u.routesFor(msg.Topic, subID), pkt: p, client: pr.Client, at: time.Now()}
	// acknowledge: routed answers at once when every route taking it says so.
	routed := true
	for _, r := range in.routes {
		routed = routed && r.Cfg.Acknowledge == config.AckRouted
	}
	if len(in.routes) == 0 || routed {
		u.ack(in)
	}
	if len(in.routes) > 0 {
		select {
		case u.in <- in:
		case <-u.ctx.Done(): // shutting down: the broker redelivers it
		}
	}
	return true, nil
}

func (u *upstream) ack(in *inbound) {
	if in.acked {
		return
	}
	in.acked = true
	if in.pkt.QoS == 0 {
		return
	}
	if err := in.client.Ack(in.pkt); err != nil && !errors.Is(err, paho.ErrPacketNotFound) {
		u.log.Warn("ack failed", zap.Error(err))
	}
}

// run stores batches of received messages, then acknowledges them in order. A failed
// append is retried (only the partitions that failed) until it succeeds or ctx ends:
// nothing is acknowledged that is not stored.
func (u *upstream) run(ctx context.Context) {
	for {
		var first *inbound
		select {
		case first = <-u.in:
		case <-ctx.Done():
			return
		}
		batch := []*inbound{first}
	drain:
		for len(batch) < upstreamBatch {
			select {
			case in := <-u.in:
				batch = append(batch, in)
			default:
				break drain
			}
		}
		msgs := make([]*mapping.Message, len(batch))
		routes := make([][]*mapping.Route, len(batch))
		at := make([]time.Time, len(batch))
		for i, in := range batch {
			msgs[i], routes[i], at[i] = in.msg, in.routes, in.at
		}
		u.b.m.held.Add(float64(len(batch)))
		if err := u.storeBatch(ctx, msgs, routes, at); err != nil {
			u.b.m.held.Sub(float64(len(batch)))
			return // ctx ended: the broker redelivers what was not acknowledged
		}
		u.b.m.held.Sub(float64(len(batch)))
		for _, in := range batch {
			u.ack(in)
		}
	}
}

func (u *upstream) storeBatch(ctx context.Context, msgs []*mapping.Message, routes [][]*mapping.Route, at []time.Time) error {
	backoff := 100 * time.Millisecond
	wait := func() error {
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(backoff*2, 5*time.Second)
		return nil
	}
	var groups []*target
	for {
		var err error
		groups, _, err = u.b.build(ctx, msgs, routes, at)
		if err == nil {
			break
		}
		u.log.Warn("partition lookup failed; retrying", zap.Error(err))
		if err := wait(); err != nil {
			return err
		}
	}
	// A partition's share larger than one Append may carry (storage-core would refuse
	// it every time) goes in several, one round after another, so each partition still
	// gets its records in order.
	for _, round := range appendRounds(groups, u.b.store.batchLimit) {
		for {
			err := u.b.appendGroups(ctx, round)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			u.log.Warn("append failed; retrying before acknowledging", zap.Error(err))
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendRounds splits groups into rounds of Appends: round k holds the k-th part of
// each group, a group's records cut into parts of at most limit(topic) bytes (estimated,
// recordsBytes; a record larger on its own is a part alone). Most batches are one round
// of the groups as they are.
func appendRounds(groups []*target, limit func(topic string) int) [][]*target {
	var rounds [][]*target
	for _, g := range groups {
		max := limit(g.topic)
		start, size := 0, batchOverhead
		part := 0
		cut := func(end int) {
			if part == len(rounds) {
				rounds = append(rounds, nil)
			}
			rounds[part] = append(rounds[part], &target{topic: g.topic, partition: g.partition, route: g.route,
				recs: g.recs[start:end], received: g.received[start:end]})
			part++
			start, size = end, batchOverhead
		}
		for i := range g.recs {
			b := recordsBytes(g.recs[i : i+1])
			if i > start && size+b > max {
				cut(i)
			}
			size += b
		}
		cut(len(g.recs))
	}
	return rounds
}

// publish sends m to the broker and waits for its acknowledgement (QoS 1/2).
func (u *upstream) publish(ctx context.Context, m mapping.Message) (byte, error) {
	if err := u.cm.AwaitConnection(ctx); err != nil {
		return 0, err
	}
	resp, err := u.cm.Publish(ctx, toPaho(m))
	if resp != nil && resp.ReasonCode >= 0x80 {
		return resp.ReasonCode, nil // refused: paho reports it as an error too
	}
	if err != nil {
		return 0, err
	}
	if resp == nil {
		return 0, nil
	}
	return resp.ReasonCode, nil
}

func (u *upstream) stop(ctx context.Context) {
	if u.cm == nil {
		return
	}
	_ = u.cm.Disconnect(ctx)
	<-u.cm.Done()
}

func fromPaho(p *paho.Publish) *mapping.Message {
	m := &mapping.Message{Topic: p.Topic, Payload: p.Payload, QoS: p.QoS, Retain: p.Retain}
	if pp := p.Properties; pp != nil {
		m.ContentType = pp.ContentType
		m.CorrelationData = pp.CorrelationData
		m.PayloadFormatIndicator = pp.PayloadFormat
		m.ResponseTopic = pp.ResponseTopic
		m.MessageExpiryInterval = pp.MessageExpiry
		for _, up := range pp.User {
			m.UserProperties = append(m.UserProperties, mapping.UserProperty{Key: up.Key, Value: up.Value})
		}
	}
	return m
}

func toPaho(m mapping.Message) *paho.Publish {
	p := &paho.Publish{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain, Properties: &paho.PublishProperties{
		ContentType:     m.ContentType,
		CorrelationData: m.CorrelationData,
		ResponseTopic:   m.ResponseTopic,
		PayloadFormat:   m.PayloadFormatIndicator,
		MessageExpiry:   m.MessageExpiryInterval,
	}}
	for _, up := range m.UserProperties {
		p.Properties.User = append(p.Properties.User, paho.UserProperty{Key: up.Key, Value: up.Value})
	}
	return p
}

func clientTLS(t *config.TLSConfig) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	c := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify, ServerName: t.ServerName, MinVersion: tls.VersionTLS12} //nolint:gosec // opt-in
	if t.CAFile != "" {
		pool, err := loadPool(t.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificates", path)
	}
	return pool, nil
}
