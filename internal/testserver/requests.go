package testserver

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/broker"
)

// CountRequests counts the requests of kind key that b gets from now on,
// those that match says yes to (nil: every one), and lets the broker answer
// them as usual.
func CountRequests(b *broker.Broker, key kmsg.Key, match func(kmsg.Request) bool) *atomic.Int64 {
	var n atomic.Int64
	c := b.Cluster()
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if match == nil || match(req) {
			n.Add(1)
		}
		return nil, nil, false
	})
	return &n
}

// OneRecordFetch tells the fetches that ask for at most one byte: those
// that look a record up (producers.Producer.IsMessageOf), not a consumer's.
func OneRecordFetch(req kmsg.Request) bool {
	for _, t := range req.(*kmsg.FetchRequest).Topics {
		for _, p := range t.Partitions {
			if p.PartitionMaxBytes == 1 {
				return true
			}
		}
	}
	return false
}
