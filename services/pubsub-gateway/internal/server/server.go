// Package server wires the pubsub-gateway: clients of storage-core and the coordinator,
// NATS for lease wake-ups (nats.go), the google.pubsub.v1 services (Publisher,
// Subscriber, SchemaService) and google.iam.v1.IAMPolicy (package handler) behind the
// recovery -> logging -> readiness interceptors, the push deliverer, and the
// observability endpoints.
// New binds the listeners; Run serves until its context ends.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/pubsub-gateway/internal/handler"
)

// Timings.
const (
	// readyPoll is how often the backends' health is re-checked for the readiness gate.
	readyPoll = 500 * time.Millisecond
	// shutdownGrace bounds the graceful gRPC stop (open StreamingPulls are cut after it).
	shutdownGrace = 5 * time.Second
)

// clientWriteBuffer is the write buffer of each client connection, in bytes (gRPC's
// default is 32 KiB). A StreamingPull response holds up to 2,500 messages (about 2.6 MB
// of 1 KiB ones); through 32 KiB it took about 80 write syscalls, each waking the
// client's reader. With 1 MiB the gateway made half as many write syscalls over a
// pubsubbench run. gRPC shares write buffers between connections by default: a
// connection holds one only while it writes, so idle clients cost none.
const clientWriteBuffer = 1 << 20

// ErrNotServing is wrapped when a backend's gRPC health is not SERVING.
var ErrNotServing = errors.New("not serving")

// errNotReady answers every Pub/Sub RPC while a backend is not serving: the reason
// (which names backends and their errors) is for /readyz and the log, not for clients.
var errNotReady = status.Error(codes.Unavailable, "The service is currently unavailable.")

// Server is a running pubsub-gateway.
type Server struct {
	cfg Config
	log *zap.Logger

	storageConn, coordConn *grpc.ClientConn
	// storageLeaders replaces storageConn when StorageAddr lists several nodes.
	storageLeaders *grpcx.LeaderConn
	bus            *natsBus // nil without --nats-url

	grpc   *grpc.Server
	health *health.Server
	grpcLn net.Listener
	http   *obs.HTTP

	ready      atomic.Bool
	notReady   atomic.Pointer[string]
	calls      *prometheus.CounterVec
	pusher     *handler.Pusher
	subscriber *handler.Subscriber
}

