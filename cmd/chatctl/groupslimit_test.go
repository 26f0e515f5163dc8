package main

import (
	"context"
	"strings"
	"testing"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// chatctl's adds keep a user's limit of groups as the gateways' do
// (CHAT_MAX_GROUPS_PER_USER): the joins it is writing count, an add
// naming a user at the limit is refused whole and writes nothing, and the
// member projector's joins take the place of the reservations.
func TestMembersAddKeepsAUsersLimitOfGroups(t *testing.T) {
	e := newEnv(t, 1)
	e.vars["CHAT_MAX_GROUPS_PER_USER"] = "2"
	e.mustCtl("groups", "create", "g1", "alice")
	e.mustCtl("groups", "create", "g2", "alice")
	refused := func(args ...string) {
		t.Helper()
		out, err := e.ctl(args...)
		if err == nil || !strings.Contains(err.Error(), "alice in 2 groups") || !strings.Contains(err.Error(), "CHAT_MAX_GROUPS_PER_USER") || strings.Contains(err.Error(), "bob") {
			t.Fatalf("chatctl %s, alice in 2 groups: %v\n%s; want a refusal naming alice alone and CHAT_MAX_GROUPS_PER_USER", strings.Join(args, " "), err, out)
		}
	}
	refused("groups", "create", "g3", "bob", "alice")
	if tail := e.mustCtl("tail", topics.Members); strings.Contains(tail, `"gid":"g3"`) {
		t.Fatalf("%s has a join of a refused add:\n%s", topics.Members, tail)
	}
	e.mustCtl("groups", "create", "g3", "bob")
	// Projected, the joins count as members, their reservations gone.
	var joins []schema.Member
	for _, gid := range []string{"g1", "g2"} {
		joins = append(joins, schema.Member{Gid: gid, Uid: "alice", Op: schema.OpJoin, Pos: 1})
	}
	if err := e.rds.ApplyMembers(context.Background(), joins); err != nil {
		t.Fatal(err)
	}
	refused("members", "add", "g3", "alice")
	if err := e.rds.ApplyMembers(context.Background(), []schema.Member{{Gid: "g1", Uid: "alice", Op: schema.OpLeave, Pos: 2}}); err != nil {
		t.Fatal(err)
	}
	e.mustCtl("members", "add", "g3", "alice")
}
