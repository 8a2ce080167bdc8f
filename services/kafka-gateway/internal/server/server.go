// Package server is the kafka-gateway process: the Kafka TCP listener (one reader per
// connection, requests handled concurrently, responses written in request order), the
// gRPC clients of storage-core and the coordinator, NATS membership and topic-change
// invalidation, and the /metrics /healthz /readyz endpoints.
package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/natsx"
	"github.com/tributary/tributary/libs/obs"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/cluster"
	"github.com/tributary/tributary/services/kafka-gateway/internal/handler"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// Server is a running kafka-gateway.
type Server struct {
	cfg     Config
	log     *zap.Logger
	lns     []*kafkaListener
	http    *obs.HTTP
	reg     *prometheus.Registry
	h       *handler.Handler
	members *cluster.Membership
	remote  *sasl.Remote // SCRAM credentials of the coordinator; nil without one
	grpc    []*grpc.ClientConn
	leaders *grpcx.LeaderConn // several storage-core addresses; nil for one

	natsMu  sync.Mutex
	natsErr error

	connsMu  sync.Mutex
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
	draining atomic.Bool
	open     prometheus.Gauge
	mem      *budget
	bodies   *bodyPool // produce request bodies
}

// New binds the Kafka (and HTTP) listeners and prepares the gRPC clients; nothing is
// served until Run. Port 0 picks free ports (see KafkaAddr, HTTPAddr).
func New(cfg Config, log *zap.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, conns: map[net.Conn]struct{}{}, mem: newBudget(cfg.MaxInFlightBytes), bodies: &bodyPool{}}
	s.reg = obs.NewRegistry()
	s.http = obs.NewHTTP(s.reg, log)
	storage, coord, groups, txns, acls, creds := cfg.Storage, cfg.Coordinator, cfg.Groups, cfg.Txns, cfg.Acls, cfg.CredentialService
	consumerGroups, shareGroups := cfg.ConsumerGroups, cfg.ShareGroups
	share := cfg.Share
	disableShare := cfg.DisableShareGroups
	if storage == nil {
		sec, err := cfg.StorageSecurity.DialOptions()
		if err != nil {
			return nil, fmt.Errorf("storage-core: %w", err)
		}
		if addrs := grpcx.SplitAddrs(cfg.StorageAddr); len(addrs) > 1 {
			// A storage-core cluster (raft mode): route to each channel's leader.
			lc, err := grpcx.NewLeaderConn(addrs, grpcx.StorageReads, append(grpcx.BulkDialOptions(), sec...)...)
			if err != nil {
				return nil, err
			}
			s.leaders = lc
			storage = handler.NewRouter(lc)
			if !disableShare {
				// Share partitions are storage-core queues, which raft mode does not
				// replicate yet (issue 16): advertising share.version would let share
				// consumers join and then fetch nothing.
				log.Warn("share groups off: storage-core in raft mode does not replicate the queues they are kept in")
				disableShare = true
			}
			s.http.AddReadyCheck("storage-core", func(ctx context.Context) error { return lc.AnyServing(ctx, grpcx.HealthCheck{}) })
		} else {
			cc, err := grpcx.Dial(cfg.StorageAddr, append(grpcx.BulkDialOptions(), sec...)...)
			if err != nil {
				return nil, err
			}
			s.grpc = append(s.grpc, cc)
			storage = handler.NewStorageClient(cc)
			if share == nil {
				share = handler.NewShareClient(cc)
			}
			s.httpCheck("storage-core", cc)
		}
	}
	if coord == nil {
		sec, err := cfg.CoordinatorSecurity.DialOptions()
		if err != nil {
			s.closeGRPC()
			return nil, fmt.Errorf("coordinator: %w", err)
		}
		cc, err := grpcx.Dial(cfg.CoordinatorAddr, append(sec, grpc.WithChainUnaryInterceptor(sanitizeStrings))...)
		if err != nil {
			s.closeGRPC()
			return nil, err
		}
		s.grpc = append(s.grpc, cc)
		coord = coordinatorv1.NewCoordinatorServiceClient(cc)
		if groups == nil {
			groups = coordinatorv1.NewGroupCoordinatorServiceClient(cc)
		}
		if consumerGroups == nil {
			consumerGroups = coordinatorv1.NewConsumerGroupServiceClient(cc)
		}
		if shareGroups == nil {
			shareGroups = coordinatorv1.NewShareGroupServiceClient(cc)
		}
		if txns == nil {
			txns = coordinatorv1.NewTransactionCoordinatorServiceClient(cc)
		}
		if acls == nil {
			acls = coordinatorv1.NewAclServiceClient(cc)
		}
		if creds == nil {
			creds = coordinatorv1.NewCredentialServiceClient(cc)
		}
		s.httpCheck("coordinator", cc)
	}

	if creds != nil {
		s.remote = sasl.NewRemote(creds)
	}
	auth, err := s.authenticator()
	if err != nil {
		s.closeGRPC()
		return nil, err
	}
	var self cluster.Member
	for i, spec := range cfg.specs {
		l := &kafkaListener{spec: spec}
		if spec.protocol.TLS() {
			if l.tls, err = cfg.TLS.Config(); err != nil {
				s.closeListeners()
				s.closeGRPC()
				return nil, err
			}
		}
		if l.ln, err = net.Listen("tcp", spec.addr); err != nil {
			s.closeListeners()
			s.closeGRPC()
			return nil, fmt.Errorf("kafka listen %s %s: %w", spec.name, spec.addr, err)
		}
		s.lns = append(s.lns, l)
		ep, err := advertised(spec.adv, l.ln.Addr())
		if err != nil {
			s.closeListeners()
			s.closeGRPC()
			return nil, err
		}
		if i == 0 {
			self.Host, self.Port = ep.Host, ep.Port
		}
		self.Listeners = append(self.Listeners, cluster.Endpoint{Name: spec.name, Host: ep.Host, Port: ep.Port})
	}
	if cfg.NodeID == -1 {
		cfg.NodeID = derivedNodeID(self)
		s.cfg.NodeID = cfg.NodeID
	}
	self.NodeID = cfg.NodeID
	if cfg.Rack != "" {
		rack := cfg.Rack
		self.Rack = &rack
	}
	s.members = cluster.New(cfg.ClusterID, self, log)

	s.open = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_kafka_connections", Help: "Open Kafka client connections."})
	s.reg.MustRegister(s.open)
	s.h = handler.New(handler.Config{
		NodeID:               cfg.NodeID,
		ClusterID:            cfg.ClusterID,
		AutoCreateTopics:     cfg.AutoCreateTopics,
		DefaultPartitions:    cfg.DefaultPartitions,
		Authorizer:           cfg.Authorizer,
		ConnectionsMaxReauth: cfg.ConnectionsMaxReauth,
		DisableShareGroups:   disableShare,
		Share:                cfg.ShareSettings,
	}, handler.Deps{
		Acls:        acls,
		Auth:        auth,
		Credentials: creds,
		CredentialsChanged: func(user string) {
			if s.remote != nil {
				s.remote.Invalidate(user)
			}
		},
		Storage:     storage,
		Share:       share,
		Coordinator: coord,
		Groups:      groups,
		Consumers:   consumerGroups,
		Shares:      shareGroups,
		Txns:        txns,
		Brokers:     s.brokers,
		Log:         log,
		Metrics:     handler.NewMetrics(s.reg),
	})
	if cfg.NATSURL != "" {
		s.http.AddReadyCheck("nats", func(context.Context) error {
			s.natsMu.Lock()
			defer s.natsMu.Unlock()
			return s.natsErr
		})
		s.http.AddReadyCheck("cluster", func(context.Context) error {
			select {
			case <-s.members.Synced():
				return nil
			default:
				return errors.New("discovering kafka-gateway peers")
			}
		})
	}
	if cfg.HTTPAddr != "" {
		if err := s.http.Listen(cfg.HTTPAddr); err != nil {
			s.closeListeners()
			s.closeGRPC()
			return nil, err
		}
	}
	return s, nil
}

