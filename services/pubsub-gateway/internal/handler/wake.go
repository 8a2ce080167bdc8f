package handler

import (
	"sync"

	"github.com/tributary/tributary/libs/natsx"
)

// Wake-ups between replicas (DESIGN §4). A StreamingPull's flow-control window counts
// the messages it delivered until their leases end, and a lease can end where this
// replica does not see it: an ack or nack through another replica, an expiry, a seek.
// So a replica that ends leases it does not track itself announces the queue on NATS
// (natsx.QueueChangedSubject, no payload), the coordinator's ack-deadline sweep
// announces the queues where leases expired, and every replica wakes its streams of an
// announced queue, which re-read their leases from storage-core (GetLeases) instead of
// waiting for the deadlines they know. Without NATS, streams whose window is full
// re-read every leaseRecheck instead.
//
// Pull, push and a StreamingPull with room in its window wait inside storage-core's
// Receive, which storage-core itself wakes when a message becomes available (an
// append, a nack, an expiry, a backoff ending); publishes therefore need no
// announcement.

// Announcer carries announcements between the replicas (NATS). A nil Announcer in
// Deps means no other replica hears of this one: streams poll.
type Announcer interface {
	// Announce tells the other replicas that leases of queue ended.
	Announce(queue string)
	// Live reports whether announcements currently flow both ways.
	Live() bool
}

// listeners maps queue tokens (natsx.QueueToken) to the streams of this replica that
// track leases of that queue.
type listeners struct {
	mu      sync.Mutex
	byToken map[string]map[*stream]struct{}
}

func newListeners() *listeners { return &listeners{byToken: map[string]map[*stream]struct{}{}} }

func (l *listeners) add(s *stream) {
	tok := natsx.QueueToken(s.queue)
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.byToken[tok]
	if set == nil {
		set = map[*stream]struct{}{}
		l.byToken[tok] = set
	}
	set[s] = struct{}{}
}

func (l *listeners) remove(s *stream) {
	tok := natsx.QueueToken(s.queue)
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byToken[tok], s)
	if len(l.byToken[tok]) == 0 {
		delete(l.byToken, tok)
	}
}

// wake marks the streams of token stale (their leases are re-read) and wakes them;
// token "" wakes every stream. One token is a map lookup: the sweep may announce
// thousands of queues a tick, and each announcement must not cost every open queue.
func (l *listeners) wake(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token != "" {
		wakeAll(l.byToken[token])
		return
	}
	for _, set := range l.byToken {
		wakeAll(set)
	}
}

func wakeAll(set map[*stream]struct{}) {
	for s := range set {
		s.stale.Store(true)
		s.notify()
	}
}

// Wake is called for each announcement heard on NATS: token is the announced queue's
// natsx.QueueToken, or "" after a reconnect (announcements may have been missed), which
// wakes every stream.
func (h *Subscriber) Wake(token string) { h.listeners.wake(token) }

// leasesEnded records that ids (leases of queue, as an ack or nack settled them) ended:
// the streams of this replica tracking them free their windows, and when some are not
// tracked here the other replicas are told.
func (h *Subscriber) leasesEnded(queue string, ids []string) {
	if untracked := h.streams.done(queue, ids); len(untracked) > 0 && h.announce != nil {
		h.announce.Announce(queue)
	}
}

// queueChanged wakes every stream of queue, here and on the other replicas (a seek
// ended all its leases).
func (h *Subscriber) queueChanged(queue string) {
	h.listeners.wake(natsx.QueueToken(queue))
	if h.announce != nil {
		h.announce.Announce(queue)
	}
}

// announceLive reports whether announcements flow (false without an Announcer).
func (h *Subscriber) announceLive() bool { return h.announce != nil && h.announce.Live() }
