package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// publishAll publishes msgs through the Go client and waits for every result.
func publishAll(t *testing.T, p *pubsub.Publisher, msgs []*pubsub.Message) []string {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	res := make([]*pubsub.PublishResult, len(msgs))
	for i, m := range msgs {
		res[i] = p.Publish(ctx, m)
	}
	ids := make([]string, len(msgs))
	for i, r := range res {
		id, err := r.Get(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		ids[i] = id
	}
	return ids
}

// TestPubSubOrdering: the Go client publishes 20 keys × 500 messages with ordering keys;
// the Go client receives them in publish order per key, also after a nack (message 5 of
// every key is nacked once: neither it nor a later message of its key is delivered before
// its redelivery). The rest is drained with Pull and Acknowledge, still in order.
func TestPubSubOrdering(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	topic, sub := psID("ord"), psID("ord-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{EnableMessageOrdering: true})
	c := psClient(t, s.PubSubAddrs[0])
	const keys, per = 20, 500
	p := c.Publisher(topic)
	p.EnableMessageOrdering = true
	var msgs []*pubsub.Message
	for i := range per {
		for k := range keys {
			msgs = append(msgs, &pubsub.Message{Data: []byte(strconv.Itoa(i)), OrderingKey: "key-" + strconv.Itoa(k)})
		}
	}
	publishAll(t, p, msgs)
	p.Stop()

	// Phase 1: the Go client, until 20 messages of every key are acked.
	const phase1 = 20
	var mu sync.Mutex
	acked := map[string]int{}       // key -> next index expected to be acked
	delivered := map[string][]int{} // key -> indexes in delivery order
	nacked := map[string]bool{}
	var bad []string
	ctx, cancel := context.WithTimeout(ctxT(t, 2*time.Minute), 60*time.Second)
	defer cancel()
	sb := c.Subscriber(sub)
	sb.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{Behavior: pubsub.ShutdownBehaviorNackImmediately}
	// Leases of 10 s (the client's default stream deadline is 60 s): a message the client
	// held when Receive returned and whose nack did not get out blocks its key for that
	// long at most.
	sb.ReceiveSettings.MaxDurationPerAckExtension = 10 * time.Second
	phase1Start := time.Now()
	err := sb.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		mu.Lock()
		defer mu.Unlock()
		i, _ := strconv.Atoi(string(m.Data))
		k := m.OrderingKey
		delivered[k] = append(delivered[k], i)
		if i != acked[k] {
			bad = append(bad, fmt.Sprintf("%s: delivered %d while %d is next", k, i, acked[k]))
		}
		if i == 5 && !nacked[k] {
			nacked[k] = true
			m.Nack()
			return
		}
		m.Ack()
		acked[k] = i + 1
		done := len(acked) == keys
		for _, n := range acked {
			done = done && n >= phase1
		}
		if done {
			cancel()
		}
	})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d out-of-order deliveries, first: %s (key-0 delivered %v)", len(bad), bad[0], delivered["key-0"])
	}
	for k, d := range delivered {
		if len(d) < 7 || d[5] != 5 || d[6] != 5 {
			t.Fatalf("%s: nacked message 5 not redelivered next: %v", k, d)
		}
	}

	t.Logf("phase 1 (Go client) took %v", time.Since(phase1Start))

	// Phase 2: Pull and Acknowledge the rest, checking order per key. The last ack of
	// phase 1 may not have reached the server before Receive returned: a key may start
	// again one message back (at-least-once), never further and never ahead.
	deadline := time.Now().Add(60 * time.Second)
	first := map[string]bool{}
	total := 0
	for k := range acked {
		total += acked[k]
	}
	for total < keys*per {
		if time.Now().After(deadline) {
			t.Fatalf("drained %d of %d", total, keys*per)
		}
		pr, err := sc.Pull(ctxT(t, 30*time.Second), &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 1000})
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
		var ids []string
		for _, rm := range pr.GetReceivedMessages() {
			k := rm.GetMessage().GetOrderingKey()
			i, _ := strconv.Atoi(string(rm.GetMessage().GetData()))
			if !first[k] && i == acked[k]-1 {
				total--
			} else if i != acked[k] {
				t.Fatalf("%s: pulled %d while %d is next", k, i, acked[k])
			}
			first[k] = true
			acked[k] = i + 1
			ids = append(ids, rm.GetAckId())
		}
		if len(ids) > 0 {
			if _, err := sc.Acknowledge(ctxT(t, 30*time.Second), &pubsubpb.AcknowledgeRequest{Subscription: subPath(sub), AckIds: ids}); err != nil {
				t.Fatalf("Acknowledge: %v", err)
			}
			total += len(ids)
		}
	}
	_, q := storageClients(t, s.StorageAddr)
	waitBacklog(t, q, sub, 0, 10*time.Second)
}

