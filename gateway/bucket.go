package gateway

import "time"

// bucket is a token bucket used by one goroutine at a time (a connection's
// frames are handled one after another): rate tokens a second up to burst,
// full at first. Held by value in conn it costs a connection 16 bytes and
// no allocation, where two rate.Limiters cost 160 bytes of heap for as long
// as the connection lives, idle or not.
type bucket struct {
	tokens float64 // as of last
	last   int64   // nanoseconds since epoch of the last take; 0: never
}

// epoch makes bucket times monotonic: time.Since reads the monotonic clock.
var epoch = time.Now()

// take takes a token if there is one now.
func (b *bucket) take(rate float64, burst int) bool {
	return b.takeAt(int64(time.Since(epoch))+1, rate, burst)
}

func (b *bucket) takeAt(now int64, rate float64, burst int) bool {
	if b.last == 0 {
		b.tokens = float64(burst)
	} else {
		b.tokens = min(float64(burst), b.tokens+float64(now-b.last)*rate/1e9)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
