package group

import (
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/tributary/tributary/libs/natsx"
)

// notifier wakes the JoinGroup and SyncGroup calls waiting on this replica when any
// replica changes their group. A change is announced on natsx.GroupChangedSubject
// ("tributary.<cluster-id>.groups.changed.<token>", natsx.GroupToken). Each replica
// subscribes to the wildcard once and closes the local wake channel of the token; a
// (vanishingly unlikely) shared token only costs a spurious wake-up, since waiters
// re-read their group's state.
type notifier struct {
	nc     *nats.Conn
	prefix string

	mu    sync.Mutex
	waits map[string]chan struct{} // by token
	sub   *nats.Subscription
}

func newNotifier(nc *nats.Conn, clusterID string) *notifier {
	return &notifier{nc: nc, prefix: natsx.GroupChangedPrefix(clusterID), waits: map[string]chan struct{}{}}
}

func (n *notifier) start() error {
	sub, err := n.nc.Subscribe(n.prefix+"*", func(msg *nats.Msg) {
		n.wake(strings.TrimPrefix(msg.Subject, n.prefix))
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
	tok := natsx.GroupToken(groupID)
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waits[tok]
	if !ok {
		ch = make(chan struct{})
		n.waits[tok] = ch
	}
	return ch
}

// wake closes the wake channel of a group token.
func (n *notifier) wake(tok string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.waits[tok]; ok {
		close(ch)
		delete(n.waits, tok)
	}
}

// publish announces a change of the group to every replica (this one included). The
// local waiters are woken at once as well, so a lost NATS message only costs the
// remote replicas a recheck interval.
func (n *notifier) publish(groupID string) error {
	tok := natsx.GroupToken(groupID)
	n.wake(tok)
	return n.nc.Publish(n.prefix+tok, nil)
}
