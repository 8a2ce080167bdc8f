package e2e

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TestPubSubStreamFlowControl drives StreamingPull by hand with Google's flow control
// (StreamingPullRequest.max_outstanding_messages/bytes): the server fills the stream up
// to the client's limit and never past it, counting each message from its sending to
// its ack or nack (a deadline of 0), through nacks and the redeliveries they bring,
// partial acks and full ones; a message larger than the byte limit comes alone. The
// client's count is taken down when it sends an ack, before the server can see it, so
// it is never below the server's.
//
// Failed before the gateway held streams to the client's limits (it kept ten times
// them outstanding): limit 1 received 10 messages at once, limit 10 received 30.
func TestPubSubStreamFlowControl(t *testing.T) {
	s := pubsubStack(t)
	for _, tc := range []struct {
		name          string
		msgs, bytes   int64
		publish, size int
		perWindow     int // messages the limit lets out at once
	}{
		{name: "messages=1", msgs: 1, publish: 8, size: 10, perWindow: 1},
		{name: "messages=10", msgs: 10, publish: 30, size: 10, perWindow: 10},
		// 1000-byte data: two fit in 2500 bytes with their headers, three never do.
		{name: "bytes=2500", bytes: 2500, publish: 9, size: 1000, perWindow: 2},
		// Each message alone is larger than the limit: one at a time.
		{name: "bytes=500", bytes: 500, publish: 4, size: 1000, perWindow: 1},
		{name: "messages=3,bytes=2500", msgs: 3, bytes: 2500, publish: 9, size: 1000, perWindow: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, sc := rawPubSub(t, s.PubSubAddrs[0])
			topic, sub := psID("fc"), psID("fc-sub")
			mustCreateTopic(t, pub, topic)
			mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 60})
			ctx := ctxT(t, 2*time.Minute)
			msgs := make([]*pubsubpb.PubsubMessage, tc.publish)
			for i := range msgs {
				data := make([]byte, tc.size)
				copy(data, strconv.Itoa(i)+":")
				msgs[i] = &pubsubpb.PubsubMessage{Data: data}
			}
			if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: msgs}); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			st, err := sc.StreamingPull(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&pubsubpb.StreamingPullRequest{Subscription: subPath(sub), StreamAckDeadlineSeconds: 60,
				MaxOutstandingMessages: tc.msgs, MaxOutstandingBytes: tc.bytes, ProtocolVersion: 1}); err != nil {
				t.Fatal(err)
			}
			in := make(chan *pubsubpb.StreamingPullResponse, 1000)
			errc := make(chan error, 1)
			go func() {
				for {
					r, err := st.Recv()
					if err != nil {
						errc <- err
						return
					}
					in <- r
				}
			}()
			type held struct {
				data  string
				bytes int64
			}
			outstanding := map[string]held{} // ack id -> message
			var outBytes int64
			acked := map[string]bool{}    // by data
			delivered := map[string]int{} // by data
			redelivered := 0
			take := func(r *pubsubpb.StreamingPullResponse) {
				for _, m := range r.GetReceivedMessages() {
					d := string(m.GetMessage().GetData())
					if acked[d] {
						t.Fatalf("message %.8q delivered again after its ack", d)
					}
					if delivered[d] > 0 {
						redelivered++
					}
					delivered[d]++
					outstanding[m.GetAckId()] = held{d, int64(len(d))}
					outBytes += int64(len(d))
				}
				if tc.msgs > 0 && int64(len(outstanding)) > tc.msgs {
					t.Fatalf("%d messages outstanding, max_outstanding_messages %d", len(outstanding), tc.msgs)
				}
				if tc.bytes > 0 && len(outstanding) > 1 && outBytes > tc.bytes {
					t.Fatalf("%d messages of %d data bytes outstanding, max_outstanding_bytes %d", len(outstanding), outBytes, tc.bytes)
				}
			}
			settle := func(ids []string, nack bool) {
				req := &pubsubpb.StreamingPullRequest{}
				for _, id := range ids {
					h := outstanding[id]
					delete(outstanding, id)
					outBytes -= h.bytes
					if nack {
						req.ModifyDeadlineAckIds = append(req.ModifyDeadlineAckIds, id)
						req.ModifyDeadlineSeconds = append(req.ModifyDeadlineSeconds, 0)
					} else {
						req.AckIds = append(req.AckIds, id)
						acked[h.data] = true
					}
				}
				if err := st.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			// fill waits until the stream holds what the limit lets out (or every
			// message not acked yet), then watches it for a while: nothing more may come.
			fill := func() {
				want := min(tc.perWindow, tc.publish-len(acked))
				deadline := time.After(20 * time.Second)
				for len(outstanding) < want {
					select {
					case r := <-in:
						take(r)
					case err := <-errc:
						t.Fatalf("stream: %v", err)
					case <-deadline:
						t.Fatalf("%d messages outstanding after 20s, want %d (%d acked of %d)", len(outstanding), want, len(acked), tc.publish)
					}
				}
				quiet := time.After(300 * time.Millisecond) // watching for excess, not waiting for readiness
				for {
					select {
					case r := <-in:
						take(r)
					case err := <-errc:
						t.Fatalf("stream: %v", err)
					case <-quiet:
						return
					}
				}
			}
			ids := func() []string {
				out := make([]string, 0, len(outstanding))
				for id := range outstanding {
					out = append(out, id)
				}
				return out
			}
			for step := 0; len(acked) < tc.publish; step++ {
				if step > 4*tc.publish {
					t.Fatalf("%d steps and %d of %d messages acked", step, len(acked), tc.publish)
				}
				fill()
				all := ids()
				switch step % 3 {
				case 0: // nack one: it comes back, still within the limit
					settle(all[:1], true)
				case 1: // ack one
					settle(all[:1], false)
				default: // ack all
					settle(all, false)
				}
			}
			if redelivered == 0 {
				t.Fatal("no nacked message was redelivered")
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPubSubWorkersShareLoad: two Go-client workers on one subscription (one through
// each gateway replica), each with MaxOutstandingMessages 1 and a handler taking
// 2 s, share ten messages within one message of each other: each stream holds only
// the one message its client may handle, so the other takes the next. Before the
// gateway held streams to the client's limits, the first stream took all ten (its
// window was ten) and the second idled: 20 s instead of 10.
func TestPubSubWorkersShareLoad(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	topic, subID := psID("share"), psID("share-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, subID, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 60})
	const n = 10
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i))}
	}
	if _, err := pub.Publish(ctxT(t, 30*time.Second), &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		count [2]int
	)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		c := psClient(t, s.PubSubAddrs[w])
		sub := c.Subscriber(subID)
		sub.ReceiveSettings.MaxOutstandingMessages = 1
		sub.ReceiveSettings.NumGoroutines = 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = sub.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
				time.Sleep(2 * time.Second) // the work a slow consumer does
				m.Ack()
				mu.Lock()
				defer mu.Unlock()
				if !seen[string(m.Data)] {
					seen[string(m.Data)] = true
					count[w]++
				}
				if len(seen) == n {
					cancel()
				}
			})
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: Receive: %v", w, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("%d of %d messages handled in %v (workers: %v)", len(seen), n, took, count)
	}
	if d := count[0] - count[1]; d > 1 || d < -1 {
		t.Fatalf("workers handled %v messages in %v: not within one of each other", count, took)
	}
	t.Logf("workers handled %v messages in %v", count, took)
}
