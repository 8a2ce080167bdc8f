// Package server wires the coordinator: Postgres (package store), the storage-core
// client, NATS, the CoordinatorService handler, gRPC and the observability endpoints.
// New binds the listeners; Run serves until its context ends.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/natsx"
	"github.com/tributary/tributary/libs/obs"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/acl"
	"github.com/tributary/tributary/services/coordinator/internal/consumergroup"
	"github.com/tributary/tributary/services/coordinator/internal/credentials"
	"github.com/tributary/tributary/services/coordinator/internal/group"
	"github.com/tributary/tributary/services/coordinator/internal/handler"
	"github.com/tributary/tributary/services/coordinator/internal/mqttusers"
	"github.com/tributary/tributary/services/coordinator/internal/pubsub"
	"github.com/tributary/tributary/services/coordinator/internal/store"
	"github.com/tributary/tributary/services/coordinator/internal/txn"
)

// Timings of the background loops.
const (
	// prepareBackoffMax caps the wait between attempts to create and migrate the database.
	prepareBackoffMax = 5 * time.Second
	// gaugeRefresh is how often the topics gauge is re-read (other replicas change topics too).
	gaugeRefresh = 30 * time.Second
	// shutdownGrace bounds the graceful gRPC stop.
	shutdownGrace = 5 * time.Second
	// natsReconnectWait is the pause between NATS reconnect attempts.
	natsReconnectWait = time.Second
	// reconcileInterval is how often registered topics are checked for channels
	// storage-core lacks; reconcileRetry is the wait after a failed check.
	reconcileInterval = 5 * time.Minute
	reconcileRetry    = 10 * time.Second
)

// Server is a running coordinator.
type Server struct {
	cfg Config
	log *zap.Logger

	store       *store.Store
	storageConn *grpc.ClientConn
	// storageLeaders routes to a storage-core cluster (several --storage-addr); nil
	// for one address. storageConns are the configured nodes' connections.
	storageLeaders *grpcx.LeaderConn
	storageConns   []*grpc.ClientConn
	storage        storagev1.StorageServiceClient
	nc             *nats.Conn
	metrics        *metrics
	groups         *group.Coordinator
	txns           *txn.Coordinator
	handler        *handler.Handler
	pubsub         *pubsub.Registry

	grpc   *grpc.Server
	health *health.Server
	grpcLn net.Listener
	http   *obs.HTTP

	refresh chan struct{} // wakes the topics gauge refresher; buffered 1
}

