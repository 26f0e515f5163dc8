package store

import (
	"context"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
)

// SeedWindows gives a group with no window its newest stored msgid as floor
// and head, and leaves a group that has a window as it is (its head only
// rises).
func TestSeedWindowsLeavesExistingWindowsAlone(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	r := newTestRedis(t, newServerClient(t, srv), RedisConfig{WindowSize: 5})
	appendAll(t, r, batchOf("live", span(10, 12)...)...)

	if err := r.SeedWindows(ctx, nil, map[string]int64{"silent": 7, "live": 9}); err != nil {
		t.Fatal(err)
	}
	if ids, complete := window(t, r, "silent", 3, 100); len(ids) != 0 || complete {
		t.Errorf("silent after 3: %v complete=%v, want nothing and a floor above 3", ids, complete)
	}
	if ids, complete := window(t, r, "live", -1, 100); !slicesEqual(ids, span(10, 12)) || !complete {
		t.Errorf("live: %v complete=%v, want 10..12 and no floor", ids, complete)
	}
	for gid, want := range map[string]int64{"silent": 7, "live": 12} {
		if h, err := r.Head(ctx, gid); err != nil || h != want {
			t.Errorf("Head(%s) = %d, %v; want %d", gid, h, err, want)
		}
	}
}
