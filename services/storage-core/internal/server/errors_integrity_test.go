package server

import (
	"fmt"
	"testing"

	"github.com/tributary/tributary/services/storage-core/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestErrorMappingIntegrity: damaged stored data is DATA_LOSS (not InvalidArgument),
// even when the cause also names a batch error; ErrInternal is INTERNAL.
func TestErrorMappingIntegrity(t *testing.T) {
	for err, want := range map[error]codes.Code{
		fmt.Errorf("%w: %w", store.ErrDataLoss, store.ErrCorruptBatch): codes.DataLoss,
		fmt.Errorf("%w: x", store.ErrInternal):                         codes.Internal,
		fmt.Errorf("%w: x", store.ErrCorruptBatch):                     codes.InvalidArgument,
	} {
		if got := status.Code(toStatus(err)); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
	}
}
