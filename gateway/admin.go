package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// Group administration, behind the admin token: create a group, add and
// remove members, each written as chat.members events.

// admin guards an administration handler with the admin token.
func (g *Gateway) admin(h func(ctx context.Context, r *http.Request) (any, *protocol.Error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.cfg.AdminToken == "" {
			g.writeErr(w, protocol.Errorf(protocol.CodeForbidden, "administration is disabled; set CHAT_ADMIN_TOKEN"))
			return
		}
		switch tok := bearer(r); {
		case tok == "":
			g.writeErr(w, protocol.Errorf(protocol.CodeForbidden, "administration needs Authorization: Bearer <admin token> (not ?token=, which access logs keep)"))
			return
		case !constantEq(tok, g.cfg.AdminToken):
			g.writeErr(w, protocol.Errorf(protocol.CodeForbidden, "the Bearer token is not this gateway's admin token (CHAT_ADMIN_TOKEN; chatd dev's is the file admin-token in its data directory); a user's token does not administer"))
			return
		}
		ans, perr := h(r.Context(), r)
		if perr != nil {
			g.writeErr(w, perr)
			return
		}
		g.writeJSON(w, http.StatusOK, ans)
	}
}

type groupRequest struct {
	Gid     string   `json:"gid"`
	Members []string `json:"members"`
	Uid     string   `json:"uid"`
}

// maxGroupBody bounds an administration body: room for a group's 10,000
// members of ids up to 128 bytes, JSON-quoted (131 bytes each), and slack.
const maxGroupBody = 2 << 20

func (g *Gateway) readGroupRequest(r *http.Request) (groupRequest, *protocol.Error) {
	var req groupRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxGroupBody)).Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, protocol.Errorf(protocol.CodeBodyTooLarge, "the body is over the limit of %d bytes; name fewer members and add the rest with POST /v1/admin/groups/{gid}/members", maxGroupBody)
		}
		return req, badGroupBody(err)
	}
	if gid := r.PathValue("gid"); gid != "" {
		req.Gid = gid
	}
	return req, nil
}

// badGroupBody says what is wrong with an administration body that did not
// decode, with an example of the right one.
func badGroupBody(err error) *protocol.Error {
	const example = `{"gid":"team","members":["alice","bob"]} to create a group, {"uid":"carol"} to add a member (Content-Type: application/json)`
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && typ.Field != "" {
		want := map[string]string{"gid": "a string", "uid": "a string", "members": "a list of user ids"}[typ.Field]
		if want == "" {
			want = "of another type"
		}
		return protocol.Errorf(protocol.CodeBadFrame, "%q must be %s, not a JSON %s; send e.g. %s", typ.Field, want, typ.Value, example)
	}
	return protocol.Errorf(protocol.CodeBadFrame, "the body is not a JSON object; send e.g. %s", example)
}

// needID refuses a missing or malformed id of a body or path, naming the
// field.
func needID(field, id, example string) *protocol.Error {
	if id == "" {
		return protocol.Errorf(protocol.CodeInvalid, "%s is missing; send e.g. %s", field, example)
	}
	if err := schema.ValidID(id); err != nil {
		return protocol.Errorf(protocol.CodeInvalid, "%s %q: %v", field, id, err)
	}
	return nil
}

func (g *Gateway) createGroup(ctx context.Context, r *http.Request) (any, *protocol.Error) {
	req, perr := g.readGroupRequest(r)
	if perr != nil {
		return nil, perr
	}
	if len(req.Members) == 0 || len(req.Members) > g.cfg.MaxMembers {
		return nil, protocol.Errorf(protocol.CodeInvalid, `a group needs 1 to %d members, got %d; send e.g. {"gid":"team","members":["alice","bob"]}`, g.cfg.MaxMembers, len(req.Members))
	}
	return g.join(ctx, req.Gid, req.Members)
}

func (g *Gateway) addMember(ctx context.Context, r *http.Request) (any, *protocol.Error) {
	req, perr := g.readGroupRequest(r)
	if perr != nil {
		return nil, perr
	}
	if perr := needID(`"uid"`, req.Uid, `{"uid":"carol"}`); perr != nil {
		return nil, perr
	}
	if perr := g.groupKnown(ctx, req.Gid, req.Uid); perr != nil {
		return nil, perr
	}
	return g.join(ctx, req.Gid, []string{req.Uid})
}

