package store

import (
	"errors"
	"fmt"
)

// closedErr is what reads of a closed log return: ErrNotFound when the channel was
// deleted (the store no longer maps its name to this log), else ErrClosed (shutdown).
// Long polls (Fetch, Read, Subscribe) wake at close and so end promptly with it.
func (l *Log) closedErr() error {
	cur, err := l.st.Get(l.name)
	if err == nil && cur != l || err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %s (deleted)", ErrNotFound, l.name)
	}
	return fmt.Errorf("%w: channel %s", ErrClosed, l.name)
}
