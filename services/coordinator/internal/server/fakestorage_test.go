package server

import (
	"cmp"
	"context"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// fakeStorage is an in-process storage-core that keeps channel configs in memory and
// records the admin calls it gets.
type fakeStorage struct {
	storagev1.UnimplementedStorageServiceServer

	mu       sync.Mutex
	channels map[string]*storagev1.ChannelConfig
	calls    []string // "create kafka.t", "update kafka.t", "delete kafka.t"
	// failCreate makes CreateChannel of these names fail with UNAVAILABLE.
	failCreate map[string]bool
	// hwms are the high watermarks GetChannel reports (0 when not set).
	hwms map[string]int64

	srv    *grpc.Server
	addr   string
	shares *fakeShares
	queues *fakeQueues
}

// fakeQueues is an in-process QueueService keeping only which queues exist (with the
// request that created them) and which were detached.
type fakeQueues struct {
	storagev1.UnimplementedQueueServiceServer

	mu       sync.Mutex
	queues   map[string]*storagev1.CreateQueueRequest
	detached map[string]bool
	// failUnbind makes Unbind of these queues fail with UNAVAILABLE.
	failUnbind map[string]bool
	// created counts the queues CreateQueue made.
	created int
	// swept counts SweepLeases calls; sweepChanged is what each one answers.
	swept        int
	sweepChanged []string
}

func (f *fakeQueues) SweepLeases(context.Context, *storagev1.SweepLeasesRequest) (*storagev1.SweepLeasesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.swept++
	return &storagev1.SweepLeasesResponse{Queues: f.sweepChanged}, nil
}

func (f *fakeQueues) Unbind(_ context.Context, req *storagev1.UnbindRequest) (*storagev1.UnbindResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUnbind[req.GetQueue()] {
		return nil, status.Error(codes.Unavailable, "injected failure")
	}
	q, ok := f.queues[req.GetQueue()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no queue %s", req.GetQueue())
	}
	var keep []*storagev1.Binding
	for _, b := range q.Bindings {
		if b.GetSource() != req.GetSource() {
			keep = append(keep, b)
		}
	}
	removed := len(keep) != len(q.Bindings)
	q.Bindings = keep
	return &storagev1.UnbindResponse{Removed: removed}, nil
}

func (f *fakeQueues) CreateQueue(_ context.Context, req *storagev1.CreateQueueRequest) (*storagev1.CreateQueueResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[req.GetName()]; ok {
		if req.GetIfNotExists() {
			return &storagev1.CreateQueueResponse{}, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "queue %s exists", req.GetName())
	}
	f.queues[req.GetName()] = proto.Clone(req).(*storagev1.CreateQueueRequest)
	f.created++
	return &storagev1.CreateQueueResponse{Created: true}, nil
}

func (f *fakeQueues) DeleteQueue(_ context.Context, req *storagev1.DeleteQueueRequest) (*storagev1.DeleteQueueResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[req.GetName()]; !ok && !req.GetIfExists() {
		return nil, status.Errorf(codes.NotFound, "no queue %s", req.GetName())
	}
	delete(f.queues, req.GetName())
	return &storagev1.DeleteQueueResponse{}, nil
}

func (f *fakeQueues) UpdateQueueConfig(_ context.Context, req *storagev1.UpdateQueueConfigRequest) (*storagev1.UpdateQueueConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no queue %s", req.GetName())
	}
	q.Config = req.GetConfig()
	return &storagev1.UpdateQueueConfigResponse{}, nil
}

func (f *fakeQueues) Detach(_ context.Context, req *storagev1.DetachRequest) (*storagev1.DetachResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.detached == nil {
		f.detached = map[string]bool{}
	}
	f.detached[req.GetName()] = true
	return &storagev1.DetachResponse{}, nil
}

// drop removes a queue behind the coordinator's back (lost storage).
func (f *fakeQueues) drop(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.queues, name)
}

// names returns the queue names, sorted.
func (f *fakeQueues) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.queues))
	for n := range f.queues {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (f *fakeQueues) get(name string) *storagev1.CreateQueueRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queues[name]
}

