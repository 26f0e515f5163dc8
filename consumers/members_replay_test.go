package consumers

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// A crash between the member projector's effect and its commit replays the
// records after the saved position, in batches that need not end where the
// first run's did. A batch boundary between a member's join and their leave
// must not show them joined again: the gateway trusts a membership it
// finds (the replay mark is there), and a member who left would read, and
// send to, the group for as long as the rest of the replay takes.
func TestAMemberReplayCutBetweenAJoinAndALeaveDoesNotRejoin(t *testing.T) {
	r, m, rec := memberReplayEnv(t)
	ctx := context.Background()
	join, leave, rejoin := rec(10, schema.OpJoin, 3), rec(11, schema.OpLeave, 7), rec(12, schema.OpJoin, 9)
	left := store.Membership{State: store.MemberLeft, JoinedAt: 3, LeftAt: 7}

	// The first run: one batch, then a crash before the commit.
	if err := m.Handle(ctx, 0, []Record[schema.Member]{join, leave}); err != nil {
		t.Fatal(err)
	}
	// The replay, cut after the join.
	if err := m.Handle(ctx, 0, []Record[schema.Member]{join}); err != nil {
		t.Fatal(err)
	}
	all, err := r.Members(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if got := all["alice"]; got != left {
		t.Fatalf("alice reads %+v between two batches of a replay; she left at 7 and must read %+v: she sees messages after 7", got, left)
	}
	if groups, _ := r.UserGroups(ctx, "alice"); groups["g1"] != left {
		t.Fatalf("alice's groups read %+v for g1 in the replay, want %+v", groups["g1"], left)
	}
	// The replay goes on; a later join is applied as ever.
	if err := m.Handle(ctx, 0, []Record[schema.Member]{leave, rejoin}); err != nil {
		t.Fatal(err)
	}
	if all, _ := r.Members(ctx, "g1"); all["alice"] != (store.Membership{State: store.MemberJoined, JoinedAt: 9}) {
		got := all["alice"]
		t.Fatalf("alice after her rejoin: %+v, want joined at 9", got)
	}
}

// A log that lost its tail (or was recreated) gives offsets the projector
// applied before to new records: the runner then reads it again from its
// start, below the saved position, and those records must be applied, not
// skipped as replays of the old ones.
func TestAMemberLogThatLostItsTailIsAppliedAgain(t *testing.T) {
	r, m, rec := memberReplayEnv(t)
	ctx := context.Background()
	// The old log: alice joins, leaves and joins again; the position saved
	// is 13.
	m.Start(0, kafka.FirstOffset)
	if err := m.Handle(ctx, 0, []Record[schema.Member]{rec(10, schema.OpJoin, 3), rec(11, schema.OpLeave, 5), rec(12, schema.OpJoin, 7)}); err != nil {
		t.Fatal(err)
	}
	// The log loses offset 12; a leave takes its offset. The runner starts
	// from the saved 13, finds it past the end, and reads from the start.
	m.Start(0, 13)
	if err := m.Handle(ctx, 0, []Record[schema.Member]{rec(10, schema.OpJoin, 3), rec(11, schema.OpLeave, 5)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Handle(ctx, 0, []Record[schema.Member]{rec(12, schema.OpLeave, 8)}); err != nil {
		t.Fatal(err)
	}
	want := store.Membership{State: store.MemberLeft, JoinedAt: 3, LeftAt: 5}
	if all, _ := r.Members(ctx, "g1"); all["alice"] != want {
		got := all["alice"]
		t.Fatalf("alice after the log lost its tail: %+v, want %+v as the log now says", got, want)
	}
}

// memberReplayEnv returns a store on a fresh redis-server, a member
// projector on it, and a maker of alice's records in g1 (a leave ends her
// join at 3).
func memberReplayEnv(t *testing.T) (*store.Redis, *MemberProjector, func(off int64, op schema.MemberOp, pos int64) Record[schema.Member]) {
	t.Helper()
	srv := testserver.NewRedis(t)
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { rc.Close() })
	r, err := store.NewRedis(rc, store.RedisConfig{WindowSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(off int64, op schema.MemberOp, pos int64) Record[schema.Member] {
		ev := schema.Member{Gid: "g1", Uid: "alice", Op: op, Pos: pos}
		if op == schema.OpLeave {
			ev.HasJoined, ev.Joined = true, 3
		}
		return Record[schema.Member]{Offset: off, Event: ev}
	}
	return r, &MemberProjector{Redis: r}, rec
}