// TestPubSubFilter: a filtered and an unfiltered subscription on one topic get exactly
// the matching and all messages.
func TestPubSubFilter(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	topic, all, some := psID("flt"), psID("flt-all"), psID("flt-some")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, all, topic, nil)
	filter := `(attributes.color = "red" AND NOT attributes:skip) OR hasPrefix(attributes.name, "x-")`
	if got := mustCreateSub(t, sc, some, topic, &pubsubpb.Subscription{Filter: filter}); got.GetFilter() != filter {
		t.Fatalf("filter stored as %q", got.GetFilter())
	}
	c := psClient(t, s.PubSubAddrs[1])
	var msgs []*pubsub.Message
	want := map[string]bool{}
	for i := range 200 {
		a := map[string]string{"i": strconv.Itoa(i)}
		switch i % 4 {
		case 0:
			a["color"] = "red"
			want[strconv.Itoa(i)] = true
		case 1:
			a["color"], a["skip"] = "red", "1"
		case 2:
			a["color"], a["name"] = "blue", "x-"+strconv.Itoa(i)
			want[strconv.Itoa(i)] = true
		case 3:
			a["color"] = "blue"
		}
		msgs = append(msgs, &pubsub.Message{Data: []byte("d"), Attributes: a})
	}
	p := c.Publisher(topic)
	publishAll(t, p, msgs)
	p.Stop()

	receive := func(sub string, n int) map[string]bool {
		got := map[string]bool{}
		var mu sync.Mutex
		ctx, cancel := context.WithTimeout(ctxT(t, time.Minute), 30*time.Second)
		defer cancel()
		if err := c.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			mu.Lock()
			defer mu.Unlock()
			got[m.Attributes["i"]] = true
			if len(got) == n {
				cancel()
			}
		}); err != nil {
			t.Fatalf("Receive %s: %v", sub, err)
		}
		return got
	}
	if got := receive(all, 200); len(got) != 200 {
		t.Fatalf("unfiltered subscription got %d of 200", len(got))
	}
	_, q := storageClients(t, s.StorageAddr)
	waitBacklog(t, q, all, 0, 10*time.Second)
	got := receive(some, len(want))
	for i := range got {
		if !want[i] {
			t.Errorf("filtered subscription got non-matching message %s", i)
		}
	}
	if len(got) != len(want) {
		t.Errorf("filtered subscription got %d of %d matching messages", len(got), len(want))
	}
	// Non-matching messages never entered its queue: nothing is left.
	waitBacklog(t, q, some, 0, 10*time.Second)
}

