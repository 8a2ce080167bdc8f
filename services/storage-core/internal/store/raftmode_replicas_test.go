package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestRaftModeReplicas: the leader names every voter and, as in sync, the followers
// that are alive and caught up; a stopped follower leaves the in-sync set and is back
// once restarted and caught up; a follower refuses with ErrNotLeader.
func TestRaftModeReplicas(t *testing.T) {
	c := newRaftCluster(t)
	const ch = "raft.replicas"
	group := c.create(ch)
	lead := c.leader(group)
	inSync := func(want ...uint64) {
		t.Helper()
		c.eventually(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			r, err := c.st[lead].RaftReplicas(ctx, ch)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(r.Voters, []uint64{1, 2, 3}) || !reflect.DeepEqual(r.InSync, want) {
				return fmt.Errorf("replicas %v in sync %v, want [1 2 3] and %v", r.Voters, r.InSync, want)
			}
			return nil
		})
	}
	if _, err := c.appendOn(lead, ch, "a", nil); err != nil {
		t.Fatal(err)
	}
	inSync(1, 2, 3)
	for id, s := range c.st {
		if id != lead {
			if _, err := s.RaftReplicas(context.Background(), ch); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("follower %d: %v, want ErrNotLeader", id, err)
			}
		}
	}
	var down uint64
	var rest []uint64
	for id := uint64(1); id <= 3; id++ {
		if id != lead && down == 0 {
			down = id
		} else {
			rest = append(rest, id)
		}
	}
	c.stop(down)
	if _, err := c.appendOn(lead, ch, "b", nil); err != nil {
		t.Fatal(err)
	}
	inSync(rest...)
	c.start(down)
	if _, err := c.appendOn(lead, ch, "c", nil); err != nil {
		t.Fatal(err)
	}
	inSync(1, 2, 3)
}
