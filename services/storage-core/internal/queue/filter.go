package queue

import (
	"fmt"
	"strings"

	"github.com/tributary/tributary/libs/pubsubfilter"
	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// Filter decides whether a source record enters the queue, by its attributes: the
// record's headers whose names do not start with "_" (system headers such as
// _pubsub_message_id are not attributes). For a repeated header the last value wins,
// as when headers become a Pub/Sub attribute map.
type Filter interface {
	MatchFunc(lookup func(key string) (string, bool)) bool
}

// ParseFilter parses a binding's filter expression (libs/pubsubfilter grammar). An
// empty expression is nil: every record matches. Errors wrap ErrInvalidArgument.
func ParseFilter(expr string) (Filter, error) {
	if expr == "" {
		return nil, nil
	}
	f, err := pubsubfilter.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return f, nil
}

// attributeLookup returns the lookup a Filter sees for a record's headers.
func attributeLookup(hs []store.Header) func(string) (string, bool) {
	return func(key string) (string, bool) {
		if strings.HasPrefix(key, "_") {
			return "", false
		}
		for i := len(hs) - 1; i >= 0; i-- {
			if hs[i].Key == key {
				return string(hs[i].Value), true
			}
		}
		return "", false
	}
}

func matches(f Filter, hs []store.Header) bool {
	return f == nil || f.MatchFunc(attributeLookup(hs))
}