// TestPubSubDeadLetter: a message nacked 5 times lands on the dead-letter topic's
// subscription with the CloudPubSubDeadLetterSource* attributes; delivery_attempt counts
// 1..5 on the way.
func TestPubSubDeadLetter(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	topic, dlt, sub, dlsub := psID("dl"), psID("dl-dead"), psID("dl-sub"), psID("dl-dead-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateTopic(t, pub, dlt)
	mustCreateSub(t, sc, dlsub, dlt, nil)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: topicPath(dlt), MaxDeliveryAttempts: 5},
	})
	c := psClient(t, s.PubSubAddrs[0])
	p := c.Publisher(topic)
	ids := publishAll(t, p, []*pubsub.Message{{Data: []byte("poison"), Attributes: map[string]string{"a": "1"}}})
	p.Stop()

	var mu sync.Mutex
	var attempts []int
	ctx, cancel := context.WithTimeout(ctxT(t, time.Minute), 45*time.Second)
	defer cancel()
	err := c.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Nack()
		mu.Lock()
		defer mu.Unlock()
		if m.DeliveryAttempt != nil {
			attempts = append(attempts, *m.DeliveryAttempt)
		} else {
			attempts = append(attempts, 0)
		}
		if len(attempts) == 5 {
			cancel()
		}
	})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	mu.Lock()
	if fmt.Sprint(attempts) != "[1 2 3 4 5]" {
		t.Fatalf("delivery attempts %v, want [1 2 3 4 5]", attempts)
	}
	mu.Unlock()

	var got *pubsubpb.ReceivedMessage
	deadline := time.Now().Add(30 * time.Second)
	for got == nil && time.Now().Before(deadline) {
		pr, err := sc.Pull(ctxT(t, 30*time.Second), &pubsubpb.PullRequest{Subscription: subPath(dlsub), MaxMessages: 10})
		if err != nil {
			t.Fatalf("Pull dead-letter subscription: %v", err)
		}
		if n := len(pr.GetReceivedMessages()); n > 1 {
			t.Fatalf("dead-letter subscription got %d messages, want 1", n)
		} else if n == 1 {
			got = pr.GetReceivedMessages()[0]
		}
	}
	if got == nil {
		t.Fatal("nothing reached the dead-letter subscription")
	}
	m := got.GetMessage()
	a := m.GetAttributes()
	if string(m.GetData()) != "poison" || a["a"] != "1" || a["CloudPubSubDeadLetterSourceSubscription"] != sub ||
		a["CloudPubSubDeadLetterSourceSubscriptionProject"] != psProject || a["CloudPubSubDeadLetterSourceDeliveryCount"] != "5" ||
		a["CloudPubSubDeadLetterSourceTopicPublishTime"] == "" || m.GetMessageId() == ids[0] {
		t.Fatalf("dead-lettered message: %v", m)
	}
	if _, err := time.Parse(time.RFC3339Nano, a["CloudPubSubDeadLetterSourceTopicPublishTime"]); err != nil {
		t.Errorf("CloudPubSubDeadLetterSourceTopicPublishTime: %v", err)
	}
	if _, err := sc.Acknowledge(ctxT(t, 10*time.Second), &pubsubpb.AcknowledgeRequest{Subscription: subPath(dlsub), AckIds: []string{got.GetAckId()}}); err != nil {
		t.Fatalf("Acknowledge: %v", err)
	}
	_, q := storageClients(t, s.StorageAddr)
	waitBacklog(t, q, sub, 0, 10*time.Second)
}

