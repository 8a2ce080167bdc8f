package e2e

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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

// waitBrokers polls Metadata through adm until it lists want brokers.
func waitBrokers(t *testing.T, adm *kadm.Client, want int) kadm.Metadata {
	t.Helper()
	var md kadm.Metadata
	var err error
	waitFor(t, 30*time.Second, fmt.Sprintf("%d brokers in Metadata", want), func() bool {
		md, err = adm.BrokerMetadata(ctxT(t, 10*time.Second))
		return err == nil && len(md.Brokers) == want
	})
	return md
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
		md := waitBrokers(t, newAdmin(t, []string{a}), 2)
		for _, b := range md.Brokers {
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
		td := waitTopic(t, newAdmin(t, []string{a}), topic, 6)
		leaders := map[int32][]int32{}
		for _, p := range td.Partitions {
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