// groupKnown refuses an add to a group that never had a member, as a
// removal from it is refused: a typo in the path would create a group.
// A group just created is known by its reserved joins before the member
// projector applies them.
func (g *Gateway) groupKnown(ctx context.Context, gid, uid string) *protocol.Error {
	if perr := needID(`"gid"`, gid, `{"gid":"team","members":["alice","bob"]}`); perr != nil {
		return perr
	}
	var known bool
	if perr := g.wholeMembers(ctx, gid, func() (err error) { known, err = g.cfg.Redis.GroupKnown(ctx, gid); return err }); perr != nil {
		return perr
	}
	if !known {
		return protocol.Errorf(protocol.CodeNotFound, `group %s does not exist (it never had a member); create it with POST /v1/admin/groups, e.g. {"gid":%q,"members":[%q]}`, gid, gid, uid)
	}
	return nil
}

// join adds members who are not members yet; adding a member twice is a
// no-op (a second join would move their start forward). While the
// memberships of gid are being rebuilt, a member may read as not one yet:
// no join is written then.
func (g *Gateway) join(ctx context.Context, gid string, uids []string) (any, *protocol.Error) {
	if perr := needID(`"gid"`, gid, `{"gid":"team","members":["alice","bob"]}`); perr != nil {
		return nil, perr
	}
	for _, uid := range uids {
		if perr := needID("a member", uid, `{"gid":"team","members":["alice","bob"]}`); perr != nil {
			return nil, perr
		}
	}
	// The memberships of those added only: an add of one to a group of
	// 10,000 reads one, and adding the members one by one costs O(members),
	// not O(members²).
	var current map[string]store.Membership
	if perr := g.wholeMembers(ctx, gid, func() (err error) { current, err = g.cfg.Redis.MembershipsOf(ctx, gid, uids); return err }); perr != nil {
		return nil, perr
	}
	// A leave written but not yet projected reads as joined: an add after
	// it is a join all the same.
	leaving, err := g.cfg.Redis.Leaving(ctx, gid, uids)
	if err != nil {
		return nil, g.unavailable("membership", err)
	}
	var join []string
	named := make(map[string]bool, len(uids))
	for _, uid := range uids {
		if !stillJoined(current[uid], leaving, uid) && !named[uid] { // a uid named twice joins once
			join = append(join, uid)
		}
		named[uid] = true
	}
	// A place is reserved for each join before it is written, counted
	// with the members until the projector has it: another add meanwhile,
	// here or through chatctl, counts it. A retry within the projection's
	// lag finds its joins reserved and writes no second one.
	fresh, perr := g.reserveJoins(ctx, gid, join)
	if perr != nil {
		return nil, perr
	}
	// Once reserved, the joins are written even if the caller goes away: a
	// retry meanwhile finds them reserved and answers without them. Their
	// places are held while they are written, however long that takes.
	wctx := context.WithoutCancel(ctx)
	// And a place among each user's groups, for the joins this call
	// reserved (a retry's are another call's, whose places are taken):
	// a refusal drops every reservation and writes nothing.
	held, perr := g.reserveGroups(wctx, gid, unjoined(join, fresh, 0))
	if perr != nil {
		g.dropJoins(ctx, gid, join, fresh, 0)
		return nil, perr
	}
	defer g.holdJoins(wctx, gid, unjoined(join, fresh, 0))()
	added := []string{} // answered as [], never null, when no one is new
	var todo []int      // the joins this call writes: those a call just before is writing are left to it
	for i := range join {
		if fresh[i] {
			todo = append(todo, i)
		}
	}
	// Written joinBatch at a time, at the group's position when each batch
	// is: one write to the broker for a batch, not a read of the head and
	// a write for each member.
	for lo := 0; lo < len(todo); lo += joinBatch {
		uids := make([]string, 0, joinBatch)
		for _, i := range todo[lo:min(lo+joinBatch, len(todo))] {
			uids = append(uids, join[i])
		}
		if _, err := g.cfg.Producer.JoinAll(wctx, gid, uids, "admin"); err != nil {
			g.dropJoins(ctx, gid, join, fresh, todo[lo])
			unwritten := unjoined(join, fresh, todo[lo])
			g.clearGroups(ctx, gid, slices.DeleteFunc(held, func(uid string) bool { return !slices.Contains(unwritten, uid) }))
			return nil, g.unavailable("membership change", err)
		}
		added = append(added, uids...)
	}
	if err := g.cfg.Redis.ClearLeaving(context.WithoutCancel(ctx), gid, added...); err != nil {
		g.log.Warn("cannot clear the notes of leaves that joins followed", "gid", gid, "err", err)
	}
	return map[string]any{"gid": gid, "added": added}, nil
}

