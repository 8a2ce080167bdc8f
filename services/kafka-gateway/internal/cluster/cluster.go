// Package cluster keeps the list of live kafka-gateway replicas. Each replica announces
// itself on NATS subject natsx.BrokersSubject ("tributary.<cluster-id>.kafka.brokers")
// every second with a JSON payload {node_id, host, port, rack, listeners: [{name, host,
// port}]} (host and port are the first listener's, as replicas before listeners
// announced them); entries not heard from for 5 s expire. The local
// replica is always in the list, so a gateway without NATS still serves (as a cluster of
// one). A starting replica's first announcement carries a reply subject; every peer
// answers it at once with its own announcement, so a new replica knows its peers after
// one round trip instead of after a full announcement interval (Synced).
package cluster

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/natsx"
)

// Defaults of the announcement protocol.
const (
	// AnnounceInterval is how often a replica announces itself.
	AnnounceInterval = time.Second
	// Expiry is how long an announcement keeps a replica in the list.
	Expiry = 5 * time.Second
	// DiscoveryWindow is how long a starting replica collects answers to its first
	// announcement before it reports itself Synced.
	DiscoveryWindow = 250 * time.Millisecond
)

// Member is one kafka-gateway replica, as announced on NATS.
type Member struct {
	NodeID int32   `json:"node_id"`
	Host   string  `json:"host"`
	Port   int32   `json:"port"`
	Rack   *string `json:"rack"`
	// Listeners are the replica's advertised endpoints by Kafka listener name (Kafka's
	// advertised.listeners); empty from a replica that predates listeners, whose one
	// endpoint (Host, Port) is PLAINTEXT.
	Listeners []Endpoint `json:"listeners,omitempty"`
}

// Endpoint is one advertised Kafka listener of a replica.
type Endpoint struct {
	Name string `json:"name"`
	Host string `json:"host"`
	Port int32  `json:"port"`
}

type seen struct {
	m  Member
	at time.Time
}

// Membership tracks the live replicas.
type Membership struct {
	self     Member
	subject  string
	log      *zap.Logger
	interval time.Duration
	expiry   time.Duration

	mu       sync.Mutex
	peers    map[int32]seen
	warnedID bool

	synced     chan struct{}
	syncedOnce sync.Once
}

// New returns a Membership for self in cluster clusterID.
func New(clusterID string, self Member, log *zap.Logger) *Membership {
	return &Membership{
		self:     self,
		subject:  natsx.BrokersSubject(clusterID),
		log:      log,
		interval: AnnounceInterval,
		expiry:   Expiry,
		peers:    map[int32]seen{},
		synced:   make(chan struct{}),
	}
}

// Synced is closed once the first discovery round over NATS is over: from then on Live
// includes every peer that was alive when this replica started.
func (m *Membership) Synced() <-chan struct{} { return m.synced }

// Self is the local replica.
func (m *Membership) Self() Member { return m.self }

// Live returns the live replicas sorted by node id, self always included. A peer
// announcing the local node id is ignored (the local replica wins).
func (m *Membership) Live() []Member {
	now := time.Now()
	m.mu.Lock()
	out := []Member{m.self}
	for id, s := range m.peers {
		if now.Sub(s.at) > m.expiry {
			delete(m.peers, id)
			continue
		}
		if id == m.self.NodeID {
			continue
		}
		out = append(out, s.m)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// observe records an announcement.
func (m *Membership) observe(mem Member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mem.NodeID == m.self.NodeID && (mem.Host != m.self.Host || mem.Port != m.self.Port) {
		if !m.warnedID {
			m.warnedID = true
			m.log.Warn("another kafka-gateway replica announces this node id; node ids must be unique",
				zap.Int32("node_id", mem.NodeID), zap.String("host", mem.Host), zap.Int32("port", mem.Port))
		}
		return
	}
	if _, known := m.peers[mem.NodeID]; !known && mem.NodeID != m.self.NodeID {
		m.log.Info("kafka-gateway replica joined", zap.Int32("node_id", mem.NodeID), zap.String("host", mem.Host), zap.Int32("port", mem.Port))
	}
	m.peers[mem.NodeID] = seen{m: mem, at: time.Now()}
}

// Run subscribes to announcements and announces self every second until ctx ends. The
// first announcement asks every peer to answer at once (see Synced). The NATS connection
// may be down: nats.go reconnects in the background and announcements resume then.
func (m *Membership) Run(ctx context.Context, nc *nats.Conn) error {
	payload, err := json.Marshal(m.self)
	if err != nil {
		return err
	}
	handle := func(msg *nats.Msg) {
		var mem Member
		if err := json.Unmarshal(msg.Data, &mem); err != nil {
			m.log.Warn("bad kafka broker announcement", zap.Error(err))
			return
		}
		m.observe(mem)
		if msg.Reply != "" && mem.NodeID != m.self.NodeID {
			if err := nc.Publish(msg.Reply, payload); err != nil {
				m.log.Debug("discovery answer not published", zap.Error(err))
			}
		}
	}
	sub, err := nc.Subscribe(m.subject, handle)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	inbox := nc.NewRespInbox()
	isub, err := nc.Subscribe(inbox, handle)
	if err != nil {
		return err
	}
	defer func() { _ = isub.Unsubscribe() }()

	discovered := false
	var window <-chan time.Time
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		if nc.IsConnected() {
			var err error
			if discovered {
				err = nc.Publish(m.subject, payload)
			} else if err = nc.PublishRequest(m.subject, inbox, payload); err == nil {
				discovered = true
				window = time.After(DiscoveryWindow)
			}
			if err != nil {
				m.log.Debug("broker announcement not published", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-window:
			window = nil
			m.syncedOnce.Do(func() { close(m.synced) })
		case <-t.C:
		}
	}
}
