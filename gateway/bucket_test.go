package gateway

import (
	"fmt"
	"testing"
)

// A bucket lets a burst through at once, then rate a second, and never
// saves up more than the burst.
func TestBucketLetsABurstThenTheRate(t *testing.T) {
	var b bucket
	const rate, burst = 10.0, 5
	now := int64(1)
	taken := 0
	for range 20 {
		if b.takeAt(now, rate, burst) {
			taken++
		}
	}
	if taken != burst {
		t.Fatalf("a burst of 20 at once: %d taken, want %d", taken, burst)
	}
	now += 1e9 / 10 * 3 // 0.3 s: 3 tokens
	taken = 0
	for range 20 {
		if b.takeAt(now, rate, burst) {
			taken++
		}
	}
	if taken != 3 {
		t.Fatalf("0.3 s later at 10/s: %d taken, want 3", taken)
	}
	now += 1e9 * 60 // a minute idle saves up the burst, no more
	taken = 0
	for range 20 {
		if b.takeAt(now, rate, burst) {
			taken++
		}
	}
	if taken != burst {
		t.Fatalf("a minute later: %d taken, want %d", taken, burst)
	}
}

// The users' buckets hold only those who sent lately: a bucket full again
// is forgotten, so a stream of users, each sending once, leaves the map no
// larger than the users of the last burst/rate seconds.
func TestUserBucketsForgetTheFullOnes(t *testing.T) {
	var u userBuckets
	const rate, burst = 10.0, 5 // full again after 0.5 s
	now := int64(1)
	for i := range 10000 {
		u.takeAt(fmt.Sprint("u", i), now, rate, burst)
		now += 1e6 // a user a millisecond
	}
	if n := len(u.m); n > 1100 {
		t.Fatalf("10,000 users, one a millisecond, buckets full after 0.5 s: %d buckets held, want at most about 1,000", n)
	}
	// A user who has not sent since is at their burst again, as if new.
	for range burst {
		if !u.takeAt("u0", now, rate, burst) {
			t.Fatal("u0, idle for 10 s, is refused within their burst")
		}
	}
	if u.takeAt("u0", now, rate, burst) {
		t.Fatal("u0 sent past their burst")
	}
}

// A charge past the tokens left runs the bucket into debt: no take
// succeeds until the rate has paid it, and the users' buckets keep a
// bucket in debt past the time a bucket that was merely empty refills.
func TestABucketChargedIntoDebtRefusesUntilItIsPaid(t *testing.T) {
	var b bucket
	const rate, burst = 10.0, 5
	now := int64(1)
	b.takeAt(now, rate, burst)
	b.chargeAt(now, 10, rate, burst) // 4 tokens left: 6 owed
	now += 1e9 / 10 * 6              // 0.6 s: the debt is paid, nothing more
	if b.takeAt(now, rate, burst) {
		t.Fatal("a take when the debt was just paid, with no token earned since")
	}
	now += 1e9 / 10
	if !b.takeAt(now, rate, burst) {
		t.Fatal("no take 0.1 s after the debt was paid, at 10 a second")
	}

	var u userBuckets
	u.takeAt("a", 1, rate, burst)
	u.mu.Lock()
	u.bucket("a", 1, rate, burst).chargeAt(1, 20, rate, burst)
	u.mu.Unlock()
	u.takeAt("b", 1+1e9, rate, burst) // 1 s later: a sweep, "a" is still owing
	if u.takeAt("a", 1+1e9, rate, burst) {
		t.Fatal("a user 1 s into a debt of 2 s was let take: their bucket was forgotten as full")
	}
}
