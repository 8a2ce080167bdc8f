package e2e

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// requestCounter is a kgo hook counting requests written to each broker, by API key.
type requestCounter struct {
	mu sync.Mutex
	n  map[int32]map[int16]int
}

func (c *requestCounter) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int32]map[int16]int{}
	}
	if c.n[meta.NodeID] == nil {
		c.n[meta.NodeID] = map[int16]int{}
	}
	c.n[meta.NodeID][key]++
}

func (c *requestCounter) count(node int32, key int16) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[node][key]
}

// waitBrokers polls one gateway (addr) with Metadata requests sent straight to it
// (not kgo's cached view) until it lists want brokers, and returns them.
func waitBrokers(t *testing.T, addr string, want int) []kmsg.MetadataResponseBroker {
	t.Helper()
	cl := newClient(t, []string{addr})
	seed := cl.SeedBrokers()[0]
	var (
		brokers []kmsg.MetadataResponseBroker
		err     error
	)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		var resp *kmsg.MetadataResponse
		if resp, err = req.RequestWith(ctxT(t, 10*time.Second), seed); err == nil {
			brokers = resp.Brokers
			if len(brokers) == want {
				return brokers
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Metadata from %s did not list %d brokers within 30 s; last answer: brokers %+v, err %v", addr, want, brokers, err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// TestTwoGateways: two kafka-gateway replicas on different ports both appear in
// Metadata (asked through either one), partition leaders of a 6-partition topic are
// spread over both, and a kgo client seeded with both produces to and fetches from
// both.
func TestTwoGateways(t *testing.T) {
	s := stack.StartT(t, stack.Options{Gateways: 2})

	wantBrokers := map[int32]string{}
	for i, a := range s.KafkaAddrs {
		wantBrokers[int32(i)] = a
	}
	for i, a := range s.KafkaAddrs {
		for _, b := range waitBrokers(t, a, 2) {
			got := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
			if wantBrokers[b.NodeID] != got {
				t.Errorf("metadata from gateway %d: broker %d at %s, want %s", i, b.NodeID, got, wantBrokers[b.NodeID])
			}
		}
	}

	topic := topicName("two")
	adm := newAdmin(t, s.KafkaAddrs)
	createTopic(t, adm, topic, 6, nil)
	for i, a := range s.KafkaAddrs {
		// Ask this gateway itself, not kgo's cached view of the cluster.
		cl := newClient(t, []string{a})
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 10*time.Second), cl.SeedBrokers()[0])
		if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || len(resp.Topics[0].Partitions) != 6 {
			t.Fatalf("metadata for %s from gateway %d: %v %+v", topic, i, err, resp)
		}
		leaders := map[int32][]int32{}
		for _, p := range resp.Topics[0].Partitions {
			leaders[p.Leader] = append(leaders[p.Leader], p.Partition)
		}
		if len(leaders[0]) == 0 || len(leaders[1]) == 0 || len(leaders) != 2 {
			t.Fatalf("metadata from gateway %d: partition leaders %v, want partitions spread over nodes 0 and 1", i, leaders)
		}
		t.Logf("metadata from gateway %d: leaders %v", i, leaders)
	}

	var hooks requestCounter
	cl := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.WithHooks(&hooks))
	recs := produceKeyed(t, cl, topic, "two", 1200)
	parts := map[int32]int{}
	for _, r := range recs {
		parts[r.Partition]++
	}
	if len(parts) != 6 {
		t.Errorf("records on %d partitions (%v), want 6", len(parts), parts)
	}

	var chooks requestCounter
	got := consumeAll(t, s.KafkaAddrs, topic, kgo.WithHooks(&chooks))
	checkDense(t, got)
	want := make([]string, len(recs))
	for i, r := range recs {
		want[i] = fmt.Sprintf("%d/%d %s=%s", r.Partition, r.Offset, r.Key, r.Value)
	}
	gotS := make([]string, len(got))
	for i, r := range got {
		gotS[i] = fmt.Sprintf("%d/%d %s=%s", r.Partition, r.Offset, r.Key, r.Value)
	}
	sort.Strings(want)
	if d := multisetDiff(gotS, want); d != "" {
		t.Fatalf("read back through two gateways: %s", d)
	}
	const produceKey, fetchKey = 0, 1
	for node := int32(0); node < 2; node++ {
		if hooks.count(node, produceKey) == 0 {
			t.Errorf("no Produce request went to gateway %d", node)
		}
		if chooks.count(node, fetchKey) == 0 {
			t.Errorf("no Fetch request went to gateway %d", node)
		}
	}
}
