package authcache

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter looks keys up in a fixed set, counting lookups per key.
type counter struct {
	known map[string]int
	calls map[string]int
	err   error
}

func (c *counter) lookup(k string) func(context.Context) (int, bool, error) {
	return func(context.Context) (int, bool, error) {
		c.calls[k]++
		if c.err != nil {
			return 0, false, c.err
		}
		v, ok := c.known[k]
		return v, ok, nil
	}
}

// Values and absences are reused within the TTL and looked up again after it; more
// absences than the bound never push a found value out; an error is not cached;
// Invalidate drops one key or all.
func TestCache(t *testing.T) {
	c := New[string, int](10*time.Second, 100)
	now := time.Unix(1000, 0)
	c.Now = func() time.Time { return now }
	src := &counter{known: map[string]int{"alice": 1, "bob": 2}, calls: map[string]int{}}
	ctx := context.Background()
	get := func(k string) (int, bool) {
		t.Helper()
		v, found, err := c.Get(ctx, k, src.lookup(k))
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		return v, found
	}
	if v, found := get("alice"); !found || v != 1 {
		t.Fatalf("alice: %d %v", v, found)
	}
	for i := range 250 {
		if _, found := get("ghost-" + strconv.Itoa(i)); found {
			t.Fatal("a made-up user was found")
		}
	}
	get("alice")
	get("ghost-249")
	if src.calls["alice"] != 1 || src.calls["ghost-249"] != 1 {
		t.Fatalf("lookups: alice %d, ghost-249 %d; want 1 each (cached)", src.calls["alice"], src.calls["ghost-249"])
	}
	now = now.Add(10 * time.Second)
	get("alice")
	if src.calls["alice"] != 2 {
		t.Fatalf("alice after the TTL: %d lookups, want 2", src.calls["alice"])
	}
	get("bob")
	c.Invalidate("alice")
	get("alice")
	get("bob")
	if src.calls["alice"] != 3 || src.calls["bob"] != 1 {
		t.Fatalf("after Invalidate(alice): alice %d, bob %d lookups, want 3 and 1", src.calls["alice"], src.calls["bob"])
	}
	c.Invalidate()
	get("bob")
	if src.calls["bob"] != 2 {
		t.Fatalf("after Invalidate(): bob %d lookups, want 2", src.calls["bob"])
	}
	src.err = errors.New("coordinator down")
	c.Invalidate()
	for range 2 {
		if _, _, err := c.Get(ctx, "bob", src.lookup("bob")); err == nil {
			t.Fatal("an error was cached or lost")
		}
	}
	if src.calls["bob"] != 4 {
		t.Fatalf("errors: bob %d lookups, want 4 (errors are not cached)", src.calls["bob"])
	}
}

// A lookup under way while Invalidate runs is returned but not cached: the next Get
// looks up again and sees the change.
func TestInvalidateDuringLookup(t *testing.T) {
	c := New[string, string](time.Hour, 10)
	old := func(context.Context) (string, bool, error) {
		c.Invalidate("alice") // the change notice arrives while the old answer is on its way
		return "old", true, nil
	}
	if v, _, _ := c.Get(context.Background(), "alice", old); v != "old" {
		t.Fatalf("got %q", v)
	}
	v, _, _ := c.Get(context.Background(), "alice", func(context.Context) (string, bool, error) { return "new", true, nil })
	if v != "new" {
		t.Fatalf("after a change during the lookup: %q, want new (the old answer was cached)", v)
	}
}
