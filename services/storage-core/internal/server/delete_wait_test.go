package server

import (
	"context"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestFetchLongPollEndsOnDelete: a Fetch long poll on a channel that is deleted
// answers CHANNEL_NOT_FOUND at once instead of waiting out max_wait_ms.
func TestFetchLongPollEndsOnDelete(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.del"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		fr  *storagev1.FetchResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		fr, err := c.Fetch(ctx, &storagev1.FetchRequest{MaxWaitMs: 300000, MinBytes: 1,
			Channels: []*storagev1.FetchChannel{{Channel: "gcp.del", FromSequence: 1}}})
		done <- answer{fr, err}
	}()
	// Delete while the poll waits (or before it starts: the answer is the same).
	if _, err := c.DeleteChannel(ctx, &storagev1.DeleteChannelRequest{Name: "gcp.del"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.fr.Results[0].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
		t.Fatalf("fetch: %v %v", a.fr, a.err)
	}
}