// httpCheck makes /readyz depend on the gRPC health of a backend.
func (s *Server) httpCheck(name string, cc *grpc.ClientConn) {
	s.http.AddReadyCheck(name, grpcx.HealthCheck{Conn: cc}.Check)
}

// derivedNodeID is the broker id for --node-id=-1: FNV-1a of the advertised host:port,
// masked to 31 bits so it is a valid non-negative Kafka broker id.
func derivedNodeID(self cluster.Member) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(net.JoinHostPort(self.Host, strconv.Itoa(int(self.Port)))))
	return int32(h.Sum32() & 0x7fffffff)
}

// advertised computes the announced host and port from the configured advertised
// address and the bound listener address.
func advertised(adv string, bound net.Addr) (cluster.Member, error) {
	var m cluster.Member
	bhost, bport, err := net.SplitHostPort(bound.String())
	if err != nil {
		return m, err
	}
	host, port := bhost, bport
	if adv != "" {
		h, p, err := net.SplitHostPort(adv)
		if err != nil {
			return m, fmt.Errorf("%w: advertised address %q: %v", ErrConfig, adv, err)
		}
		host, port = h, p
		if port == "0" || port == "" {
			port = bport
		}
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return m, fmt.Errorf("%w: advertised port %q", ErrConfig, port)
	}
	m.Host, m.Port = host, int32(p)
	return m, nil
}

