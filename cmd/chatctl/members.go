package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// Group administration writes chat.members events, as the gateway's admin
// API does: the member projector and the fan-out apply them. The current
// membership is read from the topic itself (the group's partition of
// chat.members). A join takes a place in the group's reservation in Redis
// first (store.ReserveJoins), which the gateways' adds take too, so an add
// through chatctl and one through a gateway at once cannot pass the
// group's limit of members together: adding needs Redis. A removal notes
// its leave there, freeing the place at once, when Redis is configured.

func groupsCreate(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: chatctl groups create GID UID... (a group needs at least one member)")
	}
	return changeMembers(ctx, c, args[0], args[1:], schema.OpJoin, false)
}

func membersAdd(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: chatctl members add GID UID...")
	}
	return changeMembers(ctx, c, args[0], args[1:], schema.OpJoin, true)
}

func membersRemove(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: chatctl members remove GID UID...")
	}
	return changeMembers(ctx, c, args[0], args[1:], schema.OpLeave, false)
}

// changeMembers joins (or makes leave) the users who are not (or are)
// members yet: joining a member twice would move their start forward.
// With needGroup, a join needs a group that has had a member, as a
// gateway's add does, so that a typo makes no group. Users named for
// removal who are not members fail the call once the others have left, as
// a gateway answers their removal not_found.
func changeMembers(ctx context.Context, c *command, gid string, uids []string, op schema.MemberOp, needGroup bool) error {
	for _, id := range append([]string{gid}, uids...) {
		if err := schema.ValidID(id); err != nil {
			return fmt.Errorf("%q: %w", id, err)
		}
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	current, err := membership(ctx, a, gid, c.s.Partitions)
	if err != nil {
		return err
	}
	if needGroup && len(current) == 0 {
		return fmt.Errorf("group %s does not exist (%s holds no member of it); create it with `chatctl groups create %s %s`", gid, topics.Members, gid, strings.Join(uids, " "))
	}
	var (
		rds   *store.Redis
		fresh map[string]bool // the joins this call reserved
	)
	if op == schema.OpJoin || c.s.RedisAddrs != "" {
		r, closeRedis, err := c.s.redis(ctx)
		if err != nil {
			return err
		}
		defer closeRedis()
		rds = r
	}
	// The position of a change is the head of gid's partition there.
	if err := checkPartitions(ctx, a, topics.Messages, c.s.Partitions); err != nil {
		return err
	}
	if op == schema.OpJoin {
		if fresh, err = reserveJoins(ctx, rds, gid, current, uids, c.joinHold); err != nil {
			return err
		}
		// And a place among each user's groups, for the joins reserved
		// here: a refusal drops them all and writes nothing.
		if err := reserveGroups(ctx, rds, gid, fresh, c.s.MaxGroups, c.joinHold); err != nil {
			clearJoins(ctx, c, rds, gid, fresh)
			return err
		}
	}
	prod, err := producers.New(producers.Config{Brokers: brokers, Security: c.s.kafkaSecurity})
	if err != nil {
		clearJoins(ctx, c, rds, gid, fresh)
		return err
	}
	defer prod.Close()
	if len(fresh) > 0 {
		// Held while the joins are written, one by one, however long.
		defer rds.HoldJoins(context.WithoutCancel(ctx), gid, slices.Collect(maps.Keys(fresh)), c.joinHold, func(err error) {
			fmt.Fprintf(c.stderr, "warning: cannot renew the reservations of the joins being written (%v)\n", err)
		})()
	}
	var (
		strangers []string            // named for removal, and not members
		changed   = map[string]bool{} // by this call
	)
	for _, uid := range uids {
		joined := current[uid].State == store.MemberJoined
		switch {
		case op == schema.OpJoin && joined:
			fmt.Fprintf(c.stdout, "%s: already a member of %s\n", uid, gid)
			continue
		case op == schema.OpJoin && !fresh[uid]:
			fmt.Fprintf(c.stdout, "%s: being added to %s already (by a gateway's add, or another chatctl)\n", uid, gid)
			continue
		case op == schema.OpLeave && !joined:
			if !changed[uid] && !slices.Contains(strangers, uid) { // a uid named twice leaves once
				strangers = append(strangers, uid)
			}
			continue
		}
		var m schema.Member
		if op == schema.OpJoin {
			m, err = prod.Join(ctx, gid, uid, "chatctl")
		} else {
			// Without Redis no gateway's sends are waited for: a send of
			// uid claimed before may land past the leave.
			var gate producers.SendGate
			if rds != nil {
				gate = rds
			}
			var pending int
			m, pending, err = prod.Remove(ctx, gid, uid, current[uid].JoinedAt, "chatctl", gate, c.joinHold, gateway.RemoveWait)
			switch {
			case errors.Is(err, store.ErrRemoving):
				err = fmt.Errorf("%s is being removed from %s by a gateway or another chatctl; run this again in a few seconds", uid, gid)
			case errors.Is(err, producers.ErrLeaveUnfinished):
				err = fmt.Errorf("the removal of %s from %s did not finish (%w); until it does, %s gets no pushes of %s: run it again", uid, gid, err, uid, gid)
			case err == nil && pending > 0:
				fmt.Fprintf(c.stderr, "warning: %d sends of %s to %s were still being produced after %v; their messages may follow the leave\n", pending, uid, gid, gateway.RemoveWait)
			}
		}
		if err != nil {
			clearJoins(ctx, c, rds, gid, fresh)
			return err
		}
		delete(fresh, uid) // written: its place is held until the projector has it
		if op == schema.OpJoin {
			// The notes of a leave, and of its removal, before this join
			// are of the stretch it ended: one at the same position
			// would read as this one's.
			if err := rds.ClearLeaving(context.WithoutCancel(ctx), gid, uid); err != nil {
				fmt.Fprintf(c.stderr, "warning: cannot clear the notes of %s's leave in Redis (%v); their sends may be refused for %v\n", uid, err, c.joinHold)
			}
		}
		if op == schema.OpLeave && rds != nil {
			// The gateways take the leave as projected, and its place as free.
			if err := rds.MarkLeaving(context.WithoutCancel(ctx), gid, uid, current[uid].JoinedAt, m.Pos, c.joinHold); err != nil {
				fmt.Fprintf(c.stderr, "warning: cannot note the leave of %s in Redis (%v); its place is free once the member projector has it\n", uid, err)
			}
		}
		current[uid] = current[uid].Apply(m) // a uid named twice changes once
		changed[uid] = true
		fmt.Fprintf(c.stdout, "%s: %s %s at position %d\n", uid, opName(op), gid, m.Pos)
	}
	switch len(strangers) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: not a member of %s", strangers[0], gid)
	}
	return fmt.Errorf("%s: not members of %s", strings.Join(strangers, ", "), gid)
}

