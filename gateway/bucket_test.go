package gateway

import "testing"

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
