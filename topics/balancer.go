package topics

import (
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
)

// Partition returns the partition of gid among n partitions: murmur2 of the
// gid, as the Java client's default partitioner computes it for that key.
func Partition(gid string, n int) int {
	return int(murmur2([]byte(gid))&0x7fffffff) % n
}

// PartitionOfKey returns the partition of a record keyed key (a gid, or
// gid/uid) among n partitions: the gid's, as Balancer places it.
func PartitionOfKey(key []byte, n int) int {
	return int(murmur2(schema.GidOfKey(key))&0x7fffffff) % n
}

// Balancer routes every record by the gid in its key (see schema.GidOfKey),
// so "gid" and "gid/uid" keys of one group land in the same partition.
type Balancer struct{}

var _ kafka.Balancer = Balancer{}

// Balance implements kafka.Balancer.
func (Balancer) Balance(msg kafka.Message, partitions ...int) int {
	return partitions[PartitionOfKey(msg.Key, len(partitions))]
}

// murmur2 is the 32-bit MurmurHash2 with the seed Kafka's Java client uses
// (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	n := length / 4
	for i := 0; i < n; i++ {
		j := i * 4
		k := uint32(data[j]) | uint32(data[j+1])<<8 | uint32(data[j+2])<<16 | uint32(data[j+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n*4:]
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
