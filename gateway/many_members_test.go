package gateway

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyReads is a go-redis hook that counts the commands named cmd (lower
// case) sent on a key, alone or in pipelines.
type keyReads struct {
	cmd, key string
	mu       sync.Mutex
	n        int
}

func (h *keyReads) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *keyReads) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), h.cmd) && args[1] == h.key {
			h.n++
		}
	}
}

func (h *keyReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *keyReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

func (h *keyReads) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// bigGroup creates gid with n members, user-0 to user-<n-1>, through the
// admin API, and waits until they are projected.
func (e *env) bigGroup(gid string, n int) {
	e.t.Helper()
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprint("user-", i)
	}
	e.waitReplayed(gid)
	if st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": gid, "members": members}); st != 200 {
		e.t.Fatalf("create %s of %d: %d %v", gid, n, st, out)
	}
	waitFor(e.t, fmt.Sprint(n, " members of ", gid, " projected"), 30*time.Second, func() bool {
		ms, err := e.redis.Members(context.Background(), gid)
		return err == nil && len(ms) == n
	})
}

// An add reads the memberships of the users it adds, not every member of
// the group: one add to a group of 5,000 read all 5,000 (HGETALL), so
// adding its members one by one through the API cost O(members²), 2.4 ms
// an add at 1,000 members, 13.7 ms at 10,000.
func TestAnAddReadsOnlyTheMembershipsOfThoseItAdds(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.bigGroup("big", 2000)
	reads := &keyReads{cmd: "hgetall", key: "chat:{big}:members"}
	e.rc.AddHook(reads)
	for _, uid := range []string{"carol", "user-7"} { // a new member, and one already
		if st, out := e.http("POST", "/v1/admin/groups/big/members", adminToken, map[string]any{"uid": uid}); st != 200 {
			t.Fatalf("add %s: %d %v", uid, st, out)
		}
	}
	if n := reads.calls(); n > 0 {
		t.Errorf("two adds to a group of 2,000 read every member %d times; want none", n)
	}
	e.waitMembers("big", "carol")
	if st, out := e.http("POST", "/v1/admin/groups/big/members", adminToken, map[string]any{"uid": "carol"}); st != 200 || fmt.Sprint(out["added"]) != "[]" {
		t.Errorf("carol added again: %d %v, want 200 and no one added", st, out)
	}
}

// An add takes out the reservations of joins the member projector has
// applied: they were kept until they expired (JoinHold, 30 s), and every
// add walked them all in one script, which Redis runs alone: within 30 s
// of creating a group of 9,000 members, 5.2 ms of Redis an add, and
// adding members one by one cost O(members²).
func TestAnAddTakesOutTheReservationsOfJoinsProjected(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.bigGroup("big", 2000)
	if st, out := e.http("POST", "/v1/admin/groups/big/members", adminToken, map[string]any{"uid": "carol"}); st != 200 {
		t.Fatalf("add carol: %d %v", st, out)
	}
	if n := e.rc.ZCard(context.Background(), "chat:{big}:joining").Val(); n > 1 {
		t.Errorf("%d reservations held after an add to a group of 2,000 whose joins are projected; want carol's at most", n)
	}
}
