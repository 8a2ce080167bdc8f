package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Push delivery timings.
const (
	// pushRescan is how often the registry is listed for push subscriptions.
	pushRescan = 2 * time.Second
	// pushBatch is how many messages one worker leases at a time.
	pushBatch = 32
	// pushMinBackoff and pushMaxBackoff bound the redelivery delay after a failed push
	// (doubling per delivery attempt), as Google's push backoff does.
	pushMinBackoff = time.Second
	pushMaxBackoff = 60 * time.Second
)

// Pusher delivers push subscriptions' messages by HTTP POST. Every replica runs one;
// the queue's leases hand each message to one of them at a time. A 2xx answer acks the
// message; anything else (or no answer within the ack deadline) redelivers it after a
// backoff.
type Pusher struct {
	h      *Subscriber
	client *http.Client

	mu      sync.Mutex
	workers map[string]*pushWorker // subscription id -> worker
}

type pushWorker struct {
	spec   *pubsubpb.Subscription // the settings it pushes with
	cancel context.CancelFunc
	done   chan struct{}
}

// NewPusher returns a Pusher over h's backends.
func NewPusher(h *Subscriber) *Pusher {
	return &Pusher{h: h, client: &http.Client{}, workers: map[string]*pushWorker{}}
}

// Run keeps one worker per push subscription until ctx ends.
func (p *Pusher) Run(ctx context.Context) {
	t := time.NewTicker(pushRescan)
	defer t.Stop()
	defer p.stopAll()
	for {
		if err := p.scan(ctx); err != nil && ctx.Err() == nil {
			p.h.log.Debug("push scan failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Pusher) scan(ctx context.Context) error {
	want := map[string]*subInfo{}
	tok := ""
	for {
		resp, err := p.h.reg.ListPubSubSubscriptions(ctx, &coordinatorv1.ListPubSubSubscriptionsRequest{PageSize: 1000, PageToken: tok})
		if err != nil {
			return err
		}
		for _, s := range resp.GetSubscriptions() {
			info, err := decodeSub(s)
			if err != nil || info.detached || info.spec.GetPushConfig().GetPushEndpoint() == "" {
				continue
			}
			want[info.id] = info
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.workers {
		// A changed subscription (push config, ack deadline, dead-letter policy) gets a
		// new worker: a worker pushes with the settings it started with.
		if info, ok := want[id]; !ok || !proto.Equal(info.spec, w.spec) {
			w.cancel()
			<-w.done
			delete(p.workers, id)
		}
	}
	for id, info := range want {
		if _, ok := p.workers[id]; ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &pushWorker{spec: info.spec, cancel: cancel, done: make(chan struct{})}
		p.workers[id] = w
		go func() {
			defer close(w.done)
			p.work(wctx, info)
		}()
	}
	return nil
}

func (p *Pusher) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.workers {
		w.cancel()
		<-w.done
		delete(p.workers, id)
	}
}

// work leases and pushes one subscription's messages until ctx ends.
func (p *Pusher) work(ctx context.Context, sub *subInfo) {
	queue := channel.PubSubSubscription(sub.id)
	deadline := time.Duration(sub.spec.GetAckDeadlineSeconds()) * time.Second
	for ctx.Err() == nil {
		ds, err := p.h.receive(ctx, &storagev1.ReceiveRequest{Queue: queue, MaxMessages: pushBatch, WaitMs: int32(streamPollWait.Milliseconds())})
		if err != nil {
			if ctx.Err() == nil {
				p.h.log.Debug("push receive failed", zap.String("subscription", sub.id), zap.Error(err))
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		var wg sync.WaitGroup
		for i := range ds {
			wg.Go(func() {
				rm := ds[i].received(sub)
				p.h.showDeletedSchema(ctx, rm.GetMessage())
				pctx, cancel := context.WithTimeout(ctx, deadline)
				err := p.post(pctx, sub, rm)
				cancel()
				ids := []string{rm.GetAckId()}
				actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				defer acancel()
				if err == nil {
					p.h.touch(sub.id)
					if _, err := p.h.queues.Ack(actx, &storagev1.AckRequest{Queue: queue, AckIds: ids}); err != nil {
						p.h.log.Debug("push ack failed", zap.String("subscription", sub.id), zap.Error(err))
					}
					return
				}
				backoff := min(pushMinBackoff<<min(max(ds[i].attempt-1, 0), 16), pushMaxBackoff)
				p.h.log.Debug("push failed, retrying", zap.String("subscription", sub.id), zap.Duration("backoff", backoff), zap.Error(err))
				if _, err := p.h.queues.ModifyAckDeadline(actx, &storagev1.ModifyAckDeadlineRequest{Queue: queue, AckIds: ids, AckDeadlineMs: int32(backoff.Milliseconds())}); err != nil {
					p.h.log.Debug("push backoff failed", zap.String("subscription", sub.id), zap.Error(err))
				}
			})
		}
		wg.Wait()
	}
}

// pushEnvelope is Google's push request body (wrapped form).
type pushEnvelope struct {
	Message         pushMessage `json:"message"`
	Subscription    string      `json:"subscription"`
	DeliveryAttempt int32       `json:"deliveryAttempt,omitempty"`
}

type pushMessage struct {
	Data             []byte            `json:"data,omitempty"`
	Attributes       map[string]string `json:"attributes,omitempty"`
	MessageID        string            `json:"messageId"`
	MessageIDSnake   string            `json:"message_id"`
	PublishTime      string            `json:"publishTime"`
	PublishTimeSnake string            `json:"publish_time"`
	OrderingKey      string            `json:"orderingKey,omitempty"`
}

// post sends one message to the subscription's endpoint: the JSON envelope, or with
// the no-wrapper setting the data as the body (and, with write_metadata, the
// attributes and message metadata as x-goog-pubsub-* headers).
func (p *Pusher) post(ctx context.Context, sub *subInfo, rm *pubsubpb.ReceivedMessage) error {
	pc := sub.spec.GetPushConfig()
	m := rm.GetMessage()
	published := m.GetPublishTime().AsTime().UTC().Format(time.RFC3339Nano)
	var body []byte
	hdr := http.Header{}
	if nw := pc.GetNoWrapper(); nw != nil {
		body = m.GetData()
		if nw.GetWriteMetadata() {
			for k, v := range m.GetAttributes() {
				// Pub/Sub allows keys and values no HTTP header can carry; sending
				// them would fail every push of the message.
				if httpguts.ValidHeaderFieldName(k) && httpguts.ValidHeaderFieldValue(v) {
					hdr.Set(k, v)
				}
			}
			hdr.Set("x-goog-pubsub-subscription-name", sub.spec.GetName())
			hdr.Set("x-goog-pubsub-publish-time", published)
			// The ordering key (any string in Pub/Sub) and the message id (any
			// header value of a native append) likewise.
			if id := m.GetMessageId(); httpguts.ValidHeaderFieldValue(id) {
				hdr.Set("x-goog-pubsub-message-id", id)
			}
			if k := m.GetOrderingKey(); k != "" && httpguts.ValidHeaderFieldValue(k) {
				hdr.Set("x-goog-pubsub-ordering-key", k)
			}
		}
	} else {
		env := pushEnvelope{
			Message: pushMessage{
				Data: m.GetData(), Attributes: m.GetAttributes(), MessageID: m.GetMessageId(), MessageIDSnake: m.GetMessageId(),
				PublishTime: published, PublishTimeSnake: published, OrderingKey: m.GetOrderingKey(),
			},
			Subscription: sub.spec.GetName(), DeliveryAttempt: rm.GetDeliveryAttempt(),
		}
		var err error
		if body, err = json.Marshal(env); err != nil {
			return err
		}
		hdr.Set("Content-Type", "application/json")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pc.GetPushEndpoint(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("push endpoint answered %s", resp.Status)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
