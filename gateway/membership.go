package gateway

import (
	"context"
	"errors"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// Who may act on a group: the membership checks of every request, and the
// answers while the memberships are being rebuilt or a change of them is
// not projected yet.

// member loads uid's membership of gid and refuses non-members.
func (g *Gateway) member(ctx context.Context, uid, gid string) (store.Membership, *protocol.Error) {
	built, perr := g.membersFence(ctx, gid)
	if perr != nil {
		return store.Membership{}, perr
	}
	m, err := g.cfg.Redis.Membership(ctx, gid, uid, built)
	if err != nil {
		return m, g.stateErr(err, "membership", gid)
	}
	return m, g.notMember(ctx, m, gid, uid)
}

// membersFence names the member projector's partition of gid, whose replay
// mark a read of gid's memberships is checked against in its own round
// trip (see rebuilding).
func (g *Gateway) membersFence(ctx context.Context, gid string) (*store.Fence, *protocol.Error) {
	part, err := g.cfg.Producer.Partition(ctx, topics.Members, gid)
	if err != nil {
		return nil, g.unavailable("membership", err)
	}
	return &store.Fence{Consumer: consumers.GroupMemberProjector, Topic: topics.Members, Partition: part}, nil
}

// stateErr answers a failed read of uid's state in gid: unavailable, saying
// that the memberships are being rebuilt when they are (ErrReplaying).
func (g *Gateway) stateErr(err error, what, gid string) *protocol.Error {
	if errors.Is(err, store.ErrReplaying) {
		return g.rebuildErr(err, "the memberships of "+gid)
	}
	return g.unavailable(what, err)
}

// notMember refuses uid, one who never joined gid, unless gid's memberships
// are being rebuilt (see rebuilding) or uid's join is written but not yet
// projected: then the answer is unavailable, which clients retry, not
// not_member, which they give up on.
func (g *Gateway) notMember(ctx context.Context, m store.Membership, gid, uid string) *protocol.Error {
	if m.State != store.MemberNone {
		return nil
	}
	if perr := g.rebuilding(ctx, gid); perr != nil {
		return perr
	}
	return g.unlessJoining(ctx, gid, uid, "added to",
		protocol.Errorf(protocol.CodeNotMember, "you are not a member of %s; ask an admin or a member to add you", gid))
}

// unlessJoining returns refusal, or, while uid's join of gid is written
// but not yet projected, unavailable ("you are being <added> gid"), which
// clients retry.
func (g *Gateway) unlessJoining(ctx context.Context, gid, uid, added string, refusal *protocol.Error) *protocol.Error {
	joining, err := g.cfg.Redis.Joining(ctx, gid, uid)
	if err != nil {
		return g.unavailable("membership", err)
	}
	if joining {
		return protocol.Errorf(protocol.CodeUnavailable, "you are being %s %s; retry in a second", added, gid)
	}
	return refusal
}

// wholeMembers runs read, a read of gid's memberships that a change will
// rest on, between two checks that they are not being rebuilt: a read made
// while the member projector replays may miss members, and one made across
// a Redis loss may find none.
func (g *Gateway) wholeMembers(ctx context.Context, gid string, read func() error) *protocol.Error {
	if perr := g.rebuilding(ctx, gid); perr != nil {
		return perr
	}
	if err := read(); err != nil {
		return g.unavailable("members", err)
	}
	return g.rebuilding(ctx, gid)
}

// rebuilding answers unavailable while the memberships of gid are being
// rebuilt. Memberships that Redis lost (restarted empty, flushed) read as
// never joined, or as they stood earlier in chat.members, until the member
// projector notices and replays it, a few seconds; until it has marked
// gid's partition replayed again, no answer may rest on them.
func (g *Gateway) rebuilding(ctx context.Context, gid string) *protocol.Error {
	f, perr := g.membersFence(ctx, gid)
	if perr != nil {
		return perr
	}
	return g.rebuildErr(g.cfg.Redis.CheckReplayed(ctx, f.Consumer, f.Topic, f.Partition), "the memberships of "+gid)
}

// rebuildingAny is rebuilding of every group: a user's groups lie in every
// partition of chat.members.
func (g *Gateway) rebuildingAny(ctx context.Context) *protocol.Error {
	n, err := g.cfg.Producer.Partitions(ctx, topics.Members)
	if err == nil {
		err = g.cfg.Redis.CheckAllReplayed(ctx, consumers.GroupMemberProjector, topics.Members, n)
	}
	return g.rebuildErr(err, "your memberships")
}

func (g *Gateway) rebuildErr(err error, what string) *protocol.Error {
	switch {
	case errors.Is(err, store.ErrReplaying):
		return protocol.Errorf(protocol.CodeUnavailable, "%s are being rebuilt (the server's Redis lost its data, or an operator is rebuilding them); retry in a few seconds", what)
	case err != nil:
		return g.unavailable("membership", err)
	}
	return nil
}