// KafkaAddr is the bound address of the first Kafka listener.
func (s *Server) KafkaAddr() string { return s.lns[0].ln.Addr().String() }

// ListenerAddr is the bound address of the named Kafka listener ("" when there is none).
func (s *Server) ListenerAddr(name string) string {
	for _, l := range s.lns {
		if l.spec.name == name {
			return l.ln.Addr().String()
		}
	}
	return ""
}

func (s *Server) closeListeners() {
	for _, l := range s.lns {
		_ = l.ln.Close()
	}
}

// HTTPAddr is the bound HTTP address ("" when disabled).
func (s *Server) HTTPAddr() string { return s.http.Addr() }

// Handler exposes the request handler (tests).
func (s *Server) Handler() *handler.Handler { return s.h }

// Ready runs the readiness checks (what /readyz reports).
func (s *Server) Ready(ctx context.Context) error { return s.http.Ready(ctx) }

func (s *Server) brokers() []handler.Broker {
	live := s.members.Live()
	out := make([]handler.Broker, len(live))
	for i, m := range live {
		out[i] = handler.Broker{NodeID: m.NodeID, Host: m.Host, Port: m.Port, Rack: m.Rack}
		if len(m.Listeners) == 0 {
			// A replica that predates listeners serves PLAINTEXT only.
			out[i].Endpoints = []handler.Endpoint{{Listener: string(Plaintext), Host: m.Host, Port: m.Port}}
		}
		for _, e := range m.Listeners {
			out[i].Endpoints = append(out[i].Endpoints, handler.Endpoint{Listener: e.Name, Host: e.Host, Port: e.Port})
		}
	}
	return out
}

func (s *Server) closeGRPC() {
	for _, cc := range s.grpc {
		_ = cc.Close()
	}
	s.grpc = nil
	if s.leaders != nil {
		s.leaders.Close()
		s.leaders = nil
	}
}

