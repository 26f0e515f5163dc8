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
	b.refill(now, rate, burst)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// charge takes n tokens, into debt if there are fewer: for work whose cost
// is known only once it is done, paid for by the takes refused after it.
func (b *bucket) charge(n int, rate float64, burst int) {
	b.chargeAt(int64(time.Since(epoch))+1, n, rate, burst)
}

func (b *bucket) chargeAt(now int64, n int, rate float64, burst int) {
	b.refill(now, rate, burst)
	b.tokens -= float64(n)
}

// refill adds the tokens earned since the last take or charge.
func (b *bucket) refill(now int64, rate float64, burst int) {
	if b.last == 0 {
		b.tokens = float64(burst)
	} else {
		b.tokens = min(float64(burst), b.tokens+float64(now-b.last)*rate/1e9)
	}
	b.last = now
}

// full reports whether b is at its burst again by now, as good as none.
func (b *bucket) full(now int64, rate float64, burst int) bool {
	return b.tokens+float64(now-b.last)*rate/1e9 >= float64(burst)
}

// userBuckets are the users' buckets of one rate, one per user: their
// sends, shared by all of the user's connections to this gateway and their
// HTTP sends, so that more devices, or HTTP beside them, are no more
// sends; or their HTTP requests (httpUsers). A bucket that is full again
// is the same as none and is forgotten, whether its user is still
// connected or not: the map holds only the users who took a token within
// the last burst/rate seconds (2 s by default), however many connect, and
// at most maxUserBuckets of them.
type userBuckets struct {
	mu    sync.Mutex
	m     map[string]*bucket
	swept int64 // the last sweep, as bucket time
}

// maxUserBuckets bounds the buckets held. Past it, a new user's bucket
// takes the place of another user's, chosen at random, who starts afresh
// at their next take: only while more users than this come to one gateway
// within a bucket's refill time, each with a token of the deployment.
const maxUserBuckets = 1 << 16

// take takes a token from uid's bucket if there is one now.
func (u *userBuckets) take(uid string, rate float64, burst int) bool {
	return u.takeAt(uid, int64(time.Since(epoch))+1, rate, burst)
}

func (u *userBuckets) takeAt(uid string, now int64, rate float64, burst int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bucket(uid, now, rate, burst).takeAt(now, rate, burst)
}

// charge takes n tokens from uid's bucket, into debt if need be (see
// bucket.charge).
func (u *userBuckets) charge(uid string, n int, rate float64, burst int) {
	now := int64(time.Since(epoch)) + 1
	u.mu.Lock()
	defer u.mu.Unlock()
	u.bucket(uid, now, rate, burst).chargeAt(now, n, rate, burst)
}

// bucket returns uid's bucket, new if it has none, sweeping the full ones
// out first as often as a bucket refills. Called under mu.
func (u *userBuckets) bucket(uid string, now int64, rate float64, burst int) *bucket {
	if u.m == nil {
		u.m = map[string]*bucket{}
	}
	if refill := int64(float64(burst) / rate * 1e9); now-u.swept > refill {
		for k, b := range u.m {
			if b.full(now, rate, burst) {
				delete(u.m, k)
			}
		}
		u.swept = now
	}
	b := u.m[uid]
	if b == nil {
		if len(u.m) >= maxUserBuckets {
			for k := range u.m { // in no set order: one at random
				delete(u.m, k)
				break
			}
		}
		b = &bucket{}
		u.m[uid] = b
	}
	return b
}
