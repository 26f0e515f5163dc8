package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// A send whose sent_at is absurd (a record from a producer with a broken
// clock, or a poison record) is decided like any other: a Redis expiry
// out of range would fail every retry of the persister's batch, and the
// partition would never be stored past it. Its claim lives no longer than
// a claim can need to.
func testClaimSendsAbsurdSentAt(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{DedupWindow: time.Hour})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	far := int64(1) << 62 // unix ms, some hundred million years ahead
	dup, err := r.ClaimSends(ctx, nil, []schema.Message{
		msg("g1", "alice", "far", 0, far),
		msg("g1", "alice", "far", 1, far+1000), // its resend: decided by the script
		msg("g1", "alice", "now", 2, now),
		msg("g1", "alice", "now", 3, far), // far from the first: claims the key in the script
	})
	if err != nil {
		t.Fatalf("ClaimSends: %v", err)
	}
	wantDup(t, "absurd sent_at", dup, false, true, false, false)
	if err := r.ClaimOriginals(ctx, nil, []schema.Message{msg("g1", "bob", "far", 4, far)}); err != nil {
		t.Fatalf("ClaimOriginals: %v", err)
	}
	for _, key := range []string{claimKey("g1", "alice", "far"), claimKey("g1", "alice", "now"), claimKey("g1", "bob", "far")} {
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 2*time.Hour {
			t.Errorf("claim %s expires in %v, want within twice the dedup window", key, ttl)
		}
	}
}
