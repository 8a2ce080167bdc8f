// Package authcache is the bounded cache of login credentials looked up from the
// coordinator, shared by kafka-gateway (SCRAM credentials, CredentialService) and the
// mqtt-bridge listener (MQTT logins, MqttUserService).
//
// A looked-up value, or its absence, is reused for the cache's TTL. Found values and
// absences are held apart, each part bounded by the same entry count and emptied
// when full: lookups of made-up user names, which anyone may send before
// authenticating, fill and empty only the absences, never push out the credentials
// of real users. A change announced on NATS (the coordinator's *.changed subjects)
// reaches every replica at once through Invalidate; the TTL bounds how stale an entry
// can be when that notice is lost. A lookup that was under way when Invalidate ran is
// returned but not cached, so an answer read before a change never outlives it.
package authcache

import (
	"context"
	"sync"
	"time"
)

// Cache is a bounded TTL cache from keys K to values V. The zero value is not usable:
// call New.
type Cache[K comparable, V any] struct {
	ttl time.Duration
	max int
	// Now is the clock (time.Now); tests may replace it before first use.
	Now func() time.Time

	mu      sync.Mutex
	entries map[K]entry[V]  // found values
	absent  map[K]time.Time // absences, by when looked up
	gen     uint64          // bumped by Invalidate: a lookup started before it is not cached
}

type entry[V any] struct {
	v  V
	at time.Time
}

// New returns a cache reusing each lookup's outcome for ttl and holding at most max
// found values and, apart, at most max absences.
func New[K comparable, V any](ttl time.Duration, max int) *Cache[K, V] {
	return &Cache[K, V]{ttl: ttl, max: max, Now: time.Now, entries: map[K]entry[V]{}, absent: map[K]time.Time{}}
}

// Get returns k's cached value (found true) or cached absence (found false) while
// fresh; otherwise it calls lookup outside the lock and caches its outcome: a value
// (found), an absence (not found), or, for an error, nothing (the error is returned).
func (c *Cache[K, V]) Get(ctx context.Context, k K, lookup func(context.Context) (v V, found bool, err error)) (V, bool, error) {
	c.mu.Lock()
	e, ok := c.entries[k]
	at, isAbsent := c.absent[k]
	gen := c.gen
	c.mu.Unlock()
	now := c.Now()
	if ok && now.Sub(e.at) < c.ttl {
		return e.v, true, nil
	}
	var zero V
	if isAbsent && now.Sub(at) < c.ttl {
		return zero, false, nil
	}
	v, found, err := lookup(ctx)
	if err != nil {
		return zero, false, err
	}
	at = c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return v, found, nil
	}
	if found {
		if len(c.entries) >= c.max {
			c.entries = map[K]entry[V]{}
		}
		c.entries[k] = entry[V]{v: v, at: at}
		delete(c.absent, k)
	} else {
		if len(c.absent) >= c.max {
			c.absent = map[K]time.Time{}
		}
		c.absent[k] = at
		delete(c.entries, k)
	}
	return v, found, nil
}

// Invalidate drops the cached outcomes of keys, or of every key when none are given.
func (c *Cache[K, V]) Invalidate(keys ...K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(keys) == 0 {
		c.entries, c.absent = map[K]entry[V]{}, map[K]time.Time{}
		return
	}
	for _, k := range keys {
		delete(c.entries, k)
		delete(c.absent, k)
	}
}
