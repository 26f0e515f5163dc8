package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// Group administration writes chat.members events, as the gateway's admin
// API does: the member projector and the fan-out apply them. The current
// membership is read from the topic itself (the group's partition of
// chat.members), so these commands need only Kafka.

func groupsCreate(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: chatctl groups create GID UID... (a group needs at least one member)")
	}
	return changeMembers(ctx, c, args[0], args[1:], schema.OpJoin)
}

func membersAdd(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: chatctl members add GID UID...")
	}
	return changeMembers(ctx, c, args[0], args[1:], schema.OpJoin)
}

func membersRemove(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) < 2 {
		return errors.New("usage: chatctl members remove GID UID...")
	}
	return changeMembers(ctx, c, args[0], args[1:], schema.OpLeave)
}

// changeMembers joins (or makes leave) the users who are not (or are)
// members yet: joining a member twice would move their start forward.
func changeMembers(ctx context.Context, c *command, gid string, uids []string, op schema.MemberOp) error {
	for _, id := range append([]string{gid}, uids...) {
		if err := schema.ValidID(id); err != nil {
			return fmt.Errorf("%q: %w", id, err)
		}
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	current, err := membership(ctx, brokers, gid, c.s.Partitions)
	if err != nil {
		return err
	}
	if op == schema.OpJoin {
		if err := roomFor(gid, current, uids); err != nil {
			return err
		}
	}
	// The position of a change is the head of gid's partition there.
	if err := checkPartitions(ctx, newAdmin(brokers), topics.Messages, c.s.Partitions); err != nil {
		return err
	}
	prod, err := producers.New(producers.Config{Brokers: brokers})
	if err != nil {
		return err
	}
	defer prod.Close()
	for _, uid := range uids {
		joined := current[uid].State == store.MemberJoined
		switch {
		case op == schema.OpJoin && joined:
			fmt.Fprintf(c.stdout, "%s: already a member of %s\n", uid, gid)
			continue
		case op == schema.OpLeave && !joined:
			fmt.Fprintf(c.stdout, "%s: not a member of %s\n", uid, gid)
			continue
		}
		var m schema.Member
		if op == schema.OpJoin {
			m, err = prod.Join(ctx, gid, uid, "chatctl")
		} else {
			m, err = prod.Leave(ctx, gid, uid, current[uid].JoinedAt, "chatctl")
		}
		if err != nil {
			return err
		}
		current[uid] = current[uid].Apply(m) // a uid named twice changes once
		fmt.Fprintf(c.stdout, "%s: %s %s at position %d\n", uid, opName(op), gid, m.Pos)
	}
	return nil
}

// roomFor refuses joining uids to gid when its members (current) and those
// of uids not yet members would pass protocol.MaxMembers, the limit the
// gateway keeps: a who-read answer lists at most that many. A join through
// the gateway meanwhile is not counted.
func roomFor(gid string, current map[string]store.Membership, uids []string) error {
	joined := 0
	for _, m := range current {
		if m.State == store.MemberJoined {
			joined++
		}
	}
	add := map[string]bool{} // a uid named twice joins once
	for _, uid := range uids {
		if current[uid].State != store.MemberJoined {
			add[uid] = true
		}
	}
	if joined+len(add) > protocol.MaxMembers {
		return fmt.Errorf("%s has %d members; adding %d would pass the limit of %d members a group has: "+
			"remove members first (`chatctl members remove %s UID...`), or add fewer", gid, joined, len(add), protocol.MaxMembers, gid)
	}
	return nil
}

func groupsShow(ctx context.Context, c *command, _ any, args []string) error {
	if len(args) != 1 {
		return errors.New("usage: chatctl groups show GID")
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	ms, err := membership(ctx, brokers, args[0], c.s.Partitions)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return fmt.Errorf("group %s has no member events in %s", args[0], topics.Members)
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
func membership(ctx context.Context, brokers []string, gid string, partitions int) (map[string]store.Membership, error) {
	a := newAdmin(brokers)
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
	err = scan(ctx, scanConfig{brokers: brokers, topic: topics.Members}, spans, func(_ context.Context, _ int, msgs []kafka.Message) error {
		for _, m := range msgs {
			if string(schema.GidOfKey(m.Key)) != gid {
				continue
			}
			ev, err := schema.DecodeMember(m.Value)
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
