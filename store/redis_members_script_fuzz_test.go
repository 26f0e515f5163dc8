package store

import (
	"context"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// FuzzMembersScriptStored plants any stored membership (a value of an
// older release, an operator's edit) and folds one member event onto it
// with membersScript, which reads the stored value in Lua. Where the Go
// reader of memberships (parseMembership) takes the value, the script
// must read it as the same membership: what it stores after the event is
// what Membership.Apply makes of the Go reading.
func FuzzMembersScriptStored(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	for _, s := range []string{"", "j:5", "l:3:9", "j:-1", "l:-1:-1", "j:007", "l:5:5"} {
		for op := range uint8(3) {
			f.Add(s, op, int64(12), true, int64(4))
		}
	}
	f.Fuzz(func(t *testing.T, stored string, op uint8, pos int64, hasJoined bool, joined int64) {
		const gid, uid = "fg", "fu"
		m.FlushAll()
		var before Membership
		if stored != "" {
			var err error
			if before, err = parseMembership(stored); err != nil {
				return // refused by the Go readers: nothing to agree with
			}
			m.HSet(membersKey(gid), uid, stored)
		}
		pos = max(-1, pos%(schema.MaxCursor+1))
		ev := schema.Member{Gid: gid, Uid: uid, Op: []schema.MemberOp{schema.OpJoin, schema.OpLeave, schema.OpLeaving}[op%3], Pos: pos, At: 1}
		if ev.Op != schema.OpJoin && hasJoined {
			ev.HasJoined, ev.Joined = true, max(-1, min(joined, pos))
		}
		if err := r.ApplyMembers(ctx, []schema.Member{ev}); err != nil {
			t.Fatalf("stored %q, %+v: %v", stored, ev, err)
		}
		all, err := r.Members(ctx, gid)
		if err != nil {
			t.Fatalf("stored %q, %+v: %v", stored, ev, err)
		}
		if want := before.Apply(ev); all[uid] != want {
			t.Fatalf("stored %q (Go reads %+v), then %+v: the script made %+v (%q), Apply %+v",
				stored, before, ev, all[uid], m.HGet(membersKey(gid), uid), want)
		}
	})
}