// reserveJoins reserves a place in gid for each of uids not a member yet
// (current, read from chat.members), and returns those this call reserved:
// a uid reserved already is being joined by a gateway's add or another
// chatctl. It refuses the joins when they and gid's members would pass
// protocol.MaxMembers, the limit the gateway keeps: a who-read answer
// lists at most that many. The members counted are those of current, or
// of the member projection when more, and the joins reserved and in
// neither.
func reserveJoins(ctx context.Context, rds *store.Redis, gid string, current map[string]store.Membership, uids []string, hold time.Duration) (map[string]bool, error) {
	joined := make(map[string]bool, len(current))
	for uid, m := range current {
		if m.State == store.MemberJoined {
			joined[uid] = true
		}
	}
	var add []string
	for _, uid := range uids {
		if current[uid].State != store.MemberJoined && !slices.Contains(add, uid) { // a uid named twice joins once
			add = append(add, uid)
		}
	}
	reserved, err := rds.ReserveJoins(ctx, gid, add, protocol.MaxMembers, joined, hold)
	if full := (*store.FullError)(nil); errors.As(err, &full) {
		return nil, fmt.Errorf("%s has %d members (with those being added); adding %d would pass the limit of %d members a group has: "+
			"remove members first (`chatctl members remove %s UID...`), or add fewer", gid, full.Members, full.Adding, full.Limit, gid)
	}
	if err != nil {
		return nil, err
	}
	fresh := make(map[string]bool, len(add))
	for i, uid := range add {
		if reserved[i] {
			fresh[uid] = true
		}
	}
	return fresh, nil
}

// reserveGroups reserves a place in gid among the groups of each user of
// fresh (store.ReserveGroups), as a gateway's add does. It refuses the
// whole add, reserving nothing, when one of them is in limit groups
// already, joined or being added (CHAT_MAX_GROUPS_PER_USER).
func reserveGroups(ctx context.Context, rds *store.Redis, gid string, fresh map[string]bool, limit int, hold time.Duration) error {
	if len(fresh) == 0 {
		return nil
	}
	add := slices.Sorted(maps.Keys(fresh))
	_, full, err := rds.ReserveGroups(ctx, gid, add, limit, hold)
	if err != nil {
		return err
	}
	if len(full) > 0 {
		return fmt.Errorf("%s in %d groups already (with those being added), the most a user may be in (CHAT_MAX_GROUPS_PER_USER, -max-groups-per-user); nothing was added: "+
			"remove them from a group first (`chatctl members remove GID UID`), add the others without them, or raise the limit here and on every gateway",
			strings.Join(full, ", "), limit)
	}
	return nil
}

