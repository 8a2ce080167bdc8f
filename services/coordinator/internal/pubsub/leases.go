package pubsub

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/natsx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// LeaseSweepLock is the sweep-lock key of the Pub/Sub ack-deadline sweep
// (group.Coordinator.AddSweepLock): a kind of its own, beside the group sweeps.
const LeaseSweepLock = "pubsub-acks"

// leaseSweepTimeout bounds one SweepLeases call, so a stalled storage-core cannot hold
// the sweeper past its lock renewal.
const leaseSweepTimeout = time.Second

// Publisher sends a NATS message (*nats.Conn does).
type Publisher interface {
	Publish(subject string, data []byte) error
}

// LeaseSweeper is the Pub/Sub ack-deadline sweep (DESIGN §4). Run every 250 ms by the
// one coordinator replica holding LeaseSweepLock, it asks storage-core to end the
// leases past their deadline and the finished retry backoffs of every queue
// (QueueService.SweepLeases) and announces each queue that changed on NATS
// (natsx.QueueChangedSubject, empty payload), so the StreamingPull streams of that
// subscription on every pubsub-gateway replica re-read their leases at once.
type LeaseSweeper struct {
	queues    storagev1.QueueServiceClient
	nats      Publisher
	clusterID string
	log       *zap.Logger
}

// NewLeaseSweeper returns the sweep over storage-core's queues, announcing on nats
// under clusterID's subjects.
func NewLeaseSweeper(queues storagev1.QueueServiceClient, nats Publisher, clusterID string, log *zap.Logger) *LeaseSweeper {
	return &LeaseSweeper{queues: queues, nats: nats, clusterID: clusterID, log: log}
}

// Sweep runs one sweep. A failed SweepLeases is returned (the next tick retries); a
// failed announcement is only logged: the gateways' streams re-read their leases on
// their own at the deadlines they know and every few seconds.
func (l *LeaseSweeper) Sweep(ctx context.Context, _ time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, leaseSweepTimeout)
	defer cancel()
	resp, err := l.queues.SweepLeases(ctx, &storagev1.SweepLeasesRequest{})
	if err != nil {
		return storageError("sweep leases", err)
	}
	for _, q := range resp.GetQueues() {
		if err := l.nats.Publish(natsx.QueueChangedSubject(l.clusterID, q), nil); err != nil {
			l.log.Warn("could not announce a queue change", zap.String("queue", q), zap.Error(err))
		}
	}
	return nil
}
