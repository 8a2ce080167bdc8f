package fake

import (
	"context"
	"crypto/rand"
	"sort"
	"strconv"
	"sync"

	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Kafka error codes the fake coordinator answers with.
const (
	codeUnknownTopic     = 3
	codeInvalidTopic     = 17
	codeTopicExists      = 36
	codeInvalidPartition = 37
	codeInvalidConfig    = 40
	codeInvalidRequest   = 42
)

type topic struct {
	name       string
	id         [16]byte
	partitions int32
	configs    map[string]string
}

// Coordinator is an in-memory coordinatorv1.CoordinatorServiceClient that creates the
// partition channels in a fake Storage, as the real coordinator does.
type Coordinator struct {
	coordinatorv1.CoordinatorServiceClient

	storage *Storage

	mu     sync.Mutex
	topics map[string]*topic
	nextID int64

	// Err, when set, fails every call with it (simulates an outage).
	Err error
	// GetTopicsCalls counts GetTopics calls.
	GetTopicsCalls int
}

// NewCoordinator returns a fake coordinator over storage.
func NewCoordinator(storage *Storage) *Coordinator {
	return &Coordinator{storage: storage, topics: map[string]*topic{}, nextID: 1000}
}

// SetFailure sets or clears the outage error.
func (c *Coordinator) SetFailure(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Err = err
}

func (t *topic) proto() *coordinatorv1.Topic {
	cfg := map[string]string{}
	for k, v := range t.configs {
		cfg[k] = v
	}
	return &coordinatorv1.Topic{Name: t.name, TopicId: append([]byte(nil), t.id[:]...), Partitions: t.partitions, Configs: cfg}
}

func maxBytes(cfg map[string]string) int {
	n, _ := strconv.Atoi(cfg["max.message.bytes"])
	return n
}

// CreateTopics implements coordinatorv1.CoordinatorServiceClient.
func (c *Coordinator) CreateTopics(_ context.Context, req *coordinatorv1.CreateTopicsRequest, _ ...grpc.CallOption) (*coordinatorv1.CreateTopicsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Err != nil {
		return nil, c.Err
	}
	resp := &coordinatorv1.CreateTopicsResponse{}
	for _, ct := range req.GetTopics() {
		r := &coordinatorv1.TopicResult{Name: ct.GetName()}
		resp.Results = append(resp.Results, r)
		n := ct.GetPartitions()
		if n == -1 {
			n = 1
		}
		switch {
		case channel.ValidateKafkaTopic(ct.GetName()) != nil:
			r.ErrorCode = codeInvalidTopic
		case c.topics[ct.GetName()] != nil:
			r.ErrorCode = codeTopicExists
		case n < 1 || n > channel.MaxPartitions:
			r.ErrorCode = codeInvalidPartition
		default:
			for k := range ct.GetConfigs() {
				if k != "max.message.bytes" && k != "retention.ms" && k != "retention.bytes" && k != "cleanup.policy" && k != "message.timestamp.type" {
					r.ErrorCode = codeInvalidConfig
				}
			}
			if r.ErrorCode != 0 || req.GetValidateOnly() {
				continue
			}
			t := &topic{name: ct.GetName(), partitions: n, configs: map[string]string{}}
			_, _ = rand.Read(t.id[:])
			for k, v := range ct.GetConfigs() {
				t.configs[k] = v
			}
			for p := int32(0); p < n; p++ {
				c.storage.Create(channel.KafkaPartition(t.name, p), maxBytes(t.configs))
			}
			c.topics[t.name] = t
			r.Topic = t.proto()
		}
	}
	return resp, nil
}

// DeleteTopics implements coordinatorv1.CoordinatorServiceClient (by name only).
func (c *Coordinator) DeleteTopics(_ context.Context, req *coordinatorv1.DeleteTopicsRequest, _ ...grpc.CallOption) (*coordinatorv1.DeleteTopicsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Err != nil {
		return nil, c.Err
	}
	resp := &coordinatorv1.DeleteTopicsResponse{}
	for _, n := range req.GetNames() {
		r := &coordinatorv1.TopicResult{Name: n}
		resp.Results = append(resp.Results, r)
		t := c.topics[n]
		if t == nil {
			r.ErrorCode = codeUnknownTopic
			continue
		}
		for p := int32(0); p < t.partitions; p++ {
			c.storage.Delete(channel.KafkaPartition(n, p))
		}
		delete(c.topics, n)
		r.Topic = t.proto()
	}
	return resp, nil
}

// CreatePartitions implements coordinatorv1.CoordinatorServiceClient.
func (c *Coordinator) CreatePartitions(_ context.Context, req *coordinatorv1.CreatePartitionsRequest, _ ...grpc.CallOption) (*coordinatorv1.CreatePartitionsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Err != nil {
		return nil, c.Err
	}
	resp := &coordinatorv1.CreatePartitionsResponse{}
	for _, g := range req.GetTopics() {
		r := &coordinatorv1.TopicResult{Name: g.GetName()}
		resp.Results = append(resp.Results, r)
		t := c.topics[g.GetName()]
		switch {
		case t == nil:
			r.ErrorCode = codeUnknownTopic
		case g.GetCount() <= t.partitions || g.GetCount() > channel.MaxPartitions:
			r.ErrorCode = codeInvalidPartition
		case req.GetValidateOnly():
		default:
			for p := t.partitions; p < g.GetCount(); p++ {
				c.storage.Create(channel.KafkaPartition(t.name, p), maxBytes(t.configs))
			}
			t.partitions = g.GetCount()
			r.Topic = t.proto()
		}
	}
	return resp, nil
}

// GetTopics implements coordinatorv1.CoordinatorServiceClient.
func (c *Coordinator) GetTopics(_ context.Context, req *coordinatorv1.GetTopicsRequest, _ ...grpc.CallOption) (*coordinatorv1.GetTopicsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.GetTopicsCalls++
	if c.Err != nil {
		return nil, c.Err
	}
	resp := &coordinatorv1.GetTopicsResponse{}
	if req.GetAll() {
		var names []string
		for n := range c.topics {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			resp.Topics = append(resp.Topics, c.topics[n].proto())
		}
		return resp, nil
	}
	for _, n := range req.GetNames() {
		if t := c.topics[n]; t != nil {
			resp.Topics = append(resp.Topics, t.proto())
		} else {
			resp.Topics = append(resp.Topics, &coordinatorv1.Topic{Name: n, ErrorCode: codeUnknownTopic})
		}
	}
	return resp, nil
}

var defaultConfigs = []struct{ name, value string }{
	{"cleanup.policy", "delete"},
	{"max.message.bytes", "1048588"},
	{"message.timestamp.type", "CreateTime"},
	{"retention.bytes", "-1"},
	{"retention.ms", "604800000"},
}

// DescribeTopicConfigs implements coordinatorv1.CoordinatorServiceClient.
func (c *Coordinator) DescribeTopicConfigs(_ context.Context, req *coordinatorv1.DescribeTopicConfigsRequest, _ ...grpc.CallOption) (*coordinatorv1.DescribeTopicConfigsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Err != nil {
		return nil, c.Err
	}
	want := map[string]bool{}
	for _, n := range req.GetConfigNames() {
		want[n] = true
	}
	resp := &coordinatorv1.DescribeTopicConfigsResponse{}
	for _, n := range req.GetNames() {
		tc := &coordinatorv1.TopicConfigs{Name: n}
		resp.Topics = append(resp.Topics, tc)
		t := c.topics[n]
		if t == nil {
			tc.ErrorCode = codeUnknownTopic
			continue
		}
		for _, d := range defaultConfigs {
			if len(want) > 0 && !want[d.name] {
				continue
			}
			e := &coordinatorv1.ConfigEntry{Name: d.name, Value: d.value, Source: coordinatorv1.ConfigSource_CONFIG_SOURCE_DEFAULT, Type: coordinatorv1.ConfigType_CONFIG_TYPE_STRING}
			if v, ok := t.configs[d.name]; ok {
				e.Value, e.Source = v, coordinatorv1.ConfigSource_CONFIG_SOURCE_TOPIC
			}
			tc.Entries = append(tc.Entries, e)
		}
	}
	return resp, nil
}

// AlterTopicConfigs implements coordinatorv1.CoordinatorServiceClient: SET and DELETE,
// or with replace only SETs, which become the whole set. A topic is changed all or
// nothing; values are not validated.
func (c *Coordinator) AlterTopicConfigs(_ context.Context, req *coordinatorv1.AlterTopicConfigsRequest, _ ...grpc.CallOption) (*coordinatorv1.AlterTopicConfigsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Err != nil {
		return nil, c.Err
	}
	resp := &coordinatorv1.AlterTopicConfigsResponse{}
	for _, ta := range req.GetTopics() {
		r := &coordinatorv1.TopicResult{Name: ta.GetName()}
		resp.Results = append(resp.Results, r)
		t := c.topics[ta.GetName()]
		if t == nil {
			r.ErrorCode = codeUnknownTopic
			continue
		}
		next := map[string]string{}
		if !req.GetReplace() {
			for k, v := range t.configs {
				next[k] = v
			}
		}
		for _, a := range ta.GetAlterations() {
			switch {
			case a.GetOp() == coordinatorv1.AlterOp_ALTER_OP_SET:
				next[a.GetName()] = a.GetValue()
			case a.GetOp() == coordinatorv1.AlterOp_ALTER_OP_DELETE && !req.GetReplace():
				delete(next, a.GetName())
			default:
				r.ErrorCode = codeInvalidRequest
			}
		}
		if r.ErrorCode == 0 && !req.GetValidateOnly() {
			t.configs = next
		}
	}
	return resp, nil
}

// InitProducerId implements coordinatorv1.CoordinatorServiceClient.
func (c *Coordinator) InitProducerId(_ context.Context, req *coordinatorv1.InitProducerIdRequest, _ ...grpc.CallOption) (*coordinatorv1.InitProducerIdResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Err != nil {
		return nil, c.Err
	}
	if req.GetTransactionalId() != "" {
		return &coordinatorv1.InitProducerIdResponse{ErrorCode: codeInvalidRequest, ProducerId: -1, ProducerEpoch: -1}, nil
	}
	c.nextID++
	return &coordinatorv1.InitProducerIdResponse{ProducerId: c.nextID, ProducerEpoch: 0}, nil
}
