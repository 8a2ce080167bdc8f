package server

import (
	"context"
	"errors"
	"strconv"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// notLeaderStatus is the gRPC status of a call refused because this node is not the
// leader; it keeps the raft error for the interceptors that set the trailers.
type notLeaderStatus struct {
	st  *status.Status
	nle *raftnode.NotLeaderError
}

func (e notLeaderStatus) Error() string              { return e.st.Err().Error() }
func (e notLeaderStatus) GRPCStatus() *status.Status { return e.st }
func (e notLeaderStatus) Unwrap() error              { return e.nle }

// notLeader returns the status error of err when it names a leader elsewhere.
func notLeader(err error) (error, bool) {
	var nle *raftnode.NotLeaderError
	if !errors.As(err, &nle) {
		return nil, false
	}
	return notLeaderStatus{st: status.New(codes.FailedPrecondition, err.Error()), nle: nle}, true
}

// leaderOf is the leader's node id and address named by a not-leader err (0, "" when
// none is known or err is another error), for per-channel NOT_LEADER results.
func leaderOf(err error) (uint64, string) {
	var nle *raftnode.NotLeaderError
	if !errors.As(err, &nle) {
		return 0, ""
	}
	return nle.Leader, nle.Addr
}

// leaderMD is the grpcx.LeaderTrailer/LeaderIDTrailer trailer of a not-leader err
// (nil for any other error): the leader's gRPC address and node id ("" when unknown).
func leaderMD(err error) metadata.MD {
	var nle *raftnode.NotLeaderError
	if err == nil || !errors.As(err, &nle) {
		return nil
	}
	id := ""
	if nle.Leader != 0 {
		id = strconv.FormatUint(nle.Leader, 10)
	}
	return metadata.Pairs(grpcx.LeaderTrailer, nle.Addr, grpcx.LeaderIDTrailer, id)
}

// leaderUnary and leaderStream set the leader trailers on a not-leader answer.
func leaderUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if md := leaderMD(err); md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	return resp, err
}

func leaderStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	err := h(srv, ss)
	if md := leaderMD(err); md != nil {
		ss.SetTrailer(md)
	}
	return err
}
