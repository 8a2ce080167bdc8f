package store

import (
	"errors"
	"sync"
	"testing"
)

// TestAppendRacingDeleteIsNotFound: appends racing the deletion of their channel, at
// any point (before the write, during the group commit's fsync, after the close),
// fail with ErrNotFound, never with a storage failure ("fsync: closed") or ErrClosed:
// the channel is gone, the store is not.
func TestAppendRacingDeleteIsNotFound(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	for round := range 100 {
		l, _, err := s.Create("kafka.race", ChannelConfig{}, false)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		started := make(chan struct{}, 8)
		for range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					if i == 1 {
						started <- struct{}{}
					}
					if _, _, err := l.Append([]NewRecord{{Value: []byte("v")}}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for range 8 {
			<-started
		}
		if err := s.Delete("kafka.race", false); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStorage) || errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: append racing delete: %v, want only ErrNotFound", round, err)
			}
		}
	}
}