// reserveGroups reserves a place in gid among the groups of each user of
// uids (store.ReserveGroups) and returns those this call reserved. It
// refuses them all when one is in MaxGroupsPerUser groups already, joined
// or being added: an add is done whole or not at all, as when it would
// pass the group's limit of members. Counts read while the memberships are
// being rebuilt may be short: the reservations are dropped then.
func (g *Gateway) reserveGroups(ctx context.Context, gid string, uids []string) ([]string, *protocol.Error) {
	if len(uids) == 0 {
		return nil, nil
	}
	held, full, err := g.cfg.Redis.ReserveGroups(ctx, gid, uids, g.cfg.MaxGroupsPerUser, g.cfg.JoinHold)
	if err != nil {
		return nil, g.unavailable("membership", err)
	}
	if len(full) > 0 {
		names := strings.Join(full[:min(len(full), 10)], ", ")
		if len(full) > 10 {
			names += fmt.Sprintf(" and %d more", len(full)-10)
		}
		one := len(full) == 1
		return nil, protocol.Errorf(protocol.CodeInvalid, "%s %s in %d groups already (with those being added), the most a user may be in (CHAT_MAX_GROUPS_PER_USER); nothing was added: "+
			"remove %s from a group first, add the others without %s, or raise CHAT_MAX_GROUPS_PER_USER on every gateway",
			names, pick(one, "is", "are"), g.cfg.MaxGroupsPerUser, pick(one, "them", "each"), pick(one, "them", "those"))
	}
	if perr := g.rebuildingAny(ctx); perr != nil {
		g.clearGroups(ctx, gid, held)
		return nil, perr
	}
	return held, nil
}

