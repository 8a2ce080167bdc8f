package channel

// A log's records are numbered by sequence from 1; Kafka numbers the same records by
// offset from 0 (DESIGN section 2). The two conversions below are the only place that
// relation is written; every service converts through them.
//
// Positions convert the same way: a Kafka position that names the next record (a fetch
// offset, a committed offset, a DeleteRecords offset) is the offset of that record, so
// its sequence is OffsetToSequence of it. The high watermark and the last stable
// offset need no conversion: storage-core's high_watermark (the sequence of the last
// record) and last_stable_sequence equal Kafka's high watermark and last stable offset
// (the offset after the last record) numerically.

// OffsetToSequence is the log sequence of the record at Kafka offset off: off + 1.
// Offset 0 is sequence 1; a negative offset (Kafka's -1 "none") gives a sequence below
// 1, which names no record.
func OffsetToSequence(off int64) int64 { return off + 1 }

// SequenceToOffset is the Kafka offset of the record at log sequence seq: seq - 1.
// Sequence 1 is offset 0; sequence 0 (storage-core's "none") gives Kafka's -1.
func SequenceToOffset(seq int64) int64 { return seq - 1 }