// New validates cfg, opens the Postgres pool (lazily), the storage-core client and the
// NATS connection (which retries in the background), and binds the gRPC and HTTP
// listeners. Nothing is served on gRPC until Run.
func New(cfg Config, log *zap.Logger) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	srv := &Server{cfg: cfg, log: log, refresh: make(chan struct{}, 1)}
	s = srv
	defer func() {
		// Named on srv: the error returns below set s to nil.
		if err != nil {
			if srv.grpc != nil {
				srv.grpc.Stop() // ends its handler goroutines (grpcx's stream workers)
			}
			srv.closeClients()
		}
	}()

	if s.store, err = store.Open(cfg.PostgresURL, log.Named("store")); err != nil {
		return nil, err
	}
	storageSec, err := cfg.StorageSecurity.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("%w: storage-core: %v", ErrInvalidConfig, err)
	}
	var storageCC grpc.ClientConnInterface
	if addrs := grpcx.SplitAddrs(cfg.StorageAddr); len(addrs) > 1 {
		// A storage-core cluster (raft mode): creates and deletes go to the metadata
		// group's leader, other calls to their channel's (grpcx.LeaderConn).
		if s.storageLeaders, err = grpcx.NewLeaderConn(addrs, storageReadMethod, storageSec...); err != nil {
			return nil, err
		}
		s.storageConns = s.storageLeaders.Conns()
		storageCC = s.storageLeaders
	} else {
		if s.storageConn, err = grpcx.Dial(cfg.StorageAddr, storageSec...); err != nil {
			return nil, err
		}
		s.storageConns = []*grpc.ClientConn{s.storageConn}
		storageCC = s.storageConn
	}
	s.storage = storagev1.NewStorageServiceClient(storageCC)
	if s.nc, err = s.connectNATS(); err != nil {
		return nil, err
	}

	reg := obs.NewRegistry()
	s.metrics = newMetrics(reg)
	s.http = obs.NewHTTP(reg, log.Named("http"))
	s.http.AddReadyCheck("postgres", s.store.Ready)
	s.http.AddReadyCheck("nats", s.natsReady)
	s.http.AddReadyCheck("storage-core", s.storageReady)

	s.groups, err = group.New(group.Config{ClusterID: cfg.ClusterID}, group.Deps{
		Store: s.store, NATS: s.nc, Storage: s.storage, Registerer: reg, Log: log.Named("group"), Now: cfg.Now,
	})
	if err != nil {
		return nil, err
	}
	s.http.AddReadyCheck("groups", s.groups.Ready)

	secOpts, err := cfg.Security.ServerOptions(authRules, log.Named("auth"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	s.grpc = grpcx.NewServer(log.Named("grpc"), append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(s.metrics.interceptor)}, secOpts...)...)
	s.handler = handler.New(s.store, s.storage, s, log.Named("handler"))
	coordinatorv1.RegisterCoordinatorServiceServer(s.grpc, s.handler)
	coordinatorv1.RegisterGroupCoordinatorServiceServer(s.grpc, s.groups)
	cgCfg := cfg.ConsumerGroups
	cgCfg.ClusterID = cfg.ClusterID
	consumerGroups, err := consumergroup.New(cgCfg, s.store, log.Named("consumergroup"), cfg.Now)
	if err != nil {
		return nil, err
	}
	coordinatorv1.RegisterConsumerGroupServiceServer(s.grpc, consumerGroups)
	s.groups.AddSweep("consumer-groups", 0, consumerGroups.Sweep)
	// Share partitions are storage-core queues, which raft mode does not replicate yet
	// (issue 16): with a storage cluster the share coordinator has no partition store
	// (its partition calls answer errNoShareStorage instead of reaching a refusal).
	var sharePartitions storagev1.ShareServiceClient
	if s.storageLeaders == nil {
		sharePartitions = storagev1.NewShareServiceClient(s.storageConn)
	}
	shareGroups, err := consumergroup.NewShare(cfg.ShareGroups, consumerGroups, sharePartitions)
	if err != nil {
		return nil, err
	}
	coordinatorv1.RegisterShareGroupServiceServer(s.grpc, shareGroups)
	s.groups.AddSweep("share-groups", 0, shareGroups.Sweep)
	s.groups.SetShareStateDeleter(shareGroups.DeleteShareState)
	s.txns = txn.New(txn.Config{MaxTimeout: cfg.TransactionMaxTimeout, IDExpiration: cfg.TransactionalIDExpiration}, txn.Deps{
		Store: s.store, Markers: txn.StorageMarkers(s.storage, s.storageLeaders != nil), NextProducerID: s.handler.NextProducerID,
		Log: log.Named("txn"), Now: cfg.Now,
	})
	s.handler.SetTransactions(s.txns)
	coordinatorv1.RegisterTransactionCoordinatorServiceServer(s.grpc, txn.NewServer(s.txns))
	s.groups.AddSweepLock(txn.SweepLock, s.txns.Sweep)
	queues := storagev1.NewQueueServiceClient(storageCC)
	registry := pubsub.New(s.store, s.storage, queues, log.Named("pubsub"), cfg.Now)
	s.pubsub = registry
	coordinatorv1.RegisterPubSubRegistryServiceServer(s.grpc, registry)
	coordinatorv1.RegisterPubSubSchemaServiceServer(s.grpc, pubsub.NewSchemas(s.store))
	coordinatorv1.RegisterAclServiceServer(s.grpc, acl.New(s.store, func() {
		consumerGroups.InvalidateAcls()
		s.aclsChanged()
	}))
	coordinatorv1.RegisterCredentialServiceServer(s.grpc, credentials.New(s.store, s.credentialsChanged))
	coordinatorv1.RegisterMqttUserServiceServer(s.grpc, mqttusers.New(s.store, s.mqttUsersChanged))
	expiry := cfg.PubSubExpiryInterval
	if expiry <= 0 {
		expiry = time.Minute
	}
	s.groups.AddSweep("pubsub-expiry", expiry, registry.ExpireSubscriptions)
	leases := pubsub.NewLeaseSweeper(queues, s.nc, cfg.ClusterID, log.Named("pubsub"))
	s.groups.AddSweepLock(pubsub.LeaseSweepLock, leases.Sweep)
	s.health = grpcx.RegisterStandard(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.CoordinatorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.GroupCoordinatorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.ConsumerGroupService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.ShareGroupService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.TransactionCoordinatorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.PubSubRegistryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.PubSubSchemaService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.AclService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.CredentialService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(coordinatorv1.MqttUserService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	if s.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen %s: %w", cfg.GRPCAddr, err)
	}
	if err = s.http.Listen(cfg.HTTPAddr); err != nil {
		_ = s.grpcLn.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) connectNATS() (*nats.Conn, error) {
	log := s.log.Named("nats")
	nc, err := nats.Connect(s.cfg.NATSURL,
		nats.Name("tributary-coordinator"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
		nats.ConnectHandler(func(c *nats.Conn) { log.Info("nats connected", zap.String("url", c.ConnectedUrl())) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", zap.String("url", c.ConnectedUrl())) }),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if !c.IsClosed() {
				log.Warn("nats disconnected", zap.Error(err))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("nats error", zap.Error(err)) }),
	)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", s.cfg.NATSURL, err)
	}
	return nc, nil
}

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.http.Addr() }

