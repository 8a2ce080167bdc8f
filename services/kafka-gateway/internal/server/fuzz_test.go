package server

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
	"github.com/tributary/tributary/services/kafka-gateway/internal/handler"
)

// TestRandomBodiesNeverPanic decodes random request bodies for every served API and
// version and handles whatever decodes: nothing may panic.
func TestRandomBodiesNeverPanic(t *testing.T) {
	st := fake.NewStorage()
	h := handler.New(handler.Config{ClusterID: "fuzz", AutoCreateTopics: true}, handler.Deps{
		Storage: st, Coordinator: fake.NewCoordinator(st), Log: zaptest.NewLogger(t),
	})
	rng := rand.New(rand.NewSource(1))
	var chain handler.TurnChain
	decoded := 0
	for _, k := range handler.APIKeys() {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			for i := 0; i < 200; i++ {
				body := make([]byte, rng.Intn(64))
				rng.Read(body)
				req := kmsg.RequestForKey(k.ApiKey)
				req.SetVersion(v)
				if req.ReadFrom(body) != nil {
					continue
				}
				decoded++
				r := &handler.Request{Body: req}
				if k.ApiKey == kmsg.Produce.Int16() {
					r.Turn = chain.Next()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if f, ok := req.(*kmsg.FetchRequest); ok {
					f.MaxWaitMillis = 0
				}
				resp, err := h.Handle(ctx, r)
				cancel()
				r.Turn.Finish()
				if errors.Is(err, handler.ErrHandlerPanic) {
					t.Fatalf("%s v%d body %x: %v", kmsg.NameForKey(k.ApiKey), v, body, err)
				}
				if err == nil && resp != nil {
					_ = resp.AppendTo(nil)
				}
			}
		}
	}
	t.Logf("%d random bodies decoded and handled", decoded)
}