// Run serves until ctx ends, then closes every connection and returns.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var names []string
	for _, l := range s.lns {
		names = append(names, l.spec.name+"://"+l.ln.Addr().String())
	}
	s.log.Info("listening", zap.Strings("kafka", names), zap.String("http", s.HTTPAddr()),
		zap.String("advertised", net.JoinHostPort(s.members.Self().Host, strconv.Itoa(int(s.members.Self().Port)))),
		zap.Int32("node_id", s.cfg.NodeID))

	var bg sync.WaitGroup
	if s.cfg.NATSURL != "" {
		bg.Add(1)
		go func() {
			defer bg.Done()
			s.runNATS(ctx)
		}()
	}

	// Connections outlive ctx by up to shutdownGrace so in-flight requests are answered.
	connCtx, connCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer connCancel()
	acceptErr := make(chan error, len(s.lns))
	for _, l := range s.lns {
		go func() { acceptErr <- s.accept(ctx, connCtx, l) }()
	}

	var err error
	pending := len(s.lns)
	select {
	case <-ctx.Done():
	case err = <-acceptErr:
		pending--
	}
	cancel()
	s.closeListeners()
	for ; pending > 0; pending-- {
		if e := <-acceptErr; err == nil {
			err = e
		}
	}
	// Stop reading new requests; the writers drain what is in flight.
	s.draining.Store(true)
	s.h.Drain()
	s.connsMu.Lock()
	for c := range s.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseRead()
		} else {
			_ = c.Close()
		}
	}
	s.connsMu.Unlock()
	drained := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(shutdownGrace):
		s.log.Warn("closing connections with requests in flight", zap.Duration("grace", shutdownGrace))
		connCancel()
		s.connsMu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.connsMu.Unlock()
		<-drained
	}
	bg.Wait()
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer shutCancel()
	_ = s.http.Close(shutCtx)
	s.closeGRPC()
	s.log.Info("stopped")
	return err
}

// shutdownGrace is how long Run waits, after ctx ends, for in-flight requests to be
// answered before closing connections.
const shutdownGrace = 5 * time.Second

// accept serves connections of one listener until ctx ends; connections run under connCtx.
func (s *Server) accept(ctx, connCtx context.Context, l *kafkaListener) error {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("kafka accept: %w", err)
		}
		s.connsMu.Lock()
		if ctx.Err() != nil {
			s.connsMu.Unlock()
			_ = c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.connsMu.Unlock()
		s.open.Inc()
		go func() {
			defer s.wg.Done()
			defer s.open.Dec()
			s.serveConn(connCtx, c, l)
			s.connsMu.Lock()
			delete(s.conns, c)
			s.connsMu.Unlock()
		}()
	}
}

