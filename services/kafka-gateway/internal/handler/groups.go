package handler

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Group calls go to the coordinator's GroupCoordinatorService. JoinGroup and SyncGroup
// block there until the rebalance phase ends, so their deadlines follow the member's
// rebalance timeout; the others are short.
const (
	// groupCallTimeout bounds Heartbeat, LeaveGroup, offsets and group admin calls.
	groupCallTimeout = 15 * time.Second
	// groupWaitSlack is added to a JoinGroup's rebalance timeout for its deadline.
	groupWaitSlack = 5 * time.Second
	// maxGroupWait caps any blocking group call (SyncGroup waits at most the group's
	// largest rebalance timeout, which the gateway does not know).
	maxGroupWait = 10 * time.Minute
)

// groupCode maps a failed GroupCoordinatorService call to a Kafka error code. Every
// whole-call failure (coordinator unreachable, Postgres down, deadline) is
// COORDINATOR_NOT_AVAILABLE (15): clients look the coordinator up again and retry.
func (h *Handler) groupCode(api string, err error) int16 {
	if err == nil {
		return 0
	}
	h.log.Warn("coordinator group call failed", zap.String("api", api), zap.Error(err))
	return kerr.CoordinatorNotAvailable.Code
}

// groupCtx bounds a group call by d (capped at maxGroupWait).
func groupCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(d, maxGroupWait))
}

// groupsOrUnavailable returns c, or a client answering every call UNAVAILABLE when c is
// nil (a gateway built without a coordinator connection, as in unit tests).
func groupsOrUnavailable(c coordinatorv1.GroupCoordinatorServiceClient) coordinatorv1.GroupCoordinatorServiceClient {
	if c == nil {
		return unavailableGroups{}
	}
	return c
}

// unavailableGroups answers every group call with UNAVAILABLE.
type unavailableGroups struct{}

func (unavailableGroups) JoinGroup(context.Context, *coordinatorv1.JoinGroupRequest, ...grpc.CallOption) (*coordinatorv1.JoinGroupResponse, error) {
	return nil, status503()
}

func (unavailableGroups) SyncGroup(context.Context, *coordinatorv1.SyncGroupRequest, ...grpc.CallOption) (*coordinatorv1.SyncGroupResponse, error) {
	return nil, status503()
}

func (unavailableGroups) Heartbeat(context.Context, *coordinatorv1.HeartbeatRequest, ...grpc.CallOption) (*coordinatorv1.HeartbeatResponse, error) {
	return nil, status503()
}

func (unavailableGroups) LeaveGroup(context.Context, *coordinatorv1.LeaveGroupRequest, ...grpc.CallOption) (*coordinatorv1.LeaveGroupResponse, error) {
	return nil, status503()
}

func (unavailableGroups) OffsetCommit(context.Context, *coordinatorv1.OffsetCommitRequest, ...grpc.CallOption) (*coordinatorv1.OffsetCommitResponse, error) {
	return nil, status503()
}

func (unavailableGroups) OffsetFetch(context.Context, *coordinatorv1.OffsetFetchRequest, ...grpc.CallOption) (*coordinatorv1.OffsetFetchResponse, error) {
	return nil, status503()
}

func (unavailableGroups) DescribeGroups(context.Context, *coordinatorv1.DescribeGroupsRequest, ...grpc.CallOption) (*coordinatorv1.DescribeGroupsResponse, error) {
	return nil, status503()
}

func (unavailableGroups) ListGroups(context.Context, *coordinatorv1.ListGroupsRequest, ...grpc.CallOption) (*coordinatorv1.ListGroupsResponse, error) {
	return nil, status503()
}

func (unavailableGroups) DeleteGroups(context.Context, *coordinatorv1.DeleteGroupsRequest, ...grpc.CallOption) (*coordinatorv1.DeleteGroupsResponse, error) {
	return nil, status503()
}

func (unavailableGroups) OffsetDelete(context.Context, *coordinatorv1.OffsetDeleteRequest, ...grpc.CallOption) (*coordinatorv1.OffsetDeleteResponse, error) {
	return nil, status503()
}

func (unavailableGroups) GetCommittedOffsets(context.Context, *coordinatorv1.GetCommittedOffsetsRequest, ...grpc.CallOption) (*coordinatorv1.GetCommittedOffsetsResponse, error) {
	return nil, status503()
}

// describeGroups asks the coordinator (call; up false when its client is missing)
// about the group ids a describe may see and returns the descriptions by group id
// and the error code of an id without one: COORDINATOR_NOT_AVAILABLE when nothing
// was asked, else the call's (groupCode; 0 on success). Shared by
// ConsumerGroupDescribe and ShareGroupDescribe.
func describeGroups[G interface{ GetGroupId() string }](ctx context.Context, h *Handler, api string, ids []string, up bool, call func(ctx context.Context, ids []string) ([]G, error)) (map[string]G, int16) {
	byID := map[string]G{}
	code := kerr.CoordinatorNotAvailable.Code
	if up && len(ids) > 0 {
		cctx, cancel := groupCtx(ctx, groupCallTimeout)
		gs, err := call(cctx, ids)
		cancel()
		code = h.groupCode(api, err)
		for _, g := range gs {
			byID[g.GetGroupId()] = g
		}
	}
	return byID, code
}
