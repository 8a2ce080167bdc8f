package sessions

// The session state the broker's events change (the bridge's broker hook calls these),
// and what the broker reads back at start. Client ids are MQTT client identifiers;
// the records are mochi's storage types, as the journal keeps them.

import (
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
)

// Establish records a session being established (before its CONNACK), synced: a
// CONNACK never promises a session a crash could lose. A new session (present false:
// Session Present 0) or one that ends with its connection (persistent false) first
// ends what was kept under its client id; a persistent one is kept, as rec, connected
// from now (rec is only read when persistent and Journaled).
func (s *Store) Establish(client string, present, persistent bool, rec storage.Client) {
	s.mu.Lock()
	wrote := false
	if !present || !persistent {
		wrote = s.endSession(client)
	}
	if persistent && s.j != nil {
		wrote = true
		c := s.clients[client]
		if c == nil {
			c = &storedClient{}
			s.clients[client] = c
		}
		if c.Connected == 0 {
			s.online++
		}
		c.Client, c.Connected = rec, time.Now().UnixMilli()
		s.write(jsonRecord(recClient, c))
	}
	s.mu.Unlock()
	if wrote {
		s.sync()
	}
}

// AddSubscriptions records, synced, those of subs (all the subscriptions a kept
// session has in the broker) that the store does not hold: those of a session that
// was not persistent until this connection.
func (s *Store) AddSubscriptions(client string, subs []storage.Subscription) {
	s.mu.Lock()
	wrote := false
	if s.clients[client] != nil {
		for _, sub := range subs {
			if _, ok := s.subs[client][sub.Filter]; ok {
				continue
			}
			s.putSub(sub)
			s.write(jsonRecord(recSub, sub))
			wrote = true
		}
	}
	s.mu.Unlock()
	if wrote {
		s.sync()
	}
}

// EndSession ends client's kept session (a connection whose session ends with it, an
// expiry interval that ran out), in the journal too.
func (s *Store) EndSession(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endSession(client)
}

// Disconnected notes that a kept session went offline now, as rec (its expiry
// interval runs from then; a DISCONNECT may have changed it).
func (s *Store) Disconnected(client string, rec storage.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[client]
	if c == nil || s.j == nil {
		return
	}
	if c.Connected != 0 {
		s.online--
	}
	c.Client, c.Connected, c.Disconnected = rec, 0, time.Now().UnixMilli()
	s.write(jsonRecord(recClient, c))
}

// Subscribed records a kept session's granted subscriptions, synced (before the
// SUBACK).
func (s *Store) Subscribed(client string, subs []storage.Subscription) {
	s.mu.Lock()
	if s.clients[client] == nil {
		s.mu.Unlock()
		return
	}
	for _, sub := range subs {
		s.putSub(sub)
		s.write(jsonRecord(recSub, sub))
	}
	s.mu.Unlock()
	s.sync()
}

// Unsubscribed forgets a session's subscriptions to filters, synced (before the
// UNSUBACK).
func (s *Store) Unsubscribed(client string, filters []string) {
	s.mu.Lock()
	wrote := false
	for _, f := range filters {
		if _, ok := s.subs[client][f]; ok {
			delete(s.subs[client], f)
			s.write(jsonRecord(recUnsub, storage.Subscription{Client: client, Filter: f}))
			wrote = true
		}
	}
	s.mu.Unlock()
	if wrote {
		s.sync()
	}
}

// Retain records the broker's retained message m for its topic.
func (s *Store) Retain(m storage.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retained[m.TopicName] = m
	s.write(jsonRecord(recRetain, m))
}

// ClearRetained forgets the retained message of topic (cleared, or expired).
func (s *Store) ClearRetained(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.retained[topic]; ok {
		delete(s.retained, topic)
		s.write(append([]byte{recRetainRm}, topic...))
	}
}

// WillSent records that a kept session's will was published, leaving it will (it is
// not sent again).
func (s *Store) WillSent(client string, will storage.ClientWill) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[client]; c != nil {
		c.Client.Will = will
		s.write(jsonRecord(recClient, c))
	}
}

// PutInflight records a QoS 1/2 flow of a kept session: a message to the
// client (queued or sent, or its PUBREL), or the PUBREC of a QoS 2 message from it.
// rec builds the record; it is called (with the store locked) only for a kept session.
func (s *Store) PutInflight(client string, rec func() storage.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[client] == nil {
		return
	}
	m := rec()
	s.putInflight(m)
	s.write(jsonRecord(recInflight, m))
}

// InflightDone forgets client's QoS 1/2 flow packetID (finished, or given up).
func (s *Store) InflightDone(client string, packetID uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.inflight[client][packetID]; ok {
		delete(s.inflight[client], packetID)
		s.write(jsonRecord(recInflightRm, storage.Message{Client: client, PacketID: packetID}))
	}
}

// Clients are the kept sessions, each with what remains of its expiry interval, so
// that it expires when it would have had the bridge not stopped.
func (s *Store) Clients() []storage.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]storage.Client, 0, len(s.clients))
	for _, c := range s.clients {
		sc := c.Client
		if sc.ProtocolVersion == 5 && sc.Properties.SessionExpiryIntervalFlag {
			left := remainingExpiry(c, now)
			sc.Properties.SessionExpiryInterval = uint32(max(1, (left+time.Second-1)/time.Second))
		}
		out = append(out, sc)
	}
	return out
}

// Subscriptions are the kept sessions' subscriptions.
func (s *Store) Subscriptions() []storage.Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storage.Subscription
	for _, m := range s.subs {
		for _, sub := range m {
			out = append(out, sub)
		}
	}
	return out
}

// Inflight are the kept sessions' QoS 1/2 flows.
func (s *Store) Inflight() []storage.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storage.Message
	for _, m := range s.inflight {
		for _, msg := range m {
			out = append(out, msg)
		}
	}
	return out
}

// Retained are the broker's retained messages.
func (s *Store) Retained() []storage.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]storage.Message, 0, len(s.retained))
	for _, m := range s.retained {
		out = append(out, m)
	}
	return out
}