// runNATS connects to NATS (retrying in the background), announces this replica, and
// drops cached topics on topics.changed messages. Without NATS the gateway still
// serves, as a cluster of one, and /readyz says why.
func (s *Server) runNATS(ctx context.Context) {
	setErr := func(err error) {
		s.natsMu.Lock()
		s.natsErr = err
		s.natsMu.Unlock()
	}
	setErr(errors.New("not connected yet"))
	nc, err := nats.Connect(s.cfg.NATSURL,
		nats.Name(fmt.Sprintf("kafka-gateway-%d", s.cfg.NodeID)),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ConnectHandler(func(*nats.Conn) { setErr(nil) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			setErr(nil)
			// Changes may have been missed while disconnected.
			s.h.InvalidateTopic("")
			s.h.InvalidateAcls()
			if s.remote != nil {
				s.remote.Invalidate("")
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				err = errors.New("disconnected")
			}
			setErr(fmt.Errorf("disconnected: %w", err))
		}),
	)
	if err != nil {
		setErr(err)
		s.log.Warn("nats unavailable; serving as a cluster of one", zap.String("url", s.cfg.NATSURL), zap.Error(err))
		return
	}
	defer nc.Close()
	if nc.IsConnected() {
		setErr(nil)
	} else {
		s.log.Warn("nats not reachable yet; serving as a cluster of one until it is", zap.String("url", s.cfg.NATSURL))
	}
	sub, err := nc.Subscribe(natsx.TopicsChangedSubject(s.cfg.ClusterID), func(m *nats.Msg) {
		s.h.InvalidateTopic(string(m.Data))
	})
	if err != nil {
		s.log.Warn("nats subscribe failed", zap.Error(err))
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	if s.cfg.Authorizer.Enabled {
		asub, err := nc.Subscribe(natsx.AclsChangedSubject(s.cfg.ClusterID), func(*nats.Msg) { s.h.InvalidateAcls() })
		if err != nil {
			s.log.Warn("nats subscribe failed", zap.Error(err))
		} else {
			defer func() { _ = asub.Unsubscribe() }()
		}
	}
	if s.remote != nil {
		csub, err := nc.Subscribe(natsx.CredentialsChangedSubject(s.cfg.ClusterID), func(m *nats.Msg) {
			s.remote.Invalidate(string(m.Data))
		})
		if err != nil {
			s.log.Warn("nats subscribe failed", zap.Error(err))
		} else {
			defer func() { _ = csub.Unsubscribe() }()
		}
	}
	if err := s.members.Run(ctx, nc); err != nil {
		s.log.Warn("nats membership stopped", zap.Error(err))
		<-ctx.Done()
	}
}

// pending is one request in a connection's ordered response queue.
type pending struct {
	corr int32
	done chan struct{}
	resp kmsg.Response
	err  error
	// raw, when not nil, is a bare SASL token sent size-prefixed without a Kafka
	// header (after SaslHandshake v0).
	raw []byte
	// closeAfter closes the connection once this answer is written (a failed
	// authentication step).
	closeAfter bool
	// req, when set, is released (Request.Release) once resp is encoded.
	req *handler.Request
}

// serveConn reads requests from c, handles each in its own goroutine, and writes the
// responses in request order. A frame that is too large (MaxAuthFrameBytes before SASL
// authentication), or cannot be parsed, an unknown API key or an unsupported version
// (other than ApiVersions) closes the connection.
//
// The end of the connection cancels the requests in flight, except Produce: like
// Kafka's broker, which appends every produce request it has read whether or not its
// client is still there to be answered, the gateway stores a produce it has read in
// full, so an acks=0 producer that closes the connection right after writing (kcat -X
// acks=0 does) loses nothing. Produce handlers run on produceCtx, which ends only once
// every handler has returned (each is bounded by its request timeout, at least 30 s);
// it also bounds the connection's append stream to storage-core.
func (s *Server) serveConn(ctx context.Context, c net.Conn, l *kafkaListener) {
	ctx, cancel := context.WithCancel(ctx)
	produceCtx, produceCancel := context.WithCancel(context.WithoutCancel(ctx))
	log := s.log.With(zap.String("remote", c.RemoteAddr().String()), zap.String("listener", l.spec.name))
	c, sess, err := s.secure(c, l, log)
	if err != nil {
		cancel()
		produceCancel()
		_ = c.Close()
		return
	}
	queue := make(chan *pending, s.cfg.MaxInFlight)
	var handlers sync.WaitGroup
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.writeLoop(ctx, c, queue, log)
		cancel()
		_ = c.Close()
	}()
	defer func() {
		close(queue)
		<-writerDone
		cancel()
		handlers.Wait()
		produceCancel()
		_ = c.Close()
		s.h.ConnectionClosed(sess)
	}()

	clientHost := "/" + c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
		clientHost = "/" + h
	}
	br := bufio.NewReaderSize(c, 64<<10)
	var sizeBuf [4]byte
	var produce handler.TurnChain
	for {
		_ = c.SetReadDeadline(time.Now().Add(IdleTimeout))
		// Before authentication a frame is small and is not counted in the request
		// memory budget, as Kafka's SaslServerAuthenticator reads it outside its memory
		// pool: unauthenticated clients cannot make authenticated ones wait.
		limit, mem := s.cfg.MaxFrameBytes, s.mem
		if !sess.Authenticated() || sess.RawTokens() {
			limit, mem = min(limit, MaxAuthFrameBytes), nil
		}
		size, err := readSize(br, sizeBuf[:], limit)
		var (
			frame  []byte
			pooled bool // a produce body, recycled through s.bodies
		)
		if err == nil {
			var into []byte
			capTo := int(size)
			if key, perr := br.Peek(2); perr == nil && int16(binary.BigEndian.Uint16(key)) == kmsg.Produce.Int16() {
				pooled, into, capTo = true, s.bodies.get(int(size)), s.bodies.capFor(int(size))
			}
			var reserved int64
			if frame, reserved, err = readBody(ctx, br, c, mem, size, into, capTo); err != nil {
				mem.release(reserved)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && s.draining.Load() {
				// Shutdown closed the read side: answer what is in flight, then close.
				return
			}
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				log.Info("closing kafka connection", zap.Error(err))
			}
			cancel()
			return
		}
		if sess.RawTokens() {
			// SaslHandshake v0: the frame is a bare SASL token (KIP-43).
			out, err := s.h.RawAuthenticate(ctx, sess, frame)
			mem.release(int64(size))
			if err != nil {
				log.Info("closing kafka connection: SASL authentication failed", zap.Error(err))
				cancel()
				return
			}
			p := &pending{done: make(chan struct{}), raw: out}
			close(p.done)
			select {
			case queue <- p:
			case <-ctx.Done():
				return
			}
			continue
		}
		p, req, err := s.decode(frame)
		if err != nil || req == nil {
			mem.release(int64(size))
		}
		if err != nil {
			log.Info("closing kafka connection", zap.Error(err))
			cancel()
			return
		}
		if req != nil {
			key := req.Body.Key()
			saslAPI := key == kmsg.SASLHandshake.Int16() || key == kmsg.SASLAuthenticate.Int16()
			authenticated := sess.Authenticated()
			if !authenticated && !saslAPI && (key != kmsg.ApiVersions.Int16() || !sess.VersionsAllowed()) {
				mem.release(int64(size))
				log.Info("closing kafka connection: request before SASL authentication", zap.String("api", kmsg.NameForKey(key)))
				cancel()
				return
			}
			if !saslAPI && sess.Expired(time.Now()) {
				mem.release(int64(size))
				log.Info("closing kafka connection: SASL session expired without re-authentication (KIP-368)")
				cancel()
				return
			}
			if key == kmsg.Produce.Int16() {
				req.Turn = produce.Next()
			}
			req.ClientHost = clientHost
			req.Listener = l.spec.name
			req.Session = sess
			req.Principal = sess.Principal()
			if saslAPI || !authenticated {
				// Authentication steps run in order, each before the next frame is read:
				// the session state they change decides how that frame is served.
				resp, err := s.h.Handle(ctx, req)
				mem.release(int64(size))
				p.resp, p.err, p.closeAfter = resp, err, sess.Closing()
				close(p.done)
				select {
				case queue <- p:
				case <-ctx.Done():
					return
				}
				if p.closeAfter {
					log.Info("closing kafka connection: SASL authentication failed")
					return
				}
				continue
			}
			hctx := ctx
			if key == kmsg.Produce.Int16() {
				hctx = produceCtx
			}
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				resp, err := s.h.Handle(hctx, req)
				mem.release(int64(size))
				if pooled && !req.BodyInUse() {
					s.bodies.put(frame)
				}
				req.Turn.Finish()
				p.resp, p.err, p.req = resp, err, req
				close(p.done)
			}()
		}
		select {
		case queue <- p:
		case <-ctx.Done():
			return
		}
	}
}

