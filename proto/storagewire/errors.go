package storagewire

import "errors"

// ErrInvalidUTF8 is the refusal to encode or decode a proto3 string field (a channel
// name, an ack id, a header key) that is not UTF-8, where proto.Marshal and
// proto.Unmarshal refuse it too.
var ErrInvalidUTF8 = errors.New("storagewire: string field contains invalid UTF-8")

// ErrFieldNumber is the refusal of a field number above protowire.MaxValidNumber,
// which proto.Unmarshal refuses.
var ErrFieldNumber = errors.New("storagewire: invalid field number")
