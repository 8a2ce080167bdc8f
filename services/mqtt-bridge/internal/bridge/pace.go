package bridge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"go.uber.org/zap"
)

// Bounds of what the listener keeps for one subscriber, in QoS 1/2 messages sent to it
// and not yet acknowledged (or waiting to be sent, beyond its Receive Maximum).
const (
	// subscriberQueue: while a subscriber holds this many (or its MQTT 5 Receive
	// Maximum, when smaller), publishers of messages it gets wait (see pace), as
	// Mosquitto's max_queued_messages (1,000) bounds a client's queue.
	subscriberQueue = 1000
	// subscriberHardQueue: the most it holds (room for what publishers that checked at
	// the same moment add); a message past it is not delivered to it (counted in
	// tributary_mqtt_listener_dropped_total). Only a stalled subscriber gets there.
	subscriberHardQueue = 2 * subscriberQueue
	// subscriberWritesPending: packets waiting to be written to one connection (the
	// QoS 1/2 ones above and QoS 0 messages, which are not waited for); a QoS 0 message
	// past it is not delivered to that subscriber, and counted.
	subscriberWritesPending = subscriberHardQueue + 1024
)

// paceWait is how often a held publisher looks at the subscribers again.
const paceWait = time.Millisecond

// pace pushes back on publishers instead of dropping messages for subscribers that
// keep up but are slower than them for a while: before a QoS 1/2 message is handed to
// the library for delivery (in its client's flow, so that its PUBACK and the ones
// after it wait, and the client stops at its Receive Maximum; a kafka-to-mqtt one in
// its sink), it waits while a subscriber that gets it at QoS 1/2 holds a full queue and
// is not stalled. QoS 0 messages are not held (a subscriber gets them at QoS 0, which
// the library queues only for writing, up to subscriberWritesPending).
type pace struct {
	l *listener
	// stall is the listener's subscriber-stall-timeout: how long a subscriber holding
	// a full queue may go without acknowledging anything before it is taken for
	// stalled; publishers then stop waiting for it, and what it cannot hold is
	// dropped for it (counted, and logged with its client id).
	stall   atomic.Int64 // time.Duration
	clients sync.Map     // *mqtt.Client → *subscriberPace
}

// subscriberPace is what pace knows of one subscriber.
type subscriberPace struct {
	// acked is when it last completed a QoS 1/2 delivery (unix ns).
	acked atomic.Int64
	// fullSince is when it was first seen with a full queue since it last was not
	// (unix ns; 0: not full).
	fullSince atomic.Int64
	// dropped counts messages not delivered to it; logged counts what was logged.
	dropped, logged atomic.Int64
	// admitted counts messages admitted for it that the library does not hold yet;
	// admittedAt is when the last one was (unix ns).
	admitted   atomic.Int32
	admittedAt atomic.Int64
}

func (p *pace) of(cl *mqtt.Client) *subscriberPace {
	if s, ok := p.clients.Load(cl); ok {
		return s.(*subscriberPace)
	}
	s, _ := p.clients.LoadOrStore(cl, new(subscriberPace))
	return s.(*subscriberPace)
}

// acked records that cl completed a QoS 1/2 delivery (PUBACK, PUBCOMP).
func (p *pace) acked(cl *mqtt.Client) {
	if s, ok := p.clients.Load(cl); ok {
		s.(*subscriberPace).acked.Store(time.Now().UnixNano())
	}
}

// forget drops cl (disconnected), logging what was dropped for it.
func (p *pace) forget(cl *mqtt.Client) {
	if s, ok := p.clients.LoadAndDelete(cl); ok {
		if n := s.(*subscriberPace).dropped.Load(); n > 0 {
			p.l.log.Warn("subscriber disconnected; messages were dropped for it", zap.String("client", cl.ID), zap.Int64("dropped", n))
		}
	}
}

// hold waits until every subscriber of topic that gets it at QoS 1/2 (published at
// qos by origin, nil for kafka-to-mqtt) has room for it, or is stalled, or ctx ends (see admit).
func (p *pace) hold(ctx context.Context, topic string, qos byte, origin *mqtt.Client) {
	for !p.admit(topic, qos, origin) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(paceWait):
		}
	}
}