// decode parses a frame. It returns the queue entry and the request to handle, or a
// ready entry (req nil) for an ApiVersions request above our maximum version.
func (s *Server) decode(frame []byte) (*pending, *handler.Request, error) {
	hdr, rest, err := parseHeader(frame)
	if err != nil {
		return nil, nil, err
	}
	p := &pending{corr: hdr.correlationID, done: make(chan struct{})}
	minV, maxV, ok := handler.Supported(hdr.key)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %d", ErrUnknownAPI, hdr.key)
	}
	if hdr.key == kmsg.ApiVersions.Int16() && (hdr.version > maxV || hdr.version < minV) {
		p.resp = s.h.UnsupportedAPIVersions()
		close(p.done)
		return p, nil, nil
	}
	if hdr.version < minV || hdr.version > maxV {
		return nil, nil, fmt.Errorf("%w: api %d version %d outside %d..%d", handler.ErrUnsupportedVersion, hdr.key, hdr.version, minV, maxV)
	}
	body := kmsg.RequestForKey(hdr.key)
	if body == nil {
		return nil, nil, fmt.Errorf("%w: %d", ErrUnknownAPI, hdr.key)
	}
	body.SetVersion(hdr.version)
	if body.IsFlexible() {
		if rest, err = skipTags(rest); err != nil {
			return nil, nil, err
		}
	}
	if err := body.ReadFrom(rest); err != nil {
		return nil, nil, fmt.Errorf("%w: %s v%d body: %v", ErrBadFrame, kmsg.NameForKey(hdr.key), hdr.version, err)
	}
	return p, &handler.Request{Body: body, CorrelationID: hdr.correlationID, ClientID: hdr.clientID}, nil
}

