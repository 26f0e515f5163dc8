package gateway

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// maxDevMembers bounds the members one dev request names.
const maxDevMembers = 100

// devRoutes adds group administration for signed-in users, for `chatd dev`
// only (Config.DevTokens): the web page creates groups and adds members
// without the admin token. A user creates a group that has no members yet,
// with themselves in it, and adds members to a group they are in.
func (g *Gateway) devRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/dev/groups", g.asUser(g.devCreateGroup))
	mux.HandleFunc("POST /v1/dev/groups/{gid}/members", g.asUser(g.devAddMember))
}

func (g *Gateway) devCreateGroup(ctx context.Context, uid string, r *http.Request) (any, *protocol.Error) {
	req, perr := g.readGroupRequest(r)
	if perr != nil {
		return nil, perr
	}
	if len(req.Members) > maxDevMembers {
		return nil, protocol.Errorf(protocol.CodeInvalid, "at most %d members at once; add the others with POST /v1/dev/groups/{gid}/members", maxDevMembers)
	}
	if perr := needID(`"gid"`, req.Gid, `{"gid":"team","members":["bob"]}`); perr != nil {
		return nil, perr
	}
	// Whether the group has members, and uid among them, is known only
	// once its memberships are whole.
	var current map[string]store.Membership
	if perr := g.wholeMembers(ctx, req.Gid, func() (err error) { current, err = g.cfg.Redis.Members(ctx, req.Gid); return err }); perr != nil {
		return nil, perr
	}
	if current[uid].State != store.MemberJoined && slices.ContainsFunc(slices.Collect(maps.Values(current)),
		func(m store.Membership) bool { return m.State == store.MemberJoined }) {
		return nil, protocol.Errorf(protocol.CodeForbidden, "group %s exists; ask one of its members to add you", req.Gid)
	}
	return g.join(ctx, req.Gid, append([]string{uid}, slices.DeleteFunc(req.Members, func(m string) bool { return m == uid })...))
}

func (g *Gateway) devAddMember(ctx context.Context, uid string, r *http.Request) (any, *protocol.Error) {
	req, perr := g.readGroupRequest(r)
	if perr != nil {
		return nil, perr
	}
	if err := schema.ValidID(req.Gid); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalid, "gid: %v", err)
	}
	// The answer to a missing uid named the body that creates a group.
	if perr := needID(`"uid"`, req.Uid, `{"uid":"carol"}`); perr != nil {
		return nil, perr
	}
	m, perr := g.member(ctx, uid, req.Gid)
	if perr != nil {
		return nil, perr
	}
	if m.State != store.MemberJoined {
		return nil, protocol.Errorf(protocol.CodeLeft, "you left %s; only its members add members", req.Gid)
	}
	return g.join(ctx, req.Gid, []string{req.Uid})
}
