// Package storagewire holds the hand-written protobuf codecs of the storage-core
// messages that carry bulk data between the services: AppendStreamRequest (Kafka
// batches, kafka-gateway → storage-core), FetchResponse (stored batches, storage-core →
// kafka-gateway) and ReceiveResponse (queue deliveries, storage-core → pubsub-gateway).
// They exist for speed: the batches travel by reference instead of being copied into
// and out of the marshalled message, and deliveries are encoded from and decoded into
// the services' own types without a proto message per record.
//
// Every encoder writes exactly the bytes proto.Marshal writes for the same message
// (field order, proto3 zero values omitted, optional fields present when non-nil).
// Every decoder either gives exactly what proto.Unmarshal gives or, for input outside
// the shape it handles, says so (false) or fails where proto.Unmarshal fails; the tests
// hold each codec to proto.Marshal/proto.Unmarshal over random and fuzzed input.
//
// The package lives in the proto module, beside the generated code, because the field
// numbers it writes are storage.proto's and queue.proto's: a change to those messages
// and to their codecs lands in one module and is caught by one test suite (a test
// checks the field numbers against the descriptors). It is not under gen/, which
// `buf generate` deletes and rewrites (clean: true).
package storagewire
