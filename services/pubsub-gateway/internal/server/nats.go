package server

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/natsx"
)

// natsReconnectWait is the pause between NATS reconnect attempts.
const natsReconnectWait = time.Second

// natsBus is the gateway's NATS link (handler.Announcer): it announces the queues
// whose leases ended through this replica, and hands the announcements of the other
// replicas and of the coordinator's ack-deadline sweep to the handler. NATS carries
// wake-ups only: while it is down the gateway serves as before, its streams poll their
// leases, and the connection is retried forever in the background.
type natsBus struct {
	nc        *nats.Conn
	clusterID string
	log       *zap.Logger
	sub       *nats.Subscription
	failing   atomic.Bool // the last announcement failed (warned once per streak)
}

// newNATSBus returns a bus for cfg, not yet connected (connect).
func newNATSBus(cfg Config, log *zap.Logger) *natsBus {
	return &natsBus{clusterID: cfg.ClusterID, log: log}
}

// connect dials url in the background (it returns at once, also when the server is
// not reachable yet) and passes every queues.changed announcement's token to wake;
// after each (re)connect wake("") wakes every stream, since announcements may have
// been missed. Own announcements are not echoed back: the replica that sends one has
// already woken its own streams.
func (b *natsBus) connect(url string, wake func(token string)) error {
	log := b.log
	nc, err := nats.Connect(url,
		nats.Name("tributary-pubsub-gateway"),
		nats.NoEcho(),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
		nats.ConnectHandler(func(c *nats.Conn) {
			log.Info("nats connected", zap.String("url", c.ConnectedUrl()))
			wake("")
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected; lease wake-ups resume", zap.String("url", c.ConnectedUrl()))
			wake("")
		}),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if !c.IsClosed() {
				log.Warn("nats disconnected; streams poll their leases until it is back", zap.Error(err))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("nats error", zap.Error(err)) }),
	)
	if err != nil {
		return fmt.Errorf("nats %s: %w", url, err)
	}
	prefix := natsx.QueueChangedPrefix(b.clusterID)
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) { wake(strings.TrimPrefix(m.Subject, prefix)) })
	if err != nil {
		nc.Close()
		return fmt.Errorf("subscribe %s*: %w", prefix, err)
	}
	b.nc, b.sub = nc, sub
	return nil
}

// Announce publishes queue's change (no payload). A failure is logged once per streak:
// the other replicas' streams fall back to their rechecks.
func (b *natsBus) Announce(queue string) {
	err := b.nc.Publish(natsx.QueueChangedSubject(b.clusterID, queue), nil)
	switch {
	case err != nil && !b.failing.Swap(true):
		b.log.Warn("could not announce a lease change on nats", zap.String("queue", queue), zap.Error(err))
	case err == nil:
		b.failing.Store(false)
	}
}

// ready is the /readyz check: an error while the connection is down.
// Live reports whether the connection is up.
func (b *natsBus) Live() bool { return b.nc != nil && b.nc.IsConnected() }

func (b *natsBus) close() {
	if b.nc == nil {
		return
	}
	_ = b.sub.Unsubscribe()
	b.nc.Close()
}