// New validates cfg, opens the backend clients and binds the listeners.
func New(cfg Config, log *zap.Logger) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	srv := &Server{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			if srv.grpc != nil {
				srv.grpc.Stop() // ends its handler goroutines (grpcx's stream workers)
			}
			srv.closeClients()
		}
	}()
	// The backends' errors are marked as theirs, so the edge never hands their text to a
	// Pub/Sub client (handler/edge.go).
	mark := grpc.WithChainUnaryInterceptor(handler.MarkBackend)
	storageSec, err := cfg.StorageSecurity.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("%w: storage-core: %v", ErrConfig, err)
	}
	coordSec, err := cfg.CoordinatorSecurity.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("%w: coordinator: %v", ErrConfig, err)
	}
	storageOpts := append(append(storageSec, grpcx.BulkDialOptions()...), mark)
	var storage grpc.ClientConnInterface
	if addrs := grpcx.SplitAddrs(cfg.StorageAddr); len(addrs) > 1 {
		// A storage-core cluster (raft mode): each call goes to its channel's leader.
		if srv.storageLeaders, err = grpcx.NewLeaderConn(addrs, grpcx.StorageReads, storageOpts...); err != nil {
			return nil, err
		}
		storage = srv.storageLeaders
	} else {
		if srv.storageConn, err = grpcx.Dial(cfg.StorageAddr, storageOpts...); err != nil {
			return nil, err
		}
		storage = srv.storageConn
	}
	if srv.coordConn, err = grpcx.Dial(cfg.CoordinatorAddr, append(coordSec, mark)...); err != nil {
		return nil, err
	}
	// TLS only: emulator mode authenticates nobody (Validate refuses nothing here).
	tlsOpts, err := grpcx.ServerSecurity{TLS: cfg.TLS}.ServerOptions(nil, log)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	why := "starting"
	srv.notReady.Store(&why)

	reg := obs.NewRegistry()
	srv.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_pubsub_gateway_rpcs_total", Help: "Pub/Sub RPCs served, by method and status code.",
	}, []string{"method", "code"})
	reg.MustRegister(srv.calls)
	srv.http = obs.NewHTTP(reg, log.Named("http"))
	srv.http.AddReadyCheck("backends", srv.backendsReady)
	var announce handler.Announcer
	if cfg.NATSURL != "" {
		srv.bus = newNATSBus(cfg, log.Named("nats"))
		announce = srv.bus
		// NATS is not a readiness check: every RPC works without it (streams poll their
		// leases), so an outage must not take every replica out of service. The gauge
		// below shows it.
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tributary_pubsub_gateway_nats_connected",
		Help: "1 while NATS is connected (lease wake-ups flow between the replicas), else 0.",
	}, func() float64 {
		if srv.bus != nil && srv.bus.Live() {
			return 1
		}
		return 0
	}))

	edge := handler.NewEdge(log.Named("edge"))
	srv.grpc = grpcx.NewServer(log.Named("grpc"), append([]grpc.ServerOption{
		// Clients are not the internal bus: their messages are held to Pub/Sub's size
		// (the option overrides grpcx's 256 MiB; replies keep grpcx's limit).
		grpc.MaxRecvMsgSize(handler.MaxClientMessageBytes),
		grpc.WriteBufferSize(clientWriteBuffer),
		grpc.ChainUnaryInterceptor(srv.logUnary, srv.gateUnary, edge.Unary),
		grpc.ChainStreamInterceptor(srv.logStream, srv.gateStream, edge.Stream),
	}, tlsOpts...)...)
	svc := handler.New(handler.Deps{
		Registry:    coordinatorv1.NewPubSubRegistryServiceClient(srv.coordConn),
		Schemas:     coordinatorv1.NewPubSubSchemaServiceClient(srv.coordConn),
		Storage:     storagev1.NewStorageServiceClient(storage),
		Queues:      storagev1.NewQueueServiceClient(storage),
		StorageConn: storage,
		// srv.grpc is a grpcx server, whose codec takes the streams' own encoding.
		EncodeStreams: true,
		Log:           log.Named("handler"),
		Announce:      announce,

		StreamBufferBytes: cfg.StreamBufferBytes,
	})
	sub := svc.Subscriber
	srv.pusher = handler.NewPusher(sub)
	srv.subscriber = sub
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tributary_pubsub_gateway_stream_held_bytes",
		Help: "Message bytes StreamingPull streams hold, leased but not yet sent to their clients (bounded by --stream-buffer-bytes).",
	}, func() float64 { return float64(sub.HeldBytes()) }))
	if srv.bus != nil {
		if err = srv.bus.connect(cfg.NATSURL, sub.Wake); err != nil {
			return nil, err
		}
	}
	pubsubpb.RegisterPublisherServer(srv.grpc, svc.Publisher)
	pubsubpb.RegisterSubscriberServer(srv.grpc, sub)
	pubsubpb.RegisterSchemaServiceServer(srv.grpc, svc.Schemas)
	iampb.RegisterIAMPolicyServer(srv.grpc, handler.NewIAM())
	srv.health = grpcx.RegisterStandard(srv.grpc)
	srv.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)

	if srv.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	if cfg.HTTPAddr != "" {
		if err = srv.http.Listen(cfg.HTTPAddr); err != nil {
			_ = srv.grpcLn.Close()
			return nil, err
		}
	}
	return srv, nil
}

// GRPCAddr is the bound Pub/Sub address.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// HTTPAddr is the bound HTTP address ("" when disabled).
func (s *Server) HTTPAddr() string { return s.http.Addr() }

func (s *Server) backendsReady(context.Context) error {
	if s.ready.Load() {
		return nil
	}
	return errors.New(*s.notReady.Load())
}

