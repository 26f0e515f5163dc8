package gateway

import (
	"sync"
	"time"
)

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

// userBuckets are the users' send buckets: one per user, shared by all of
// the user's connections to this gateway and their HTTP sends, so that
// more devices, or HTTP beside them, are no more sends. A bucket that is
// full again is the same as none and is forgotten, whether its user is
// still connected or not: the map holds only the users who sent within
// the last burst/rate seconds (2 s by default), however many connect.
type userBuckets struct {
	mu    sync.Mutex
	m     map[string]*bucket
	swept int64 // the last sweep, as bucket time
}

// take takes a token from uid's bucket if there is one now.
func (u *userBuckets) take(uid string, rate float64, burst int) bool {
	return u.takeAt(uid, int64(time.Since(epoch))+1, rate, burst)
}

func (u *userBuckets) takeAt(uid string, now int64, rate float64, burst int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]*bucket{}
	}
	// A bucket refills in burst/rate seconds; sweep as often.
	if full := int64(float64(burst) / rate * 1e9); now-u.swept > full {
		for k, b := range u.m {
			if now-b.last > full {
				delete(u.m, k)
			}
		}
		u.swept = now
	}
	b := u.m[uid]
	if b == nil {
		b = &bucket{}
		u.m[uid] = b
	}
	return b.takeAt(now, rate, burst)
}
