package txn

import "errors"

// ErrMarkers is returned when the markers of a decided transaction could not all be
// written; the transaction stays Prepare* and is finished later.
var ErrMarkers = errors.New("transaction markers not written")
