package bridge

// Listener logins kept by the coordinator (listener.coordinator-logins): users put
// through MqttUserService (Postgres), looked up at CONNECT and cached in
// libs/authcache for loginCacheTTL, at most loginCacheEntries users (and apart as many
// absences, so CONNECTs naming made-up users never push real ones out). A change made
// through any coordinator replica is announced on natsx.MqttUsersChangedSubject and
// drops that user's entry here at once, so a changed password or deleted user applies
// to the next CONNECT; the TTL bounds how stale an entry can be should a notice be lost
// (after a NATS reconnect the whole cache is dropped).

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/authcache"
	"github.com/tributary/tributary/libs/natsx"
	"github.com/tributary/tributary/libs/passhash"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Bounds of the coordinator logins cache.
const (
	// loginCacheTTL is how long a looked-up user (or its absence) is reused.
	loginCacheTTL = 10 * time.Second
	// loginCacheEntries bounds the cached users, and apart the cached absences.
	loginCacheEntries = 10000
	// loginLookupTimeout bounds one coordinator lookup (a CONNECT waits for it).
	loginLookupTimeout = 5 * time.Second
	// natsReconnectWait is the pause between NATS reconnect attempts.
	natsReconnectWait = time.Second
)

// remoteLogins looks users up in the coordinator's MqttUserService.
type remoteLogins struct {
	client coordinatorv1.MqttUserServiceClient
	cache  *authcache.Cache[string, *login]
	log    *zap.Logger
	nc     *nats.Conn
}

// newRemoteLogins returns the coordinator's users over client, their cache dropped
// by the change notices of cluster clusterID on the NATS server at natsURL (connected
// in the background, retried for ever).
func newRemoteLogins(client coordinatorv1.MqttUserServiceClient, natsURL, clusterID string, log *zap.Logger) (*remoteLogins, error) {
	r := &remoteLogins{client: client, cache: authcache.New[string, *login](loginCacheTTL, loginCacheEntries), log: log}
	nc, err := nats.Connect(natsURL,
		nats.Name("tributary-mqtt-bridge"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
		// Notices sent while disconnected are lost: forget everything.
		nats.ReconnectHandler(func(*nats.Conn) { r.cache.Invalidate() }),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if !c.IsClosed() {
				log.Warn("nats disconnected; coordinator login changes apply within the cache TTL", zap.Error(err), zap.Duration("ttl", loginCacheTTL))
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", natsURL, err)
	}
	if _, err := nc.Subscribe(natsx.MqttUsersChangedSubject(clusterID), func(m *nats.Msg) { r.cache.Invalidate(string(m.Data)) }); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats subscribe: %w", err)
	}
	r.nc = nc
	return r, nil
}

func (r *remoteLogins) close() { r.nc.Close() }

// get returns the coordinator's user name (nil when it keeps none), or an error when
// the coordinator cannot answer.
func (r *remoteLogins) get(ctx context.Context, name string) (*login, error) {
	lg, _, err := r.cache.Get(ctx, name, func(ctx context.Context) (*login, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, loginLookupTimeout)
		defer cancel()
		resp, err := r.client.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: name})
		switch status.Code(err) {
		case codes.OK:
		case codes.NotFound, codes.InvalidArgument:
			return nil, false, nil
		default:
			return nil, false, err
		}
		u := resp.GetUser()
		lg := &login{publish: rulesOf(u.GetPublish()), subscribe: rulesOf(u.GetSubscribe())}
		if lg.hash, err = passhash.Parse(u.GetPasswordHash()); err != nil {
			// The coordinator checks what it stores; a hash refused here logs nobody in.
			r.log.Warn("coordinator user's hash refused; the user cannot log in", zap.String("username", name), zap.Error(err))
		}
		return lg, true, nil
	})
	return lg, err
}

// rulesOf is a rule list: nil (every topic) when absent, else its filters (none when
// empty).
func rulesOf(r *coordinatorv1.MqttTopicRules) []string {
	if r == nil {
		return nil
	}
	return append([]string{}, r.GetFilters()...)
}