// clearGroups drops the reservations of places in gid among the groups of
// uids, of joins not written.
func (g *Gateway) clearGroups(ctx context.Context, gid string, uids []string) {
	if err := g.cfg.Redis.ClearGroups(context.WithoutCancel(ctx), gid, uids...); err != nil {
		g.log.Warn("cannot drop the reservations of places among users' groups; they are held until they expire", "gid", gid, "after", g.cfg.JoinHold, "err", err)
	}
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// joinBatch is how many joins of an add are written at once.
const joinBatch = 1000

// stillJoined reports whether m, uid's projected membership, is a stretch that
// no leave noted in leaving (Redis.Leaving) has ended yet.
func stillJoined(m store.Membership, leaving map[string]store.Membership, uid string) bool {
	l, ok := leaving[uid]
	return m.State == store.MemberJoined && !(ok && l.JoinedAt == m.JoinedAt)
}

// reserveJoins reserves a place in gid for each join of join (see
// store.ReserveJoins) and reports which this call reserved. It refuses
// the joins when gid's members, joined or reserved, and they would pass
// MaxMembers, and when gid's memberships are found being rebuilt after the
// reservation: a Redis that lost its data counts none of them.
func (g *Gateway) reserveJoins(ctx context.Context, gid string, join []string) ([]bool, *protocol.Error) {
	if len(join) == 0 {
		return nil, nil
	}
	fresh, err := g.cfg.Redis.ReserveJoins(ctx, gid, join, g.cfg.MaxMembers, nil, g.cfg.JoinHold)
	var full *store.FullError
	switch {
	case errors.As(err, &full):
		return nil, protocol.Errorf(protocol.CodeInvalid, "%s has %d members (with those being added); adding %d would pass the limit of %d: remove members first", gid, full.Members, full.Adding, full.Limit)
	case err != nil:
		return nil, g.unavailable("membership", err)
	}
	if perr := g.rebuilding(ctx, gid); perr != nil {
		g.dropJoins(ctx, gid, join, fresh, 0)
		return nil, perr
	}
	return fresh, nil
}

// holdJoins holds the reservations of uids in gid while their joins are
// written (store.HoldJoins).
func (g *Gateway) holdJoins(ctx context.Context, gid string, uids []string) (stop func()) {
	return g.cfg.Redis.HoldJoins(ctx, gid, uids, g.cfg.JoinHold, func(err error) {
		g.log.Warn("cannot renew the reservations of joins being written", "gid", gid, "err", err)
	})
}

// dropJoins drops the reservations of the joins of join from i on that
// were not written (see unjoined), so that their places are free at once.
func (g *Gateway) dropJoins(ctx context.Context, gid string, join []string, fresh []bool, i int) {
	if err := g.cfg.Redis.ClearJoining(context.WithoutCancel(ctx), gid, unjoined(join, fresh, i)...); err != nil {
		g.log.Warn("cannot drop reserved joins; their places are held until they expire", "gid", gid, "after", g.cfg.JoinHold, "err", err)
	}
}

// unjoined lists the uids of join from i on that ReserveJoins reserved:
// their joins were not written.
func unjoined(join []string, fresh []bool, i int) []string {
	var out []string
	for j := i; j < len(join); j++ {
		if fresh[j] {
			out = append(out, join[j])
		}
	}
	return out
}

func (g *Gateway) removeMember(ctx context.Context, r *http.Request) (any, *protocol.Error) {
	gid, uid := r.PathValue("gid"), r.PathValue("uid")
	for _, id := range []string{gid, uid} {
		if err := schema.ValidID(id); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalid, "%v", err)
		}
	}
	// While the memberships of gid are being rebuilt, uid may read as not
	// a member, or as one who has not left yet: a leave written then would
	// end their stretch later than it ended. A leave written but not yet
	// projected reads as projected (MarkLeaving), for the same reason.
	var m store.Membership
	if perr := g.wholeMembers(ctx, gid, func() (err error) { m, err = g.cfg.Redis.Membership(ctx, gid, uid, nil); return err }); perr != nil {
		return nil, perr
	}
	if m.State != store.MemberJoined {
		// A join written but not yet projected: a member in a moment.
		joining, err := g.cfg.Redis.Joining(ctx, gid, uid)
		if err != nil {
			return nil, g.unavailable("membership", err)
		}
		if joining {
			return nil, protocol.Errorf(protocol.CodeUnavailable, "%s is being added to %s; retry the removal in a second", uid, gid)
		}
		return nil, protocol.Errorf(protocol.CodeNotFound, "%s is not a member of %s", uid, gid)
	}
	// Once it writes, the removal runs to its end even if the caller goes
	// away: a retry before the projection finds the leave noted, where a
	// leave written but not noted would have it write a second one. It
	// refuses the member's new sends and waits for those in flight first
	// (producers.Remove).
	wctx := context.WithoutCancel(ctx)
	ev, pending, err := g.cfg.Producer.Remove(wctx, gid, uid, m.JoinedAt, "admin", g.cfg.Redis, g.cfg.JoinHold, RemoveWait)
	switch {
	case errors.Is(err, store.ErrRemoving):
		return nil, protocol.Errorf(protocol.CodeUnavailable, "%s is being removed from %s by another call; retry in a few seconds", uid, gid)
	case errors.Is(err, producers.ErrLeaveUnfinished):
		g.log.Warn("a removal failed after its leaving", "gid", gid, "uid", uid, "err", err)
		return nil, protocol.Errorf(protocol.CodeUnavailable,
			"the removal of %s from %s did not finish (the broker or Redis is unavailable); %s gets no pushes of %s until it does: retry it shortly", uid, gid, uid, gid)
	case err != nil:
		return nil, g.unavailable("membership change", err)
	}
	if pending > 0 {
		g.log.Warn("a removal waited for the member's sends in flight and gave up; their messages may follow the leave",
			"gid", gid, "uid", uid, "sends", pending, "waited", RemoveWait)
	}
	// A join after this leave is a new one, however soon it comes.
	if err := g.cfg.Redis.MarkLeaving(wctx, gid, uid, m.JoinedAt, ev.Pos, g.cfg.JoinHold); err != nil {
		g.log.Warn("cannot note a leave; a new join of the member waits until the leave is projected and the note of their join expires", "gid", gid, "uid", uid, "after", g.cfg.JoinHold, "err", err)
	}
	return map[string]any{"gid": gid, "removed": uid}, nil
}