// admit reports whether every subscriber of topic that gets it at QoS 1/2 (published
// at qos by origin) has room for one more message (fewer than
// subscriberQueue, or its MQTT 5 Receive Maximum, held or admitted), or is stalled;
// if so, the message is admitted: counted for each of them until the library holds
// it. A stalled one whose queue is at subscriberHardQueue is counted as dropping it.
//
// The library's own Receive Maximum handling (its send quota) is off (see
// storeHook.OnSessionEstablished): admit keeps a subscriber within its Receive
// Maximum instead.
func (p *pace) admit(topic string, qos byte, origin *mqtt.Client) bool {
	if qos == 0 {
		return true
	}
	srv := p.l.srv
	subs := srv.Topics.Subscribers(topic)
	if len(subs.Subscriptions) == 0 {
		return true
	}
	now := time.Now().UnixNano()
	var taken []*subscriberPace
	ok := true
	for id, sub := range subs.Subscriptions {
		if sub.Qos == 0 {
			continue
		}
		cl, found := srv.Clients.Get(id)
		if !found || sub.NoLocal && cl == origin || cl.Closed() || cl.Net.Conn == nil {
			continue
		}
		limit := int32(subscriberQueue)
		if rm := int32(cl.Properties.Props.ReceiveMaximum); cl.Properties.ProtocolVersion == 5 && rm > 0 && rm < limit {
			limit = rm
		}
		s := p.of(cl)
		n := int32(cl.State.Inflight.Len())
		if s.reserve(n, limit, now) {
			if s.fullSince.Load() != 0 {
				s.fullSince.Store(0)
			}
			taken = append(taken, s)
			continue
		}
		since := s.fullSince.Load()
		if since == 0 {
			s.fullSince.Store(now)
			since = now
		}
		if now-max(since, s.acked.Load()) < p.stall.Load() {
			ok = false
			break
		}
		if n >= subscriberHardQueue {
			p.dropped(cl, s)
		}
	}
	if !ok {
		for _, s := range taken {
			s.delivered()
		}
	}
	return ok
}

// admitStale is how long an admission may wait for the library to hold its message:
// the library hands it over at once, or never does (a NoLocal subscription, an ACL
// refusal, the connection closing); older admissions are forgotten.
const admitStale = time.Second

// reserve admits one more message for a subscriber holding n of at most limit.
func (s *subscriberPace) reserve(n, limit int32, now int64) bool {
	for {
		r := s.admitted.Load()
		if r > 0 && now-s.admittedAt.Load() > int64(admitStale) && s.admitted.CompareAndSwap(r, 0) {
			r = 0
		}
		if n+r >= limit {
			return false
		}
		if s.admitted.CompareAndSwap(r, r+1) {
			s.admittedAt.Store(now)
			return true
		}
	}
}

// delivered ends an admission: the library holds the message now (or it was not
// delivered after all).
func (s *subscriberPace) delivered() {
	for {
		r := s.admitted.Load()
		if r <= 0 || s.admitted.CompareAndSwap(r, r-1) {
			return
		}
	}
}

// queued records that the library holds one more QoS 1/2 message for cl.
func (p *pace) queued(cl *mqtt.Client) {
	if s, ok := p.clients.Load(cl); ok {
		s.(*subscriberPace).delivered()
	}
}

// dropped counts a message not delivered to the stalled subscriber cl, and logs it
// (at the first drop, then every 1,000).
func (p *pace) dropped(cl *mqtt.Client, s *subscriberPace) {
	n := s.dropped.Add(1)
	if l := s.logged.Load(); (l == 0 || n-l >= 1000) && s.logged.CompareAndSwap(l, n) {
		p.l.log.Warn("subscriber stalled (its queue is full and it acknowledged nothing for the stall timeout); messages to it are dropped",
			zap.String("client", cl.ID), zap.Int("queue", cl.State.Inflight.Len()), zap.Int64("dropped", n), zap.Duration("stall_timeout", time.Duration(p.stall.Load())))
	}
}
