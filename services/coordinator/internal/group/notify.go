package group

import (
	"encoding/hex"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// notifier wakes the JoinGroup and SyncGroup calls waiting on this replica when any
// replica changes their group. A change is announced on
// "tributary.<cluster-id>.groups.changed.<hex(group id)>" (hex: a group id may hold any
// character, a NATS token may not); each replica subscribes to the wildcard once and
// closes the local wake channel of that group.
type notifier struct {
	nc     *nats.Conn
	prefix string

	mu    sync.Mutex
	waits map[string]chan struct{}
	sub   *nats.Subscription
}

func newNotifier(nc *nats.Conn, clusterID string) *notifier {
	return &notifier{nc: nc, prefix: "tributary." + clusterID + ".groups.changed.", waits: map[string]chan struct{}{}}
}

func (n *notifier) start() error {
	sub, err := n.nc.Subscribe(n.prefix+"*", func(msg *nats.Msg) {
		id, err := hex.DecodeString(strings.TrimPrefix(msg.Subject, n.prefix))
		if err != nil {
			return
		}
		n.wake(string(id))
	})
	if err != nil {
		return err
	}
	n.sub = sub
	// Make sure the server has the subscription before callers rely on it; while NATS
	// is (re)connecting the subscription is sent on connect, and waiters re-read the
	// state every WaitRecheck meanwhile.
	_ = n.nc.Flush()
	return nil
}

func (n *notifier) stop() {
	if n.sub != nil {
		_ = n.sub.Unsubscribe()
	}
}

// wait returns a channel closed at the next change of the group. Take it before
// reading the group's state so no change between the read and the wait is missed.
func (n *notifier) wait(groupID string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waits[groupID]
	if !ok {
		ch = make(chan struct{})
		n.waits[groupID] = ch
	}
	return ch
}

func (n *notifier) wake(groupID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.waits[groupID]; ok {
		close(ch)
		delete(n.waits, groupID)
	}
}

// publish announces a change of the group to every replica (this one included). The
// local waiters are woken at once as well, so a lost NATS message only costs the
// remote replicas a recheck interval.
func (n *notifier) publish(groupID string) error {
	n.wake(groupID)
	return n.nc.Publish(n.prefix+hex.EncodeToString([]byte(groupID)), nil)
}
