package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// knownGroup is a consumer group of chatd: the topic it reads and whether
// its position lives in Redis next to its state (the runner then reads it
// from there, and the group's committed offsets are a mirror for tools).
type knownGroup struct {
	topic   string
	inRedis bool
	role    string // the chatd role that runs it
	// lost is what records the group is moved past without reading them
	// leave out of its stores, and refill how to write them there later;
	// both are empty for a group whose effect is transient.
	lost, refill string
}

var knownGroups = map[string]knownGroup{
	consumers.GroupPersister:        {topics.Messages, true, "persister", "messages never written to Redis or ClickHouse", "clients are served them only once the persister reads them: reset it back to the first one skipped; `chatctl backfill -tables messages` writes them to ClickHouse for analysts only"},
	consumers.GroupFanout:           {topics.Messages, false, "fanout", "", ""},
	consumers.GroupAckProjector:     {topics.Acks, true, "projector", "acks never applied to the cursors", "`chatctl rebuild acks` applies them later"},
	consumers.GroupReceiptProjector: {topics.Receipts, true, "projector", "reads never applied to the read cursors and counts", "`chatctl rebuild receipts` applies them later"},
	consumers.GroupReceiptNotifier:  {topics.Receipts, false, "projector", "", ""},
	consumers.GroupMemberProjector:  {topics.Members, true, "projector", "joins and leaves never applied to the membership", "`chatctl rebuild members` applies them later"},
}

var chatTopics = []string{topics.Messages, topics.Acks, topics.Receipts, topics.Members, topics.DeadLetter}

func consumerGroupsList(ctx context.Context, c *command, _ any, args []string) error {
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	cluster, err := a.groups(ctx)
	if err != nil {
		return err
	}
	names := args
	if len(names) == 0 {
		names = cluster
	}
	for _, g := range names {
		// A name nobody knows would list as an empty Dead group, which
		// reads as the "MEMBERS 0" a reset waits for.
		if _, ok := knownGroups[g]; !ok && !slices.Contains(cluster, g) {
			return unknownGroupErr(g)
		}
	}
	var rds *store.Redis
	if c.s.RedisAddrs != "" {
		r, closeRedis, err := c.s.redis(ctx)
		if err != nil {
			return err
		}
		defer closeRedis()
		rds = r
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tREDIS_POSITION")
	for _, g := range names {
		info, err := a.describeGroup(ctx, g)
		if err != nil {
			return err
		}
		ts, err := groupTopics(ctx, a, g)
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t-\t-\t-\t-\t-\t-\n", g, info.State, len(info.Members))
		}
		for _, t := range ts {
			parts, err := a.partitions(ctx, t)
			if err != nil {
				return err
			}
			b, err := a.bounds(ctx, t, parts)
			if err != nil {
				return err
			}
			com, err := a.committed(ctx, g, t, parts)
			if err != nil {
				return err
			}
			var pos map[int]int64
			if rds != nil && knownGroups[g].inRedis {
				if pos, err = rds.Offsets(ctx, g, t); err != nil {
					return err
				}
			}
			for _, p := range parts {
				committed, lag := "-", "-"
				if o, ok := com[p]; ok {
					committed, lag = strconv.FormatInt(o, 10), strconv.FormatInt(b[p].end-o, 10)
				}
				rp := "-"
				if o, ok := pos[p]; ok {
					rp = strconv.FormatInt(o, 10)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%s\n", g, info.State, len(info.Members), t, p, committed, b[p].end, lag, rp)
			}
		}
	}
	return tw.Flush()
}

// groupTopics is the topic of a known group, else the chat.* topics the
// group has committed offsets on.
func groupTopics(ctx context.Context, a *admin, group string) ([]string, error) {
	if k, ok := knownGroups[group]; ok {
		return []string{k.topic}, nil
	}
	return a.topicsOf(ctx, group, chatTopics)
}

// ErrGroupActive is returned when a reset or rebuild would race the
// group's running consumers.
var ErrGroupActive = errors.New("the consumer group has active members")

// unknownGroupErr refuses a group the cluster does not know (no members,
// no committed offsets) that is none of chatd's: most likely a typo.
func unknownGroupErr(group string) error {
	return fmt.Errorf("consumer group %s is unknown to the cluster (no members, no committed offsets) and is none of chatd's (%s); check the name: `chatctl consumer-groups list` shows the groups there are",
		group, strings.Join(slices.Sorted(maps.Keys(knownGroups)), ", "))
}

// checkInactive refuses when the group has members, unless forced.
func checkInactive(ctx context.Context, a *admin, group string, force bool) error {
	info, err := a.describeGroup(ctx, group)
	if err != nil {
		return err
	}
	if len(info.Members) == 0 || force {
		return nil
	}
	return activeErr(group, info)
}

// activeErr refuses to touch a group that has members, saying what to
// stop: -force is offered only for a chatd group that keeps its position
// in Redis (Kafka takes no offsets from outside a group with members, and
// a group not chatd's keeps its position in Kafka).
func activeErr(group string, info groupInfo) error {
	stop, force := "its consumers", "; it keeps its position in Kafka, which takes offsets only from its members, so -force cannot move it while they run"
	if k, ok := knownGroups[group]; ok {
		stop = fmt.Sprintf("its consumers (every `chatd %s` process, or `chatd dev`)", k.role)
		if k.inRedis {
			force = ", or pass -force"
		}
	}
	return fmt.Errorf("%w: %s is %s with %d members; stop %s and retry%s",
		ErrGroupActive, group, info.State, len(info.Members), stop, force)
}
