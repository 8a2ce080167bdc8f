package bridge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
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
	// sessionBytes and totalBytes are listener.queue-bytes: the message bytes (payload
	// and topic) one subscriber, and all of them together, may hold sent and not
	// acknowledged before publishers wait (or, for a stalled subscriber, its new QoS
	// 1/2 messages are dropped). queuedBytes is what all of them hold now; bytesDropped
	// counts the messages dropped for that bound.
	sessionBytes, totalBytes atomic.Int64
	queuedBytes              atomic.Int64
	bytesDropped             atomic.Int64
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
	// bytes is what it holds (payload and topic bytes of the QoS 1/2 messages sent
	// and not acknowledged), sizes each one's by packet identifier; gone once forget
	// released them (a late holdBytes adds nothing then). A message the library takes
	// back without a hook (its write queue full) stays counted until its packet
	// identifier is used again or the subscriber disconnects.
	bytes   atomic.Int64
	sizesMu sync.Mutex
	sizes   map[uint16]int64
	gone    bool
	// drops is how many deliveries to it to refuse (messages admit dropped for it
	// past its queue bytes; the library's ACL check consumes them), droppedAt when the
	// last was added (unix ns). subscribing is set while its SUBSCRIBE's filters are
	// checked, which must not consume them.
	drops       atomic.Int32
	droppedAt   atomic.Int64
	subscribing atomic.Bool
}

// holdBytes records that the library holds msgBytes more for s under packet identifier
// id (a resend replaces what id held).
func (p *pace) holdBytes(s *subscriberPace, id uint16, msgBytes int64) {
	s.sizesMu.Lock()
	if s.gone {
		s.sizesMu.Unlock()
		return
	}
	if s.sizes == nil {
		s.sizes = map[uint16]int64{}
	}
	old := s.sizes[id]
	s.sizes[id] = msgBytes
	s.sizesMu.Unlock()
	s.bytes.Add(msgBytes - old)
	p.queuedBytes.Add(msgBytes - old)
}

// releaseBytes records that s acknowledged (or was dropped) the message of id.
func (p *pace) releaseBytes(s *subscriberPace, id uint16) {
	s.sizesMu.Lock()
	n, ok := s.sizes[id]
	delete(s.sizes, id)
	s.sizesMu.Unlock()
	if ok {
		s.bytes.Add(-n)
		p.queuedBytes.Add(-n)
	}
}

// overBytes reports whether s holds its queue bytes, or all subscribers together
// the total and s holds some of them.
func (p *pace) overBytes(s *subscriberPace) bool {
	b := s.bytes.Load()
	return b >= p.sessionBytes.Load() || b > 0 && p.queuedBytes.Load() >= p.totalBytes.Load()
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
		sp := s.(*subscriberPace)
		sp.sizesMu.Lock()
		p.queuedBytes.Add(-sp.bytes.Swap(0))
		sp.sizes, sp.gone = nil, true
		sp.sizesMu.Unlock()
		if n := sp.dropped.Load(); n > 0 {
			p.l.log.Warn("subscriber disconnected; messages were dropped for it", zap.String("client", cl.ID), zap.Int64("dropped", n))
		}
	}
}

// hold waits until every subscriber of topic that gets it at QoS 1/2 (published at
// qos by origin, nil for kafka-to-mqtt) has room for it, or is stalled, or ctx ends (see
// admit). blocked, when set, is called once before it first waits.
func (p *pace) hold(ctx context.Context, topic string, qos byte, origin *mqtt.Client, blocked func()) {
	for !p.admit(topic, qos, origin) {
		if blocked != nil {
			blocked()
			blocked = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(paceWait):
		}
	}
}

// subscribed reports whether any subscription (a client's, shared or inline) matches
// topic.
func (l *listener) subscribed(topic string) bool {
	s := l.srv.Topics.Subscribers(topic)
	return len(s.Subscriptions)+len(s.Shared)+len(s.InlineSubscriptions) > 0
}