// Ready runs the readiness checks (/readyz): nil, or the first failure.
func (s *Server) Ready(ctx context.Context) error { return s.http.Ready(ctx) }

func (s *Server) natsReady(context.Context) error {
	if !s.nc.IsConnected() {
		return fmt.Errorf("%w to %s (%s)", ErrNATSNotConnected, s.cfg.NATSURL, s.nc.Status())
	}
	return nil
}

// storageReady: storage-core answers SERVING (with several addresses: one of them,
// which names the leaders of the rest).
func (s *Server) storageReady(ctx context.Context) error {
	if len(s.storageConns) == 1 {
		return grpcx.HealthCheck{Conn: s.storageConn, Addr: s.cfg.StorageAddr, NotServing: ErrStorageNotServing}.Check(ctx)
	}
	addrs := grpcx.SplitAddrs(s.cfg.StorageAddr)
	var errs []error
	for i, cc := range s.storageConns {
		err := grpcx.HealthCheck{Conn: cc, Addr: addrs[i], NotServing: ErrStorageNotServing}.Check(ctx)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// storageReadMethod: the storage-core calls resent to another node when one does not
// answer (reads).
func storageReadMethod(method string) bool {
	return method == storagev1.StorageService_GetChannel_FullMethodName || method == storagev1.StorageService_ListChannels_FullMethodName
}

// TopicChanged announces a topic change on NATS and refreshes the topics gauge.
func (s *Server) TopicChanged(topic string) {
	if err := s.nc.Publish(natsx.TopicsChangedSubject(s.cfg.ClusterID), []byte(topic)); err != nil {
		s.metrics.notified.WithLabelValues("error").Inc()
		s.log.Warn("could not announce topic change", zap.String("topic", topic), zap.Error(err))
	} else {
		s.metrics.notified.WithLabelValues("ok").Inc()
	}
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

// aclsChanged announces a change of the Kafka ACLs on NATS; kafka-gateway replicas
// reload their authorizer caches (which are also reloaded on their own within their
// bound, should this message be lost).
func (s *Server) aclsChanged() {
	if err := s.nc.Publish(natsx.AclsChangedSubject(s.cfg.ClusterID), nil); err != nil {
		s.log.Warn("could not announce acl change", zap.Error(err))
	}
}

// credentialsChanged announces a change of user's SCRAM credentials on NATS.
func (s *Server) credentialsChanged(user string) {
	if err := s.nc.Publish(natsx.CredentialsChangedSubject(s.cfg.ClusterID), []byte(user)); err != nil {
		s.log.Warn("could not announce credential change", zap.String("user", user), zap.Error(err))
	}
}

// mqttUsersChanged announces a change of an MQTT listener login on NATS; mqtt-bridge
// replicas drop their cached copy (which also expires on its own within its bound,
// should this message be lost).
func (s *Server) mqttUsersChanged(user string) {
	if err := s.nc.Publish(natsx.MqttUsersChangedSubject(s.cfg.ClusterID), []byte(user)); err != nil {
		s.log.Warn("could not announce mqtt user change", zap.String("user", user), zap.Error(err))
	}
}

// Run serves until ctx ends, then shuts down gracefully and releases everything New
// opened. It returns nil after a clean shutdown, or the error that stopped gRPC.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("listening", zap.String("grpc", s.GRPCAddr()), zap.String("http", s.HTTPAddr()))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	wg.Go(func() { s.prepare(ctx) })
	err := grpcx.Serve(ctx, s.grpc, s.grpcLn)
	if err != nil {
		err = fmt.Errorf("grpc serve: %w", err)
	}
	cancel()
	s.health.Shutdown()
	wg.Wait()
	s.groups.Close() // waiting JoinGroup/SyncGroup calls return now, so GracefulStop is quick
	grpcx.GracefulStop(s.grpc, shutdownGrace)
	s.txns.Close() // the markers of committed transactions EndTxn answered
	hctx, hcancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer hcancel()
	if herr := s.http.Close(hctx); herr != nil && !errors.Is(herr, context.DeadlineExceeded) {
		s.log.Warn("http shutdown", zap.Error(herr))
	}
	s.closeClients()
	s.log.Info("stopped")
	return err
}

// prepare creates and migrates the database and starts the group coordinator, each
// retried with backoff until it succeeds or ctx ends; then marks gRPC health SERVING,
// keeps the topics gauge fresh and re-creates channels storage-core lost (at start and
// every reconcileInterval).
func (s *Server) prepare(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := s.store.Prepare(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("postgres not ready, retrying", zap.String("database", s.store.Database()), zap.Duration("backoff", backoff), zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, prepareBackoffMax)
	}
	s.log.Info("postgres ready", zap.String("database", s.store.Database()))
	backoff = 100 * time.Millisecond
	for {
		// Only the NATS subscription can fail here.
		err := s.groups.Start(ctx)
		if err == nil {
			break
		}
		s.log.Warn("group coordinator did not start, retrying", zap.Duration("backoff", backoff), zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, prepareBackoffMax)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.CoordinatorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.GroupCoordinatorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.ConsumerGroupService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.ShareGroupService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.TransactionCoordinatorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.PubSubRegistryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.PubSubSchemaService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.AclService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.CredentialService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.MqttUserService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	tick := time.NewTicker(gaugeRefresh)
	defer tick.Stop()
	reconcile := time.NewTimer(0)
	defer reconcile.Stop()
	for {
		if n, err := s.store.CountTopics(ctx); err == nil {
			s.metrics.topics.Set(float64(n))
		} else if ctx.Err() == nil {
			s.log.Warn("could not count topics", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.refresh:
		case <-reconcile.C:
			// Kafka and Pub/Sub are checked each time: one failing does not hold up the other.
			n, err := s.handler.Reconcile(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("could not check topic channels, retrying", zap.Duration("backoff", reconcileRetry), zap.Error(err))
			} else if n > 0 {
				s.log.Warn("recreated missing topic channels", zap.Int("channels", n))
			}
			pn, perr := s.pubsub.Reconcile(ctx)
			if perr != nil && ctx.Err() == nil {
				s.log.Warn("could not check Pub/Sub channels, retrying", zap.Duration("backoff", reconcileRetry), zap.Error(perr))
			} else if pn > 0 {
				s.log.Warn("recreated missing Pub/Sub channels", zap.Int("channels", pn))
			}
			if (err != nil || perr != nil) && ctx.Err() == nil {
				reconcile.Reset(reconcileRetry)
			} else {
				reconcile.Reset(reconcileInterval)
			}
		}
	}
}

func (s *Server) closeClients() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.storageLeaders != nil {
		s.storageLeaders.Close()
	}
	if s.storageConn != nil {
		_ = s.storageConn.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
}