func startFakeStorage(t *testing.T) *fakeStorage {
	t.Helper()
	f := &fakeStorage{channels: map[string]*storagev1.ChannelConfig{}, failCreate: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake storage listen: %v", err)
	}
	f.addr = ln.Addr().String()
	f.srv = grpcx.NewServer(zap.NewNop())
	storagev1.RegisterStorageServiceServer(f.srv, f)
	f.queues = &fakeQueues{queues: map[string]*storagev1.CreateQueueRequest{}}
	storagev1.RegisterQueueServiceServer(f.srv, f.queues)
	f.shares = &fakeShares{spsos: map[string]map[sharePart]int64{}}
	storagev1.RegisterShareServiceServer(f.srv, f.shares)
	grpcx.RegisterStandard(f.srv)
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeStorage) CreateChannel(_ context.Context, req *storagev1.CreateChannelRequest) (*storagev1.CreateChannelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "create "+req.GetName())
	if f.failCreate[req.GetName()] {
		return nil, status.Error(codes.Unavailable, "injected failure")
	}
	if cfg, ok := f.channels[req.GetName()]; ok {
		if !req.GetIfNotExists() {
			return nil, status.Error(codes.AlreadyExists, "exists")
		}
		return &storagev1.CreateChannelResponse{Channel: &storagev1.Channel{Name: req.GetName(), Config: cfg}}, nil
	}
	cfg := proto.Clone(req.GetConfig()).(*storagev1.ChannelConfig)
	if cfg == nil {
		cfg = &storagev1.ChannelConfig{}
	}
	f.channels[req.GetName()] = cfg
	return &storagev1.CreateChannelResponse{Channel: &storagev1.Channel{Name: req.GetName(), Config: cfg}, Created: true}, nil
}

func (f *fakeStorage) DeleteChannel(_ context.Context, req *storagev1.DeleteChannelRequest) (*storagev1.DeleteChannelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "delete "+req.GetName())
	if _, ok := f.channels[req.GetName()]; !ok && !req.GetIfExists() {
		return nil, status.Error(codes.NotFound, "no such channel")
	}
	delete(f.channels, req.GetName())
	return &storagev1.DeleteChannelResponse{}, nil
}

func (f *fakeStorage) UpdateChannelConfig(_ context.Context, req *storagev1.UpdateChannelConfigRequest) (*storagev1.UpdateChannelConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "update "+req.GetName())
	cfg, ok := f.channels[req.GetName()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such channel")
	}
	next := proto.Clone(cfg).(*storagev1.ChannelConfig)
	src := req.GetConfig().ProtoReflect()
	dst := next.ProtoReflect()
	for _, field := range req.GetUpdateMask() {
		fd := src.Descriptor().Fields().ByName(protoreflect.Name(field))
		if fd == nil {
			return nil, status.Errorf(codes.InvalidArgument, "unknown field %s", field)
		}
		dst.Set(fd, src.Get(fd))
	}
	if len(req.GetUpdateMask()) == 0 {
		next = proto.Clone(req.GetConfig()).(*storagev1.ChannelConfig)
	}
	f.channels[req.GetName()] = next
	return &storagev1.UpdateChannelConfigResponse{Channel: &storagev1.Channel{Name: req.GetName(), Config: next}}, nil
}

func (f *fakeStorage) ListChannels(_ context.Context, req *storagev1.ListChannelsRequest) (*storagev1.ListChannelsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &storagev1.ListChannelsResponse{}
	for n, cfg := range f.channels {
		if strings.HasPrefix(n, req.GetPrefix()) {
			resp.Channels = append(resp.Channels, &storagev1.Channel{Name: n, Config: proto.Clone(cfg).(*storagev1.ChannelConfig)})
		}
	}
	// Queues are channels too (CHANNEL_KIND_QUEUE), as storage-core lists them.
	for _, n := range f.queues.names() {
		if strings.HasPrefix(n, req.GetPrefix()) {
			resp.Channels = append(resp.Channels, &storagev1.Channel{Name: n, Kind: storagev1.ChannelKind_CHANNEL_KIND_QUEUE})
		}
	}
	return resp, nil
}

func (f *fakeStorage) GetChannel(_ context.Context, req *storagev1.GetChannelRequest) (*storagev1.GetChannelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg, ok := f.channels[req.GetName()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such channel")
	}
	return &storagev1.GetChannelResponse{Channel: &storagev1.Channel{Name: req.GetName(), Config: proto.Clone(cfg).(*storagev1.ChannelConfig),
		HighWatermark: f.hwms[req.GetName()]}}, nil
}

// setHighWatermark sets the high watermark (sequence of the last record) GetChannel
// reports for a channel.
func (f *fakeStorage) setHighWatermark(name string, hwm int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hwms == nil {
		f.hwms = map[string]int64{}
	}
	f.hwms[name] = hwm
}

// drop removes a channel behind the coordinator's back (lost storage).
func (f *fakeStorage) drop(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.channels, name)
}