// writeLoop writes responses in queue order. Writes are buffered and flushed whenever
// the writer would otherwise wait (for the next request or for a response not yet ready).
func (s *Server) writeLoop(ctx context.Context, c net.Conn, queue <-chan *pending, log *zap.Logger) {
	bw := bufio.NewWriterSize(responseWriter(c), 64<<10)
	var buf []byte
	// Fetch responses with record batches are written in pieces (fetchFrame), with one
	// writev on a plaintext TCP connection; through bw otherwise (TLS coalesces them).
	var (
		ff     fetchFrame
		pieces [][]byte
	)
	tcp, _ := c.(*net.TCPConn)
	for {
		var (
			p  *pending
			ok bool
		)
		select {
		case p, ok = <-queue:
		default:
			if bw.Flush() != nil {
				return
			}
			select {
			case p, ok = <-queue:
			case <-ctx.Done():
				return
			}
		}
		if !ok {
			_ = bw.Flush()
			return
		}
		select {
		case <-p.done:
		default:
			if bw.Flush() != nil {
				return
			}
			select {
			case <-p.done:
			case <-ctx.Done():
				return
			}
		}
		if p.err != nil {
			if ctx.Err() == nil {
				log.Info("closing kafka connection", zap.Error(p.err))
			}
			_ = bw.Flush()
			return
		}
		if p.raw != nil {
			var size [4]byte
			binary.BigEndian.PutUint32(size[:], uint32(len(p.raw)))
			if _, err := bw.Write(size[:]); err != nil {
				return
			}
			if _, err := bw.Write(p.raw); err != nil {
				return
			}
			continue
		}
		if p.resp == nil {
			continue
		}
		framed := false
		switch r := p.resp.(type) {
		case *kmsg.FetchResponse:
			framed = ff.encode(p.corr, r)
		case *kmsg.ShareFetchResponse:
			framed = ff.encodeShare(p.corr, r)
		}
		if framed {
			p.resp = nil
			pieces = ff.pieces(pieces[:0])
			err := writePieces(bw, tcp, pieces)
			clear(pieces)
			ff.reset()
			if p.req != nil {
				p.req.Release() // written (or copied into bw)
			}
			if err != nil {
				return
			}
			continue
		}
		if buf == nil {
			if b, ok := bigBufs.Get().(*[]byte); ok {
				buf = *b
			}
		}
		buf = encodeResponse(buf, p.corr, p.resp)
		p.resp = nil
		if p.req != nil {
			p.req.Release() // the response's bytes are in buf now
		}
		if _, err := bw.Write(buf); err != nil {
			return
		}
		if p.closeAfter {
			_ = bw.Flush()
			return
		}
		if cap(buf) > smallResponse {
			// Large (Fetch) buffers go back to a pool shared by all connections
			// instead of staying with an idle one.
			b := buf[:0]
			bigBufs.Put(&b)
			buf = nil
		}
	}
}

// writePieces writes a frame's pieces after what bw holds: flushed, then one writev
// when tcp is set, else each through bw.
func writePieces(bw *bufio.Writer, tcp *net.TCPConn, pieces [][]byte) error {
	if tcp == nil {
		for _, p := range pieces {
			if _, err := bw.Write(p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	bufs := net.Buffers(pieces)
	_, err := bufs.WriteTo(tcp)
	return err
}

// smallResponse is the largest encoding buffer a connection keeps for itself.
const smallResponse = 64 << 10

// bigBufs recycles large response encoding buffers (*[]byte) across connections.
var bigBufs sync.Pool
