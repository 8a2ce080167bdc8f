package handler

import (
	"context"
	"sync"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Router is the storage client of a gateway given several storage-core nodes
// (--storage-addr a,b,c: a cluster in raft mode, issue 16). It sends each partition's
// calls to the channel's Raft leader as last learned (grpcx.LeaderConn keeps a
// connection per node and the leader cache). Single-channel calls (ListOffsets'
// LookupSequence, GetChannel, DeleteRecords) follow the tributary-leader trailer of a
// FAILED_PRECONDITION answer; multi-channel calls are split by leader, sent to each
// node at once and merged in request order:
//   - AppendBatches: a channel answered NOT_LEADER with the leader's address is resent
//     there (nothing was written); NOT_LEADER without one (an election) stays NOT_LEADER
//     (Kafka NOT_LEADER_OR_FOLLOWER, retriable: the client refreshes metadata and
//     retries), NOT_ENOUGH_REPLICAS stays (Kafka NOT_ENOUGH_REPLICAS); a node that does
//     not answer (UNAVAILABLE) makes its channels NOT_LEADER and is skipped by the
//     next call (outcome unknown: idempotent producers make the retry safe).
//   - Fetch and LookupSequence: a channel whose leader is not cached is resolved first
//     (GetChannel on the default node names it), so reads go to the leader; a node
//     that does not answer makes its channels be read from the next node (followers
//     serve what they applied: committed records).
//
// AppendStream is not used through a Router: produce requests of one connection are
// unary AppendBatches, each sent once the previous one is answered (the connection's
// Turn), which keeps idempotent batches in order across a change of leader. One
// storage-core address does not build a Router (the gateway's single connection and
// its AppendStream, exactly as before).
//
// The Router also keeps each channel's Kafka leader epoch, the term of its Raft group
// (KIP-320; epochs.go), as last learned from GetChannel.
type Router struct {
	storagev1.StorageServiceClient // unary calls through lc; streams on the default node
	lc                             *grpcx.LeaderConn
	emu                            sync.RWMutex
	epochs                         map[string]int32 // channel → leader epoch
}

// NewRouter routes over lc.
func NewRouter(lc *grpcx.LeaderConn) *Router {
	return &Router{StorageServiceClient: storagev1.NewStorageServiceClient(lc), lc: lc, epochs: map[string]int32{}}
}

// asRouter is c as a Router, or nil.
func asRouter(c storagev1.StorageServiceClient) *Router {
	r, _ := c.(*Router)
	return r
}

// routeGroup is the channels of one multi-channel call that go to one node.
type routeGroup struct {
	addr string
	cc   *grpc.ClientConn
	idx  []int // positions in the request
}

// split groups channel names by the node each goes to.
func (r *Router) split(names func(i int) string, n int, only []int) []*routeGroup {
	by := map[string]*routeGroup{}
	var out []*routeGroup
	add := func(i int) {
		addr, cc := r.lc.Pick(names(i))
		g := by[addr]
		if g == nil {
			g = &routeGroup{addr: addr, cc: cc}
			by[addr] = g
			out = append(out, g)
		}
		g.idx = append(g.idx, i)
	}
	if only != nil {
		for _, i := range only {
			add(i)
		}
		return out
	}
	for i := 0; i < n; i++ {
		add(i)
	}
	return out
}

// each runs f for every group at once (the one group on the caller's goroutine).
func each(groups []*routeGroup, f func(g *routeGroup)) {
	if len(groups) == 1 {
		f(groups[0])
		return
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(g)
		}()
	}
	wg.Wait()
}

// AppendBatches appends each channel on its leader (see Router). Errors: the call's
// status only when every channel went to one node and that call failed otherwise
// than UNAVAILABLE; else per-channel results.
func (r *Router) AppendBatches(ctx context.Context, in *storagev1.AppendBatchesRequest, opts ...grpc.CallOption) (*storagev1.AppendBatchesResponse, error) {
	chs := in.GetChannels()
	results := make([]*storagev1.ChannelAppendResult, len(chs))
	name := func(i int) string { return chs[i].GetChannel() }
	var only []int
	for hop := 0; hop <= grpcx.MaxHops; hop++ {
		groups := r.split(name, len(chs), only)
		var mu sync.Mutex
		var callErr error
		var resend []int
		each(groups, func(g *routeGroup) {
			sub := &storagev1.AppendBatchesRequest{Channels: make([]*storagev1.ChannelBatches, len(g.idx))}
			for j, i := range g.idx {
				sub.Channels[j] = chs[i]
			}
			out, err := storagev1.NewStorageServiceClient(g.cc).AppendBatches(ctx, sub, opts...)
			if err == nil && len(out.GetResults()) != len(g.idx) {
				err = status.Errorf(codes.Internal, "storage-core %s answered %d results for %d channels", g.addr, len(out.GetResults()), len(g.idx))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if status.Code(err) == codes.Unavailable {
					r.lc.Down(g.addr)
				}
				if len(groups) == 1 && status.Code(err) != codes.Unavailable {
					callErr = err
					return
				}
				for _, i := range g.idx {
					results[i] = failedAppend(chs[i].GetChannel(), err)
				}
				return
			}
			for j, i := range g.idx {
				res := out.GetResults()[j]
				results[i] = res
				switch res.GetError() {
				case storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED:
					if a, _ := r.lc.Pick(chs[i].GetChannel()); a != g.addr {
						_ = r.lc.Learn(chs[i].GetChannel(), g.addr)
					}
				case storagev1.ErrorCode_ERROR_CODE_NOT_LEADER:
					if l := res.GetLeaderAddress(); l != "" && l != g.addr && r.lc.Learn(chs[i].GetChannel(), l) == nil {
						resend = append(resend, i)
					} else {
						r.lc.Forget(chs[i].GetChannel())
					}
				}
			}
		})
		if callErr != nil {
			return nil, callErr
		}
		if len(resend) == 0 {
			break
		}
		only = resend
	}
	return &storagev1.AppendBatchesResponse{Results: results}, nil
}