// TestPubSubExactlyOnce: on an exactly-once subscription, an ack sent after the ack
// deadline passed fails through the Go client's AckWithResult with
// AcknowledgeStatusInvalidAckID; a timely ack succeeds.
func TestPubSubExactlyOnce(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	topic, sub := psID("eod"), psID("eod-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{EnableExactlyOnceDelivery: true})
	c := psClient(t, s.PubSubAddrs[0])
	p := c.Publisher(topic)
	publishAll(t, p, []*pubsub.Message{{Data: []byte("late")}, {Data: []byte("timely")}})
	p.Stop()

	sb := c.Subscriber(sub)
	// Leases of 10 s, never extended: the "late" message's deadline passes in the callback.
	sb.ReceiveSettings.MinDurationPerAckExtension = 10 * time.Second
	sb.ReceiveSettings.MaxDurationPerAckExtension = 10 * time.Second
	sb.ReceiveSettings.MaxExtension = -1
	ctx, cancel := context.WithTimeout(ctxT(t, time.Minute), 45*time.Second)
	defer cancel()
	var mu sync.Mutex
	statuses := map[string]pubsub.AcknowledgeStatus{}
	var errs []error
	err := sb.Receive(ctx, func(cctx context.Context, m *pubsub.Message) {
		if string(m.Data) == "late" {
			select {
			case <-time.After(11 * time.Second):
			case <-cctx.Done():
				return
			}
		}
		st, err := m.AckWithResult().Get(cctx)
		mu.Lock()
		defer mu.Unlock()
		if _, seen := statuses[string(m.Data)]; seen {
			return // a redelivery of "late" after its lease expired
		}
		statuses[string(m.Data)] = st
		if err != nil && st == pubsub.AcknowledgeStatusSuccess {
			errs = append(errs, err)
		}
		if len(statuses) == 2 {
			cancel()
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive: %v", err)
	}
	if len(errs) > 0 {
		t.Fatalf("ack errors: %v", errs)
	}
	if st, ok := statuses["timely"]; !ok || st != pubsub.AcknowledgeStatusSuccess {
		t.Errorf("timely ack: %v (seen %v), want success", st, ok)
	}
	if st, ok := statuses["late"]; !ok || st != pubsub.AcknowledgeStatusInvalidAckID {
		t.Errorf("late ack: %v (seen %v), want AcknowledgeStatusInvalidAckID", st, ok)
	}
}

// pullAll pulls until n messages arrived (acking them when ack is set) and returns
// their data.
func pullAll(t *testing.T, sc pubsubpb.SubscriberClient, sub string, n int, ack bool) []string {
	t.Helper()
	var out []string
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		pr, err := sc.Pull(ctxT(t, 30*time.Second), &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: int32(n - len(out))})
		if err != nil {
			t.Fatalf("Pull %s: %v", sub, err)
		}
		var ids []string
		for _, m := range pr.GetReceivedMessages() {
			out = append(out, string(m.GetMessage().GetData()))
			ids = append(ids, m.GetAckId())
		}
		if ack && len(ids) > 0 {
			if _, err := sc.Acknowledge(ctxT(t, 10*time.Second), &pubsubpb.AcknowledgeRequest{Subscription: subPath(sub), AckIds: ids}); err != nil {
				t.Fatalf("Acknowledge: %v", err)
			}
		}
	}
	if len(out) != n {
		t.Fatalf("pulled %d of %d from %s", len(out), n, sub)
	}
	return out
}

// TestPubSubSnapshotSeekDetach: a snapshot taken before acking brings the messages back
// on Seek; Seek to a time before the publish does too (the subscription retains acked
// messages: without that they stay acked, TestPubSubSeekTimeKeepsAcked), Seek to now
// acks them; a detached subscription refuses Pull with FAILED_PRECONDITION.
func TestPubSubSnapshotSeekDetach(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	_, sc1 := rawPubSub(t, s.PubSubAddrs[1])
	_, q := storageClients(t, s.StorageAddr)
	ctx := ctxT(t, time.Minute)
	topic, other, sub, osub, snap := psID("seek"), psID("seek-o"), psID("seek-sub"), psID("seek-osub"), psID("seek-snap")
	mustCreateTopic(t, pub, topic)
	mustCreateTopic(t, pub, other)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{RetainAckedMessages: true})
	mustCreateSub(t, sc, osub, other, nil)
	before := time.Now().Add(-time.Second)
	if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte("a")}, {Data: []byte("b")}, {Data: []byte("c")}}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	waitBacklog(t, q, sub, 3, 10*time.Second)
	sn, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: "projects/" + psProject + "/snapshots/" + snap, Subscription: subPath(sub)})
	if err != nil || sn.GetTopic() != topicPath(topic) || sn.GetExpireTime() == nil {
		t.Fatalf("CreateSnapshot = %v, %v", sn, err)
	}
	snapName := sn.GetName()
	_, err = sc1.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: snapName, Subscription: subPath(sub)})
	wantCode(t, "CreateSnapshot again", err, codes.AlreadyExists)
	_, err = sc1.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: snapName + "x", Subscription: subPath("missing-" + sub)})
	wantCode(t, "CreateSnapshot of a missing subscription", err, codes.NotFound)
	ts, err := pub.ListTopicSnapshots(ctx, &pubsubpb.ListTopicSnapshotsRequest{Topic: topicPath(topic)})
	if err != nil || len(ts.GetSnapshots()) != 1 || ts.GetSnapshots()[0] != snapName {
		t.Fatalf("ListTopicSnapshots = %v, %v", ts, err)
	}

	pullAll(t, sc, sub, 3, true)
	waitBacklog(t, q, sub, 0, 10*time.Second)
	if _, err := sc1.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snapName}}); err != nil {
		t.Fatalf("Seek to snapshot: %v", err)
	}
	got := pullAll(t, sc, sub, 3, true)
	if fmt.Sprint(sortedStrings(got)) != "[a b c]" {
		t.Fatalf("after Seek to the snapshot: %v", got)
	}
	if _, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(before)}}); err != nil {
		t.Fatalf("Seek to a time: %v", err)
	}
	waitBacklog(t, q, sub, 3, 10*time.Second)
	if _, err := sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.Now()}}); err != nil {
		t.Fatalf("Seek to now: %v", err)
	}
	waitBacklog(t, q, sub, 0, 10*time.Second)

	_, err = sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(osub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snapName}})
	wantCode(t, "Seek to another topic's snapshot", err, codes.FailedPrecondition)
	_, err = sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub)})
	wantCode(t, "Seek without target", err, codes.InvalidArgument)
	_, err = sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: subPath(sub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snapName + "-missing"}})
	wantCode(t, "Seek to a missing snapshot", err, codes.NotFound)
	if _, err := sc.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: snapName}); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	_, err = sc1.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: snapName})
	wantCode(t, "GetSnapshot deleted", err, codes.NotFound)

	if _, err := pub.DetachSubscription(ctx, &pubsubpb.DetachSubscriptionRequest{Subscription: subPath(sub)}); err != nil {
		t.Fatalf("DetachSubscription: %v", err)
	}
	gs, err := sc1.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: subPath(sub)})
	if err != nil || !gs.GetDetached() {
		t.Fatalf("detached subscription = %v, %v", gs, err)
	}
	_, err = sc1.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 1})
	wantCode(t, "Pull on a detached subscription", err, codes.FailedPrecondition)
	// Google's ListTopicSubscriptions "lists the names of the attached subscriptions on
	// this topic": a detached one no longer belongs to it.
	ls, err := pub.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: topicPath(topic)})
	if err != nil || slices.Contains(ls.GetSubscriptions(), subPath(sub)) {
		t.Fatalf("ListTopicSubscriptions after detaching %s = %v, %v", sub, ls.GetSubscriptions(), err)
	}
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// TestPubSubStreamingPullProtocol drives StreamingPull by hand: the first response
// carries the subscription's properties; an empty request (the clients' keepalive) is
// answered; the server stops sending once the client's max_outstanding_messages are
// outstanding and resumes when acks free it.
func TestPubSubStreamingPullProtocol(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	topic, sub := psID("sp"), psID("sp-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{EnableMessageOrdering: true})
	msgs := make([]*pubsubpb.PubsubMessage, 100)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i))}
	}
	ctx := ctxT(t, time.Minute)
	if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: msgs}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	st, err := sc.StreamingPull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pubsubpb.StreamingPullRequest{Subscription: subPath(sub), StreamAckDeadlineSeconds: 30, MaxOutstandingMessages: 5, ProtocolVersion: 1}); err != nil {
		t.Fatal(err)
	}
	type recv struct {
		r   *pubsubpb.StreamingPullResponse
		err error
	}
	in := make(chan recv, 100)
	go func() {
		for {
			r, err := st.Recv()
			in <- recv{r, err}
			if err != nil {
				return
			}
		}
	}()
	next := func(within time.Duration) (*pubsubpb.StreamingPullResponse, bool) {
		select {
		case r := <-in:
			if r.err != nil {
				t.Fatalf("stream: %v", r.err)
			}
			return r.r, true
		case <-time.After(within):
			return nil, false
		}
	}
	first, ok := next(10 * time.Second)
	if !ok || !first.GetSubscriptionProperties().GetMessageOrderingEnabled() || first.GetSubscriptionProperties().GetExactlyOnceDeliveryEnabled() {
		t.Fatalf("first response %v", first)
	}
	var ids []string
	count := len(first.GetReceivedMessages())
	for _, m := range first.GetReceivedMessages() {
		ids = append(ids, m.GetAckId())
	}
	for count < 5 {
		r, ok := next(10 * time.Second)
		if !ok {
			t.Fatalf("got %d messages, want the full window of 5", count)
		}
		for _, m := range r.GetReceivedMessages() {
			ids = append(ids, m.GetAckId())
		}
		count += len(r.GetReceivedMessages())
	}
	// Window full: a keepalive is answered, and no message comes with it.
	if err := st.Send(&pubsubpb.StreamingPullRequest{}); err != nil {
		t.Fatal(err)
	}
	r, ok := next(2 * time.Second)
	if !ok {
		t.Fatal("keepalive not answered")
	}
	if n := len(r.GetReceivedMessages()); n > 0 {
		t.Fatalf("%d more messages beyond the window of 5", n)
	}
	if _, ok := next(time.Second); ok {
		t.Fatal("the server sent more while the window was full")
	}
	// Acks over the stream free the window.
	if err := st.Send(&pubsubpb.StreamingPullRequest{AckIds: ids}); err != nil {
		t.Fatal(err)
	}
	more := 0
	for more == 0 {
		r, ok := next(10 * time.Second)
		if !ok {
			t.Fatal("nothing delivered after the acks")
		}
		more += len(r.GetReceivedMessages())
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// A subscription deleted under an open stream ends it with NOT_FOUND, while the
	// client sends nothing.
	gone := psID("sp-gone")
	mustCreateSub(t, sc, gone, topic, nil)
	st2, err := sc.StreamingPull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Send(&pubsubpb.StreamingPullRequest{Subscription: subPath(gone), StreamAckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Recv(); err != nil {
		t.Fatalf("first response: %v", err)
	}
	if _, err := sc.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subPath(gone)}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := st2.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		wantCode(t, "stream of a deleted subscription", err, codes.NotFound)
	case <-time.After(20 * time.Second):
		t.Fatal("the stream of a deleted subscription did not end within 20s")
	}
}

