package pubsubfilter

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error Parse returns: the expression is not a filter
// Google Pub/Sub would accept (syntax, length or nesting). The message says at which
// byte offset and what is wrong, so it can go back to the client as it is.
var ErrInvalid = errors.New("invalid filter")

// errAt builds an ErrInvalid error pointing at byte offset off of the expression.
func errAt(off int, format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrInvalid, off, fmt.Sprintf(format, args...))
}