// names returns the channel names, sorted.
func (f *fakeStorage) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.channels))
	for n := range f.channels {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (f *fakeStorage) config(name string) *storagev1.ChannelConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.channels[name]
	if c == nil {
		return nil
	}
	return proto.Clone(c).(*storagev1.ChannelConfig)
}

func (f *fakeStorage) setFailCreate(name string, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failCreate[name] = fail
}

// setConfig replaces a channel's config behind the coordinator's back.
func (f *fakeStorage) setConfig(name string, c *storagev1.ChannelConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.channels[name] = c
}

type sharePart struct {
	topic string
	p     int32
}

// fakeShares is storage-core's ShareService reduced to the share-partition start
// offsets the coordinator's offsets admin reads and writes.
type fakeShares struct {
	storagev1.UnimplementedShareServiceServer

	mu    sync.Mutex
	spsos map[string]map[sharePart]int64 // group -> partition -> start offset
	// released are the ReleaseMember calls, "group/member".
	released []string
}

func (f *fakeShares) ReleaseMember(_ context.Context, req *storagev1.ReleaseMemberRequest) (*storagev1.ReleaseMemberResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, req.GetGroupId()+"/"+req.GetMemberId())
	return &storagev1.ReleaseMemberResponse{}, nil
}

func (f *fakeShares) releasedMembers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.released)
	slices.Sort(out)
	return out
}

func (f *fakeShares) state(group string, topic string, p int32) *storagev1.SharePartitionState {
	st := &storagev1.SharePartitionState{Topic: topic, Partition: p, StartOffset: -1, Lag: -1}
	if o, ok := f.spsos[group][sharePart{topic, p}]; ok {
		st.StartOffset, st.Lag = o, 0
	}
	return st
}

func (f *fakeShares) ListSharePartitions(_ context.Context, req *storagev1.ListSharePartitionsRequest) (*storagev1.ListSharePartitionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &storagev1.ListSharePartitionsResponse{}
	for k := range f.spsos[req.GetGroupId()] {
		resp.Partitions = append(resp.Partitions, f.state(req.GetGroupId(), k.topic, k.p))
	}
	slices.SortFunc(resp.Partitions, func(a, b *storagev1.SharePartitionState) int {
		return cmp.Or(strings.Compare(a.GetTopic(), b.GetTopic()), cmp.Compare(a.GetPartition(), b.GetPartition()))
	})
	return resp, nil
}

func (f *fakeShares) DescribeSharePartitions(_ context.Context, req *storagev1.DescribeSharePartitionsRequest) (*storagev1.DescribeSharePartitionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &storagev1.DescribeSharePartitionsResponse{}
	for _, p := range req.GetPartitions() {
		resp.Partitions = append(resp.Partitions, f.state(req.GetGroupId(), p.GetTopic(), p.GetPartition()))
	}
	return resp, nil
}

func (f *fakeShares) AlterSharePartitions(_ context.Context, req *storagev1.AlterSharePartitionsRequest) (*storagev1.AlterSharePartitionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &storagev1.AlterSharePartitionsResponse{}
	for _, p := range req.GetPartitions() {
		if p.GetStartOffset() < 0 {
			resp.Partitions = append(resp.Partitions, &storagev1.SharePartitionState{Topic: p.GetTopic(), Partition: p.GetPartition(),
				Error: storagev1.ShareError_SHARE_ERROR_INVALID_REQUEST, StartOffset: -1, Lag: -1})
			continue
		}
		if f.spsos[req.GetGroupId()] == nil {
			f.spsos[req.GetGroupId()] = map[sharePart]int64{}
		}
		f.spsos[req.GetGroupId()][sharePart{p.GetTopic(), p.GetPartition()}] = p.GetStartOffset()
		resp.Partitions = append(resp.Partitions, f.state(req.GetGroupId(), p.GetTopic(), p.GetPartition()))
	}
	return resp, nil
}

func (f *fakeShares) DeleteSharePartitions(_ context.Context, req *storagev1.DeleteSharePartitionsRequest) (*storagev1.DeleteSharePartitionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &storagev1.DeleteSharePartitionsResponse{}
	for _, p := range req.GetPartitions() {
		delete(f.spsos[req.GetGroupId()], sharePart{p.GetTopic(), p.GetPartition()})
		resp.Partitions = append(resp.Partitions, &storagev1.SharePartitionState{Topic: p.GetTopic(), Partition: p.GetPartition(), StartOffset: -1, Lag: -1})
	}
	return resp, nil
}
