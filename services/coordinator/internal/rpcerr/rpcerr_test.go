package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatus(t *testing.T) {
	if Status(nil) != nil {
		t.Fatal("nil must stay nil")
	}
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("query: %w", context.Canceled), codes.Canceled},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.InvalidArgument, "bad"), codes.InvalidArgument},
		{errors.New("connection refused"), codes.Unavailable},
	} {
		if got := status.Code(Status(c.err)); got != c.want {
			t.Errorf("Status(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
