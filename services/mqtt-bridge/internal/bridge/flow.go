package bridge

import (
	"sync"

	"go.uber.org/zap"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/sessions"
)

// released marks a PUBLISH that a client's flow hands back to the library once it is
// answered (Reason Code is not part of a PUBLISH, so no packet read from a client
// carries one): storeHook.OnPublish lets it through at once, and the library then
// acknowledges, retains and delivers it.
const released = 0xff

// flows holds each connected client's flow (*mqtt.Client → *flow).
type flows struct{ m sync.Map }

// of is cl's flow, made (with its goroutine) on its first QoS 1/2 PUBLISH.
func (fs *flows) of(l *listener, cl *mqtt.Client) *flow {
	if f, ok := fs.m.Load(cl); ok {
		return f.(*flow)
	}
	f, loaded := fs.m.LoadOrStore(cl, &flow{l: l, cl: cl, wake: make(chan struct{}, 1), stop: make(chan struct{})})
	if !loaded {
		go f.(*flow).run()
	}
	return f.(*flow)
}

// forget drops cl's flow (its connection ended): its goroutine answers what the
// flow still holds (to nobody: the writes fail) and ends.
func (fs *flows) forget(cl *mqtt.Client) {
	if f, ok := fs.m.LoadAndDelete(cl); ok {
		close(f.(*flow).stop)
	}
}

// flow is one connection's QoS 1/2 publishes waiting for their answer, in the order
// they arrived. The client's read loop only queues them (a stored one with its append
// queued), so that it goes on reading and everything a client has in flight is stored
// together: the store joins concurrent appends to one channel into one Append (one
// fsync). The flow's goroutine (run, for as long as the connection) answers them in
// order: PUBACK or PUBREC after the message is durable, in the order the PUBLISHes
// came, as MQTT 5 section 4.6 requires; a refusal where it fell in that order.
type flow struct {
	l    *listener
	cl   *mqtt.Client
	wake chan struct{} // a publish was queued
	stop chan struct{} // closed once the connection ended

	mu    sync.Mutex
	queue []*pending
	// unanswered counts the queue's publishes whose answer is not on its way yet (the
	// one being answered leaves it before its answer is written: the client may send
	// the next PUBLISH as soon as it has the answer).
	unanswered int
}

// pending is one QoS 1/2 PUBLISH of a flow.
type pending struct {
	pk packets.Packet
	// queued, when set, are the message's appends (msg's) to wait for (in the flow's
	// goroutine: outcome); without them the answer is code.
	queued *queued
	msg    *mapping.Message
	// code is the answer: success (the library then acknowledges and delivers the
	// message), or the refusal.
	code packets.Code
	// rc is the persistent session's receipt, released once answered.
	rc *sessions.Receipt
	// first, for a QoS 2 PUBLISH repeated while the first one is still queued, is
	// that first one: the repeat gets its answer and is neither stored nor delivered
	// again [MQTT-4.3.3-10].
	first *pending
}

// idle reports whether nothing of f waits for its answer: a publish the read loop
// answers itself then keeps the order.
func (f *flow) idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue) == 0
}

// reserve counts p as unanswered and finds the queued PUBLISH it repeats, if any
// (p.first). It returns false, counting nothing, when the client has more in flight
// than its Receive Maximum allows. The read loop then queues p with enqueue.
func (f *flow) reserve(p *pending) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unanswered >= int(f.l.srv.Options.Capabilities.ReceiveMaximum) {
		return false
	}
	f.unanswered++
	if p.pk.FixedHeader.Qos == 2 {
		for _, q := range f.queue {
			if q.pk.FixedHeader.Qos == 2 && q.pk.PacketID == p.pk.PacketID && q.first == nil {
				p.first = q
				break
			}
		}
	}
	return true
}