// check asks storage-core and the coordinator for the health of the services the
// gateway uses.
func (s *Server) check(ctx context.Context) error {
	if s.storageLeaders != nil {
		// A cluster is ready while one node serves (it names the leaders of the rest).
		if err := s.storageLeaders.AnyServing(ctx, grpcx.HealthCheck{Timeout: 2 * time.Second, NotServing: ErrNotServing}); err != nil {
			return err
		}
	} else if err := (grpcx.HealthCheck{Conn: s.storageConn, Addr: s.cfg.StorageAddr, Timeout: 2 * time.Second, NotServing: ErrNotServing}).Check(ctx); err != nil {
		return err
	}
	return grpcx.HealthCheck{Conn: s.coordConn, Addr: s.cfg.CoordinatorAddr, Timeout: 2 * time.Second, NotServing: ErrNotServing}.Check(ctx)
}

func (s *Server) watchReady(ctx context.Context) {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		err := s.check(ctx)
		if ctx.Err() != nil {
			return
		}
		was := s.ready.Load()
		if err == nil {
			s.ready.Store(true)
			if !was {
				s.log.Info("ready")
				s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			}
		} else {
			why := err.Error()
			s.notReady.Store(&why)
			s.ready.Store(false)
			if was {
				s.log.Warn("not ready", zap.Error(err))
				s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Run serves until ctx ends, then stops gracefully.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("listening", zap.String("grpc", s.GRPCAddr()), zap.String("http", s.HTTPAddr()))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.watchReady(ctx) })
	wg.Go(func() { s.pusher.Run(ctx) })
	wg.Go(func() { s.subscriber.RunActivity(ctx) })
	err := grpcx.Serve(ctx, s.grpc, s.grpcLn)
	if err != nil {
		err = fmt.Errorf("grpc serve: %w", err)
	}
	cancel()
	s.health.Shutdown()
	wg.Wait()
	grpcx.GracefulStop(s.grpc, shutdownGrace)
	hctx, hcancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer hcancel()
	if s.cfg.HTTPAddr != "" {
		if herr := s.http.Close(hctx); herr != nil && !errors.Is(herr, context.DeadlineExceeded) {
			s.log.Warn("http shutdown", zap.Error(herr))
		}
	}
	s.closeClients()
	s.log.Info("stopped")
	return err
}

func (s *Server) closeClients() {
	if s.bus != nil {
		s.bus.close()
	}
	if s.storageConn != nil {
		_ = s.storageConn.Close()
	}
	if s.storageLeaders != nil {
		s.storageLeaders.Close()
	}
	if s.coordConn != nil {
		_ = s.coordConn.Close()
	}
}

// isGated reports whether a method waits for readiness (health and reflection do not).
func isGated(method string) bool {
	return strings.HasPrefix(method, "/google.pubsub.") || strings.HasPrefix(method, "/google.iam.")
}

func (s *Server) gateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if isGated(info.FullMethod) && !s.ready.Load() {
		return nil, errNotReady
	}
	return h(ctx, req)
}

func (s *Server) gateStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if isGated(info.FullMethod) && !s.ready.Load() {
		return errNotReady
	}
	return h(srv, ss)
}

func (s *Server) logUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	s.logCall(info.FullMethod, start, err)
	return resp, err
}

func (s *Server) logStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	s.logCall(info.FullMethod, start, err)
	return err
}

func (s *Server) logCall(method string, start time.Time, err error) {
	code := status.Code(err)
	s.calls.WithLabelValues(method, code.String()).Inc()
	switch code {
	case codes.OK, codes.Canceled, codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.FailedPrecondition, codes.DeadlineExceeded:
		if ce := s.log.Check(zap.DebugLevel, "rpc"); ce != nil {
			ce.Write(zap.String("method", method), zap.String("code", code.String()), zap.Duration("took", time.Since(start)), zap.Error(err))
		}
	default:
		s.log.Warn("rpc failed", zap.String("method", method), zap.String("code", code.String()), zap.Duration("took", time.Since(start)), zap.Error(err))
	}
}
