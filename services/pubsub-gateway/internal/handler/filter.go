package handler

import (
	"github.com/tributary/tributary/libs/pubsubfilter"
)

// validateFilter checks a subscription filter's syntax (libs/pubsubfilter, the grammar
// storage-core's bindings apply); an empty filter matches every message.
func validateFilter(expr string) error {
	if expr == "" {
		return nil
	}
	if _, err := pubsubfilter.Parse(expr); err != nil {
		return invalid("Invalid filter: %v", err)
	}
	return nil
}