// clearJoins drops the reservations of joins not written.
func clearJoins(ctx context.Context, c *command, rds *store.Redis, gid string, fresh map[string]bool) {
	if len(fresh) == 0 {
		return
	}
	uids := slices.Collect(maps.Keys(fresh))
	if err := rds.ClearJoining(context.WithoutCancel(ctx), gid, uids...); err != nil {
		fmt.Fprintf(c.stderr, "warning: cannot drop the reservations of joins not written (%v); their places are held for %v\n", err, c.joinHold)
	}
	if err := rds.ClearGroups(context.WithoutCancel(ctx), gid, uids...); err != nil {
		fmt.Fprintf(c.stderr, "warning: cannot drop the reservations of places among the users' groups (%v); they are held for %v\n", err, c.joinHold)
	}
}

func groupsShow(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) != 1 {
		return errors.New("usage: chatctl groups show GID")
	}
	if err := schema.ValidID(args[0]); err != nil {
		return fmt.Errorf("%q: %w", args[0], err)
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	ms, err := membership(ctx, a, args[0], c.s.Partitions)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return fmt.Errorf("group %s does not exist (%s holds no member event of it): check the gid, or create it with `chatctl groups create %s UID...`", args[0], topics.Members, args[0])
	}
	uids := make([]string, 0, len(ms))
	for u := range ms {
		uids = append(uids, u)
	}
	sort.Strings(uids)
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UID\tSTATE\tJOINED_AT\tLEFT_AT")
	for _, u := range uids {
		m := ms[u]
		left := "-"
		if m.State == store.MemberLeft {
			left = fmt.Sprint(m.LeftAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", u, m.State, m.JoinedAt, left)
	}
	return tw.Flush()
}

// membership folds the member events of gid, read from its partition of
// chat.members, exactly as the member projector does. The topic must have
// the configured partition count (partitions), the one the running
// services place groups by.
func membership(ctx context.Context, a *admin, gid string, partitions int) (map[string]store.Membership, error) {
	all, _, err := a.spans(ctx, topics.Members, nil)
	if err != nil {
		return nil, err
	}
	if len(all) != partitions {
		return nil, partitionsErr(topics.Members, len(all), partitions)
	}
	part := topics.Partition(gid, len(all))
	var spans []span
	for _, s := range all {
		if s.part == part {
			spans = append(spans, s)
		}
	}
	out := map[string]store.Membership{}
	err = scan(ctx, scanConfig{brokers: a.brokers, sec: a.sec, topic: topics.Members}, spans, func(_ context.Context, _ int, msgs []kafka.Message) error {
		for _, m := range msgs {
			if string(schema.GidOfKey(m.Key)) != gid {
				continue
			}
			ev, err := decode(&m, part, partitions, schema.DecodeMember)
			if err != nil || ev.Gid != gid {
				continue // poison: the projector dead-letters it
			}
			out[ev.Uid] = out[ev.Uid].Apply(ev)
		}
		return nil
	})
	return out, err
}

func opName(op schema.MemberOp) string {
	if op == schema.OpJoin {
		return "joined"
	}
	return "left"
}

// checkPartitions refuses a topic whose partition count is not the
// configured one.
func checkPartitions(ctx context.Context, a *admin, topic string, want int) error {
	parts, err := a.partitions(ctx, topic)
	if err != nil {
		return err
	}
	if len(parts) != want {
		return partitionsErr(topic, len(parts), want)
	}
	return nil
}

// partitionsErr says that topic has n partitions where the configuration
// says want: a group is placed by the count, so with another one its events
// land where the running services do not look for them.
func partitionsErr(topic string, n, want int) error {
	return fmt.Errorf("%s has %d partitions, the configuration says %d (CHAT_PARTITIONS / -partitions): groups are placed by that count, "+
		"and partition counts never change on a live system; set CHAT_PARTITIONS to the deployment's count, "+
		"or if partitions were added, restore the topics (`chatctl topics verify` shows every difference)", topic, n, want)
}