// enqueue queues p (reserved) behind what f holds, and wakes f's goroutine unless
// it is busy with an earlier publish and p's appends will wake it once answered
// (queued.wakes). An idle goroutine is always woken: it must learn p's deadline, since
// an append storage-core does not answer is sent again until it is, and its wake
// may never come.
func (f *flow) enqueue(p *pending) {
	// Looked at before f's goroutine can see p (and its groups change): if p's appends
	// are answered after this, their wake comes after it too.
	later := p.queued != nil && p.queued.wakes && !p.queued.ready()
	f.mu.Lock()
	busy := len(f.queue) > 0
	f.queue = append(f.queue, p)
	f.mu.Unlock()
	if later && busy {
		return
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// push reserves and queues p; false as reserve.
func (f *flow) push(p *pending) bool {
	if !f.reserve(p) {
		return false
	}
	f.enqueue(p)
	return true
}

// run answers f's queue in order, until the connection ended and the queue is empty.
// While the answers at the head of the queue are known already, the connection is
// corked, so that they are written together; it is uncorked before run waits.
func (f *flow) run() {
	conn, _ := f.cl.Net.Conn.(*corkConn)
	corked := false
	uncork := func() {
		if corked {
			conn.uncork()
			corked = false
		}
	}
	defer uncork()
	for {
		f.mu.Lock()
		var p *pending
		if len(f.queue) > 0 {
			p = f.queue[0]
		}
		f.mu.Unlock()
		if p == nil {
			uncork()
			select {
			case <-f.wake:
				continue
			case <-f.stop:
				f.mu.Lock()
				empty := len(f.queue) == 0
				f.mu.Unlock()
				if empty {
					return
				}
				continue
			}
		}
		switch {
		case p.queued != nil && !p.queued.ready():
			uncork()
			if p.queued.wakes {
				// Woken as its appends are answered (or when f's next publish comes);
				// at its deadline or once the connection ended, wait in answer.
				select {
				case <-f.wake:
					continue
				case <-p.queued.ctx.Done():
				case <-f.stop:
				}
			}
		case conn != nil && !corked:
			conn.cork()
			corked = true
		}
		f.answer(p, uncork)
		f.mu.Lock()
		f.queue[0] = nil
		f.queue = f.queue[1:]
		f.mu.Unlock()
	}
}

// outcome waits for p's appends and returns its answer: success once they are all
// durable, 0x97 otherwise (a message left in doubt is remembered for its retry).
func (f *flow) outcome(p *pending) packets.Code {
	l := f.l
	err := p.queued.wait()
	l.b.m.held.Dec()
	<-l.slots
	if err != nil {
		if inDoubtGroups(p.queued.groups) {
			l.doubts.keep(f.cl.ID, p.msg, p.queued.groups)
		}
		l.log.Warn("store failed; refusing the publish", zap.String("client", f.cl.ID), zap.Error(err))
		return packets.ErrQuotaExceeded
	}
	return packets.CodeSuccess
}

// answer waits for p's outcome and answers it; blocked is called before it waits for
// a subscriber's room (pace).
//
// A stored QoS 1 message that is not retained and that no one subscribes to is
// acknowledged here, with a PUBACK 0x00: handed back to the library, it would only run
// its hooks again, keep the PUBACK in flight for a moment and look for subscribers
// once more, which is about a sixth of the listener's CPU per message when every client
// keeps one message in flight.
func (f *flow) answer(p *pending, blocked func()) {
	h := &storeHook{l: f.l}
	if p.queued != nil {
		p.code = f.outcome(p)
	}
	direct := p.code == packets.CodeSuccess && p.first == nil && p.pk.FixedHeader.Qos == 1 &&
		!p.pk.FixedHeader.Retain && !f.l.subscribed(p.pk.TopicName)
	if p.code == packets.CodeSuccess && p.first == nil && !direct {
		f.l.pace.hold(f.l.b.ctx, p.pk.TopicName, p.pk.FixedHeader.Qos, f.cl, blocked)
	}
	f.mu.Lock()
	f.unanswered--
	f.mu.Unlock()
	switch {
	case p.first != nil && p.first.code != packets.CodeSuccess:
		_, _ = h.refuse(f.cl, p.pk, p.first.code)
	case p.first != nil:
		_ = f.cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: p.pk.PacketID})
	case p.code != packets.CodeSuccess:
		_, _ = h.refuse(f.cl, p.pk, p.code)
	case direct:
		f.l.pace.acked(f.cl) // as the library's OnQosComplete for its PUBACK
		_ = f.cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.pk.PacketID})
	default:
		pk := p.pk
		pk.ReasonCode = released
		// The alias was resolved on the way in; setting it again now could undo a
		// later PUBLISH's change of it.
		pk.Properties.TopicAlias, pk.Properties.TopicAliasFlag = 0, false
		_ = f.l.srv.InjectPacket(f.cl, pk)
	}
	if p.rc != nil {
		f.l.sessions.Release(p.rc)
	}
}