// TestPubSubPush: a push subscription POSTs Google's JSON envelope to its endpoint,
// redelivers after a failure (500) with the next delivery attempt, and acks on 2xx; a
// no-wrapper subscription POSTs the bare data with x-goog-pubsub-* metadata headers;
// ModifyPushConfig with an empty config turns it back into a pull subscription.
func TestPubSubPush(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	_, q := storageClients(t, s.StorageAddr)
	type push struct {
		body   []byte
		header http.Header
	}
	wrapped, bare := make(chan push, 10), make(chan push, 10)
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p := push{b, r.Header.Clone()}
		if r.URL.Path == "/bare" {
			bare <- p
			return
		}
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		wrapped <- p
		if first {
			http.Error(w, "try again", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()

	topic, sub, bsub := psID("push"), psID("push-sub"), psID("push-bare")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: srv.URL + "/wrapped"}})
	mustCreateSub(t, sc, bsub, topic, &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: srv.URL + "/bare",
		Wrapper: &pubsubpb.PushConfig_NoWrapper_{NoWrapper: &pubsubpb.PushConfig_NoWrapper{WriteMetadata: true}}}})
	_, err := sc.Pull(ctxT(t, 10*time.Second), &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 1})
	wantCode(t, "Pull on a push subscription", err, codes.FailedPrecondition)
	resp, err := pub.Publish(ctxT(t, 10*time.Second), &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{
		{Data: []byte("pushed"), Attributes: map[string]string{"k": "v"}},
	}})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	recv := func(ch chan push, what string) push {
		t.Helper()
		select {
		case p := <-ch:
			return p
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s push within 30s", what)
			return push{}
		}
	}
	type envelope struct {
		Message struct {
			Data        []byte            `json:"data"`
			Attributes  map[string]string `json:"attributes"`
			MessageID   string            `json:"messageId"`
			PublishTime string            `json:"publishTime"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	for i := range 2 { // the first answered 500, the second 200
		p := recv(wrapped, "wrapped")
		var env envelope
		if err := json.Unmarshal(p.body, &env); err != nil {
			t.Fatalf("push %d body %q: %v", i, p.body, err)
		}
		if string(env.Message.Data) != "pushed" || env.Message.Attributes["k"] != "v" || env.Message.MessageID != resp.GetMessageIds()[0] ||
			env.Subscription != subPath(sub) || env.Message.PublishTime == "" || p.header.Get("Content-Type") != "application/json" {
			t.Fatalf("push %d: %s", i, p.body)
		}
	}
	b := recv(bare, "no-wrapper")
	if string(b.body) != "pushed" || b.header.Get("k") != "v" || b.header.Get("x-goog-pubsub-message-id") != resp.GetMessageIds()[0] ||
		b.header.Get("x-goog-pubsub-subscription-name") != subPath(bsub) {
		t.Fatalf("no-wrapper push: %q %v", b.body, b.header)
	}
	waitBacklog(t, q, sub, 0, 15*time.Second)
	waitBacklog(t, q, bsub, 0, 15*time.Second)

	if _, err := sc.ModifyPushConfig(ctxT(t, 10*time.Second), &pubsubpb.ModifyPushConfigRequest{Subscription: subPath(sub), PushConfig: &pubsubpb.PushConfig{}}); err != nil {
		t.Fatalf("ModifyPushConfig: %v", err)
	}
	gs, err := sc.GetSubscription(ctxT(t, 10*time.Second), &pubsubpb.GetSubscriptionRequest{Subscription: subPath(sub)})
	if err != nil || gs.GetPushConfig().GetPushEndpoint() != "" {
		t.Fatalf("after ModifyPushConfig: %v, %v", gs, err)
	}
}