// admit reports whether every subscriber of topic that gets it at QoS 1/2 (published
// at qos by origin) has room for one more message (fewer than
// subscriberQueue, or its MQTT 5 Receive Maximum, held or admitted), or is stalled;
// if so, the message is admitted: counted for each of them until the library holds
// it. A subscriber holding its queue bytes (sessionBytes, or some of totalBytes when
// all together hold that) has no room either. A stalled one whose queue is at
// subscriberHardQueue, or past its queue bytes, is counted as dropping it (and for
// the bytes, deliverable refuses the library's delivery).
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
	var drops []stalledDrop
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
		full := p.overBytes(s)
		if !full && s.reserve(n, limit, now) {
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
		// Stalled: past its queue bytes the message is dropped for it here (the
		// library's ACL check refuses the delivery); past subscriberHardQueue the
		// library drops it itself.
		if full || n >= subscriberHardQueue {
			drops = append(drops, stalledDrop{cl, s, full})
		}
	}
	if !ok {
		for _, s := range taken {
			s.delivered()
		}
		return false
	}
	for _, d := range drops {
		if d.bytes {
			d.s.droppedAt.Store(now)
			d.s.drops.Add(1)
			p.bytesDropped.Add(1)
		}
		p.dropped(d.cl, d.s)
	}
	return true
}

// stalledDrop is a message admit drops for a stalled subscriber, by its queue bytes
// or (bytes false) by its message count.
type stalledDrop struct {
	cl    *mqtt.Client
	s     *subscriberPace
	bytes bool
}

// deliverable is pace's part of the listener's read ACL check of a delivery to cl:
// false (using one up) while admit dropped messages for it past its queue bytes that
// the library has not tried to deliver yet; a SUBSCRIBE's own check never uses one.
func (p *pace) deliverable(cl *mqtt.Client) bool {
	v, ok := p.clients.Load(cl)
	if !ok {
		return true
	}
	s := v.(*subscriberPace)
	if s.subscribing.Load() {
		return true
	}
	for {
		d := s.drops.Load()
		if d <= 0 {
			return true
		}
		// A drop the library never came to (the subscriber went away meanwhile)
		// must not take a later message.
		if time.Now().UnixNano()-s.droppedAt.Load() > int64(admitStale) {
			s.drops.CompareAndSwap(d, 0)
			return true
		}
		if s.drops.CompareAndSwap(d, d-1) {
			return false
		}
	}
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

// queued records that the library holds one more QoS 1/2 message for cl, pk (its
// packet identifier and bytes).
func (p *pace) queued(cl *mqtt.Client, pk *packets.Packet) {
	if s, ok := p.clients.Load(cl); ok && !cl.Closed() {
		sp := s.(*subscriberPace)
		sp.delivered()
		p.holdBytes(sp, pk.PacketID, int64(len(pk.Payload)+len(pk.TopicName)))
	}
}

// completed records that cl acknowledged (or refused) the message of id.
func (p *pace) completed(cl *mqtt.Client, id uint16) {
	if s, ok := p.clients.Load(cl); ok {
		p.releaseBytes(s.(*subscriberPace), id)
	}
}

// subscribing marks cl while the library checks its SUBSCRIBE's filters.
func (p *pace) subscribing(cl *mqtt.Client, on bool) {
	if s, ok := p.clients.Load(cl); ok {
		s.(*subscriberPace).subscribing.Store(on)
	}
}

// dropped counts a message not delivered to the stalled subscriber cl, and logs it
// (at the first drop, then every 1,000).
func (p *pace) dropped(cl *mqtt.Client, s *subscriberPace) {
	n := s.dropped.Add(1)
	if l := s.logged.Load(); (l == 0 || n-l >= 1000) && s.logged.CompareAndSwap(l, n) {
		p.l.log.Warn("subscriber stalled (its queue or queue bytes are full and it acknowledged nothing for the stall timeout); messages to it are dropped",
			zap.String("client", cl.ID), zap.Int("queue", cl.State.Inflight.Len()), zap.Int64("queued_bytes", s.bytes.Load()),
			zap.Int64("dropped", n), zap.Duration("stall_timeout", time.Duration(p.stall.Load())))
	}
}
