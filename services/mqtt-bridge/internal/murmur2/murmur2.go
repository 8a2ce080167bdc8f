// Package murmur2 is the Kafka Java client's murmur2 hash and its default partitioner
// for keyed records (org.apache.kafka.common.utils.Utils.murmur2 and
// BuiltInPartitioner.partitionForKey), so that a record keyed here lands in the
// partition a Java producer would choose.
package murmur2

const (
	seed = 0x9747b28c
	m    = 0x5bd1e995
	r    = 24
)

// Sum32 is murmur2 of data as the Java client computes it (the int it returns, read
// as uint32 bits).
func Sum32(data []byte) uint32 {
	n := len(data)
	h := uint32(seed) ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// Partition is the partition the Java client picks for a non-null key among n
// partitions: (murmur2(key) & 0x7fffffff) % n. n must be positive.
func Partition(key []byte, n int32) int32 {
	return int32(Sum32(key)&0x7fffffff) % n
}
