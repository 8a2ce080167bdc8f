// Package bridge is the mqtt-bridge process: upstream MQTT connections (paho, manual
// acknowledgements after storage-core made the record durable), the embedded listener
// broker (mochi-mqtt, PUBACK held until stored), the kafka-to-mqtt consumers
// (committed offsets in the coordinator), and /metrics /healthz /readyz.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// Bridge is a running mqtt-bridge.
type Bridge struct {
	cfg     *config.Config
	log     *zap.Logger
	reg     *prometheus.Registry
	http    *obs.HTTP
	m       *metrics
	storage storagev1.StorageServiceClient
	coord   coordinatorv1.CoordinatorServiceClient
	groups  coordinatorv1.GroupCoordinatorServiceClient
	// mqttUsers is the coordinator's MqttUserService (listener.coordinator-logins).
	mqttUsers coordinatorv1.MqttUserServiceClient
	conns     []*grpc.ClientConn
	// leaders is the storage-core cluster's connection when storage-addr lists several
	// nodes (else storage-core is the first of conns).
	leaders *grpcx.LeaderConn
	store   *store

	ctx    context.Context
	cancel context.CancelFunc

	upstreams map[string]*upstream
	listener  *listener
	sinks     []*sinkRunner
}

// New validates nothing (config.Load did), dials storage-core and the coordinator,
// binds the HTTP and MQTT listeners and connects nothing yet; Run starts the work.
func New(cfg *config.Config, log *zap.Logger) (*Bridge, error) {
	b := &Bridge{cfg: cfg, log: log, upstreams: map[string]*upstream{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.reg = obs.NewRegistry()
	b.http = obs.NewHTTP(b.reg, log)
	b.m = newMetrics(b.reg)
	storageSec, err := backendSecurity(&cfg.StorageTLS, cfg.TokenFile).DialOptions()
	if err != nil {
		return nil, fmt.Errorf("storage-tls: %w", err)
	}
	coordSec, err := backendSecurity(&cfg.CoordinatorTLS, cfg.TokenFile).DialOptions()
	if err != nil {
		return nil, fmt.Errorf("coordinator-tls: %w", err)
	}
	var storage grpc.ClientConnInterface
	var sc *grpc.ClientConn
	if addrs := grpcx.SplitAddrs(cfg.StorageAddr); len(addrs) > 1 {
		// A storage-core cluster (raft mode): each call goes to its channel's leader.
		if b.leaders, err = grpcx.NewLeaderConn(addrs, grpcx.StorageReads, storageSec...); err != nil {
			return nil, err
		}
		storage = b.leaders
	} else {
		if sc, err = grpcx.Dial(cfg.StorageAddr, storageSec...); err != nil {
			return nil, err
		}
		storage = sc
		b.conns = append(b.conns, sc)
	}
	cc, err := grpcx.Dial(cfg.CoordinatorAddr, coordSec...)
	if err != nil {
		b.close()
		return nil, err
	}
	b.conns = append(b.conns, cc)
	b.storage = storagev1.NewStorageServiceClient(storage)
	b.coord = coordinatorv1.NewCoordinatorServiceClient(cc)
	b.groups = coordinatorv1.NewGroupCoordinatorServiceClient(cc)
	b.mqttUsers = coordinatorv1.NewMqttUserServiceClient(cc)
	b.store = newStore(b.ctx, b.storage, b.coord, cfg.StoreTimeout, log)
	if b.leaders != nil {
		// A cluster is ready while one node serves (it names the leaders of the rest).
		leaders := b.leaders
		b.http.AddReadyCheck("storage-core", func(ctx context.Context) error {
			return leaders.AnyServing(ctx, grpcx.HealthCheck{Timeout: 2 * time.Second})
		})
	} else {
		b.healthCheck("storage-core", sc)
	}
	b.healthCheck("coordinator", cc)

	bySource := map[string][]*mapping.Route{}
	for _, mc := range cfg.MQTTToKafka {
		r, err := mapping.NewRoute(mc)
		if err != nil {
			b.close()
			return nil, err
		}
		bySource[mc.Source] = append(bySource[mc.Source], r)
	}
	for _, c := range cfg.Clusters {
		u := newUpstream(b, c, bySource[c.Name])
		b.upstreams[c.Name] = u
		b.http.AddReadyCheck("mqtt "+c.Name, u.ready)
	}
	if cfg.Listener != nil {
		l, err := newListener(b, *cfg.Listener, bySource[config.Listener])
		if err != nil {
			b.close()
			return nil, err
		}
		b.listener = l
	}
	for _, kc := range cfg.KafkaToMQTT {
		s, err := mapping.NewSink(kc)
		if err != nil {
			b.close()
			return nil, err
		}
		var pub publisher
		if kc.Target == config.Listener {
			pub = b.listener
		} else if u := b.upstreams[kc.Target]; u != nil {
			pub = u
		} else {
			b.close()
			return nil, fmt.Errorf("kafka-to-mqtt %q: unknown target %q", kc.ID, kc.Target)
		}
		b.sinks = append(b.sinks, &sinkRunner{b: b, s: s, pub: pub, log: log.With(zap.String("mapping", kc.ID))})
	}
	if cfg.HTTPAddr != "" {
		if err := b.http.Listen(cfg.HTTPAddr); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *Bridge) healthCheck(name string, cc *grpc.ClientConn) {
	b.http.AddReadyCheck(name, grpcx.HealthCheck{Conn: cc, Timeout: 2 * time.Second}.Check)
}

// HTTPAddr is the bound HTTP address ("" when disabled).
func (b *Bridge) HTTPAddr() string { return b.http.Addr() }

// ListenerAddr is the bound MQTT listener address ("" without a listener).
func (b *Bridge) ListenerAddr() string {
	if b.listener == nil {
		return ""
	}
	return b.listener.Addr()
}

// Ready runs the readiness checks (what /readyz reports).
func (b *Bridge) Ready(ctx context.Context) error { return b.http.Ready(ctx) }

// Run serves until ctx ends, then stops everything and returns.
func (b *Bridge) Run(ctx context.Context) error {
	defer b.close()
	var wg sync.WaitGroup
	var startErr error
	for _, u := range b.upstreams {
		if err := u.start(b.ctx); err != nil {
			startErr = errors.Join(startErr, fmt.Errorf("cluster %s: %w", u.cfg.Name, err))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.run(b.ctx)
		}()
	}
	if b.listener != nil {
		if err := b.listener.serve(); err != nil {
			startErr = errors.Join(startErr, err)
		}
	}
	for _, s := range b.sinks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(b.ctx)
		}()
	}
	if startErr == nil {
		b.log.Info("running", zap.String("http", b.HTTPAddr()), zap.String("listener", b.ListenerAddr()),
			zap.Int("clusters", len(b.upstreams)), zap.Int("mqtt_to_kafka", len(b.cfg.MQTTToKafka)), zap.Int("kafka_to_mqtt", len(b.sinks)))
		select {
		case <-ctx.Done():
		case <-b.ctx.Done():
		}
	}
	b.log.Info("stopping")
	if b.listener != nil {
		b.listener.close()
	}
	b.cancel()
	wg.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, u := range b.upstreams {
		u.stop(stopCtx)
	}
	b.store.wait()
	return startErr
}

func (b *Bridge) close() {
	b.cancel()
	if b.listener != nil {
		// After store.wait (Run): no batch is journaled any more.
		b.listener.sessions.Close()
		if b.listener.logins != nil {
			b.listener.logins.close()
		}
	}
	if b.http != nil && b.http.Addr() != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = b.http.Close(ctx)
		cancel()
	}
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
	if b.leaders != nil {
		b.leaders.Close()
		b.leaders = nil
	}
}

// backendSecurity is how a backend is dialed: plaintext unless t names a CA or a
// client certificate, else TLS with them, and the token when one is given.
func backendSecurity(t *config.TLSConfig, tokenFile string) grpcx.DialSecurity {
	if t.CAFile == "" && t.CertFile == "" {
		return grpcx.DialSecurity{}
	}
	return grpcx.DialSecurity{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, TokenFile: tokenFile}
}