// failedAppend is the per-channel result of a call that failed as a whole: a node
// that did not answer is NOT_LEADER (retriable), anything else STORAGE_FAILURE.
func failedAppend(ch string, err error) *storagev1.ChannelAppendResult {
	code := storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE
	if c := status.Code(err); c == codes.Unavailable || c == codes.Canceled {
		code = storagev1.ErrorCode_ERROR_CODE_NOT_LEADER
	}
	return &storagev1.ChannelAppendResult{Channel: ch, Error: code, ErrorMessage: err.Error(), LogAppendTimeMs: -1}
}

// resolveTimeout bounds the GetChannel that finds a channel's leader.
const resolveTimeout = 2 * time.Second

// resolve learns the leaders of the channels among names that have none cached, from
// GetChannel on the default node (raft mode names the leader as that node knows it),
// so reads go to the leader rather than to a follower that may lag (and answer
// OUT_OF_RANGE for an offset the leader has). A channel without a known leader (an
// election, an error) keeps going to the default node.
func (r *Router) resolve(ctx context.Context, names []string) {
	for _, ch := range names {
		if r.lc.Cached(ch) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		_, cc := r.lc.Pick("")
		out, err := storagev1.NewStorageServiceClient(cc).GetChannel(cctx, &storagev1.GetChannelRequest{Name: ch})
		cancel()
		if err == nil {
			r.learnChannel(ch, out.GetChannel())
		}
	}
}

// LookupSequence (ListOffsets) goes to the channel's leader, resolved when unknown.
func (r *Router) LookupSequence(ctx context.Context, in *storagev1.LookupSequenceRequest, opts ...grpc.CallOption) (*storagev1.LookupSequenceResponse, error) {
	r.resolve(ctx, []string{in.GetChannel()})
	return r.StorageServiceClient.LookupSequence(ctx, in, opts...)
}

// Fetch is fetchOwned with the batches left to the garbage collector.
func (r *Router) Fetch(ctx context.Context, in *storagev1.FetchRequest, opts ...grpc.CallOption) (*storagev1.FetchResponse, error) {
	out, _, err := r.fetchOwned(ctx, in, opts...)
	return out, err
}

// fetchOwned reads each channel from its node (see Router). When every channel goes to
// one node the answer views one pooled buffer, as storageClient.fetchOwned; split over
// several nodes the buffers are the garbage collector's (nil), and each node waits up
// to max_wait_ms for min_bytes of its own channels. A node that does not answer is
// skipped: its channels are read from the next node (once per node); when all fail,
// the last error (a gRPC status).
func (r *Router) fetchOwned(ctx context.Context, in *storagev1.FetchRequest, opts ...grpc.CallOption) (*storagev1.FetchResponse, *fetchBuf, error) {
	chs := in.GetChannels()
	name := func(i int) string { return chs[i].GetChannel() }
	names := make([]string, len(chs))
	for i := range chs {
		names[i] = name(i)
	}
	r.resolve(ctx, names)
	results := make([]*storagev1.FetchChannelResult, len(chs))
	var only []int
	var lastErr error
	for try := 0; try < len(r.lc.Conns()); try++ {
		groups := r.split(name, len(chs), only)
		if len(groups) == 1 && only == nil {
			out, buf, err := storageClient{cc: groups[0].cc}.fetchOwned(ctx, in, opts...)
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				return out, buf, err
			}
			r.lc.Down(groups[0].addr)
			lastErr = err
			continue
		}
		var mu sync.Mutex
		var failed []int
		each(groups, func(g *routeGroup) {
			sub := &storagev1.FetchRequest{Channels: make([]*storagev1.FetchChannel, len(g.idx)), MaxWaitMs: in.MaxWaitMs, MinBytes: in.MinBytes, MaxBytes: in.MaxBytes, IsolationLevel: in.IsolationLevel}
			for j, i := range g.idx {
				sub.Channels[j] = chs[i]
			}
			out, err := storagev1.NewStorageServiceClient(g.cc).Fetch(ctx, sub, opts...)
			if err == nil && len(out.GetResults()) != len(g.idx) {
				err = status.Errorf(codes.Internal, "storage-core %s answered %d results for %d channels", g.addr, len(out.GetResults()), len(g.idx))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lastErr = err
				if status.Code(err) == codes.Unavailable {
					r.lc.Down(g.addr)
				}
				for _, i := range g.idx {
					results[i] = &storagev1.FetchChannelResult{Channel: chs[i].GetChannel(), Error: storagev1.ErrorCode_ERROR_CODE_NOT_LEADER}
				}
				failed = append(failed, g.idx...)
				return
			}
			for j, i := range g.idx {
				results[i] = out.GetResults()[j]
			}
		})
		if len(failed) == 0 || ctx.Err() != nil {
			return &storagev1.FetchResponse{Results: results}, nil, nil
		}
		only = failed
	}
	if only == nil {
		return nil, nil, lastErr
	}
	return &storagev1.FetchResponse{Results: results}, nil, nil
}
