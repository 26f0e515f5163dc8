package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

type resetOpts struct {
	to         string
	topic      string
	partition  int
	dryRun     bool
	force      bool
	skipUnread bool
}

func resetFlags(c *command) any {
	o := &resetOpts{}
	c.fs.StringVar(&o.to, "to", "", "earliest, latest, a time (RFC 3339, e.g. 2024-05-01T12:00:00Z) or an offset")
	c.fs.StringVar(&o.topic, "topic", "", "the topic (default: the one the group reads)")
	c.fs.IntVar(&o.partition, "partition", -1, "reset this partition only (default: every partition; an OFFSET is then the same number in each)")
	c.fs.BoolVar(&o.dryRun, "dry-run", false, "print the plan, change nothing")
	c.fs.BoolVar(&o.force, "force", false, "reset although the group has active members: only for groups that keep their position in Redis (the projectors, the persister), whose running consumers then go on from the new position")
	c.fs.BoolVar(&o.skipUnread, "skip-unread", false, "move the persister or a projector past records it has not read: their effects (messages, cursors, membership) never reach its stores")
	return o
}

func consumerGroupsReset(ctx context.Context, c *command, opts any, args []string) error {
	o := opts.(*resetOpts)
	if len(args) == 1 && o.to == "" {
		// The usage alone did not say which part was missing.
		return fmt.Errorf("consumer-groups reset %s needs -to, where to move it: earliest, latest, a time such as 2024-05-01T12:00:00Z, or an offset (with -dry-run to see the plan first)", args[0])
	}
	if len(args) != 1 {
		return errors.New("usage: chatctl consumer-groups reset GROUP -to earliest|latest|TIME|OFFSET [-topic T] [-partition P] [-dry-run] [-force] [-skip-unread]")
	}
	group := args[0]
	if err := checkTarget(o.to); err != nil {
		return err // before Kafka is asked anything
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	info, err := a.describeGroup(ctx, group)
	if err != nil {
		return err
	}
	k := knownGroups[group]
	active := len(info.Members) > 0
	switch {
	case active && o.dryRun:
		// A plan changes nothing: an operator may look before stopping.
	case active && !o.force:
		return activeErr(group, info)
	case active && !k.inRedis:
		// Kafka takes offsets for a group with members only from them.
		return activeErr(group, info)
	}
	topic := o.topic
	if known, ok := knownGroups[group]; ok && topic != "" && topic != known.topic {
		return fmt.Errorf("%s reads %s only; a position on %s would move nothing it reads: drop -topic, or name the group that reads %s",
			group, known.topic, topic, topic)
	}
	if topic == "" {
		ts, err := groupTopics(ctx, a, group)
		if err != nil {
			return err
		}
		if len(ts) == 0 && info.State == "Dead" {
			return unknownGroupErr(group)
		}
		if len(ts) != 1 {
			return fmt.Errorf("group %s: cannot tell its topic (it has offsets on %v); name it with -topic", group, ts)
		}
		topic = ts[0]
	}
	parts, err := a.partitions(ctx, topic)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("%d partitions", len(parts))
	switch {
	case o.partition >= 0 || o.partition < -1:
		if !slices.Contains(parts, o.partition) {
			return fmt.Errorf("-partition %d: %s has partitions 0 to %d", o.partition, topic, len(parts)-1)
		}
		parts, where = []int{o.partition}, fmt.Sprintf("partition %d", o.partition) // the others keep their positions
	case len(parts) > 1 && isOffset(o.to):
		fmt.Fprintf(c.stderr, "note: offset %s is a position within one partition; it is taken for each of the %d partitions of %s (-partition P resets one alone)\n", o.to, len(parts), topic)
	}
	target, err := resetTarget(ctx, a, topic, parts, o.to)
	if err != nil {
		return err
	}
	com, err := a.committed(ctx, group, topic, parts)
	if err != nil {
		return err
	}
	if _, ok := knownGroups[group]; !ok && info.State == "Dead" && len(com) == 0 {
		// Committed, the offsets would make a new group and leave the
		// one meant where it was.
		return unknownGroupErr(group)
	}
	var rds *store.Redis
	var pos map[int]int64
	if k.inRedis {
		r, closeRedis, err := c.s.redis(ctx)
		if err != nil {
			return fmt.Errorf("%s keeps its position in Redis next to its state: %w", group, err)
		}
		defer closeRedis()
		rds = r
		if pos, err = rds.Offsets(ctx, group, topic); err != nil {
			return err
		}
	}

	b, err := a.bounds(ctx, topic, parts)
	if err != nil {
		return err
	}
	cur := current(k, com, pos, b)
	var skips []move
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tREDIS_POSITION\tNEW\tMOVE")
	for _, p := range parts {
		m := "-" // where the group goes on from is not known
		if from, ok := cur[p]; ok {
			switch n := target[p] - from; {
			case n > 0:
				m = fmt.Sprintf("forward: skips %d unread", n)
				skips = append(skips, move{p, from, target[p]})
			case n < 0:
				m = fmt.Sprintf("back: replays %d", -n)
			default:
				m = "none"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", group, topic, p, offStr(com, p), offStr(pos, p), target[p], m)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	refuse := k.lost != "" && len(skips) > 0 && !o.skipUnread
	if o.dryRun {
		fmt.Fprintln(c.stdout, "dry run: nothing changed")
		if active {
			fmt.Fprintf(c.stdout, "%s has %d members now: stop its consumers before the reset itself\n", group, len(info.Members))
		}
		if refuse {
			fmt.Fprintf(c.stdout, "the reset itself would be refused: %v\n", skipErr(group, topic, k, skips))
		}
		return nil
	}
	if refuse {
		return skipErr(group, topic, k, skips)
	}
	if rds != nil {
		// The runner reads its position from Redis: write it there first,
		// then mirror it to the group for lag tools.
		saved, err := fromStart(ctx, a, topic, parts, target)
		if err != nil {
			return err
		}
		if err := rds.ResetOffsets(ctx, group, topic, saved); err != nil {
			return err
		}
	}
	if active {
		// Forced, with the position in Redis: the running consumers see it
		// moved within seconds and go on from there; they mirror it to the
		// group's offsets with their next commit.
		fmt.Fprintf(c.stdout, "reset %s on %s: %s, in Redis; its %d running consumers go on from there within seconds (the group's committed offsets follow with their next commit)\n",
			group, topic, where, len(info.Members))
		return nil
	}
	if err := a.commit(ctx, group, topic, target); err != nil {
		if rds != nil {
			return fmt.Errorf("%w (the position in Redis, which the consumers read, is already reset; run the reset again to mirror it to the group)", err)
		}
		return err
	}
	fmt.Fprintf(c.stdout, "reset %s on %s: %s; start the group's consumers to read from there\n", group, topic, where)
	return nil
}

// ErrSkipsUnread is returned when a reset would move a group that builds
// state past records it has not read.
var ErrSkipsUnread = errors.New("the reset skips records the group has not read")

// move is a partition's position moving from one offset to another.
type move struct {
	part     int
	from, to int64
}

// current is where the group goes on from in each partition: for a group
// that keeps its position in Redis, the position there (none saved, or
// one below the log start, is the log start: the runner replays from
// there); for another, its committed offset, when it has one.
func current(k knownGroup, com, pos map[int]int64, b map[int]bounds) map[int]int64 {
	out := make(map[int]int64, len(b))
	for p, bp := range b {
		if !k.inRedis {
			if o, ok := com[p]; ok {
				out[p] = o
			}
			continue
		}
		o, ok := pos[p]
		if !ok || o < bp.first {
			o = bp.first
		}
		out[p] = o
	}
	return out
}

// skipErr refuses a reset that moves a group that builds state past
// records it has not read, saying where and how many.
func skipErr(group, topic string, k knownGroup, skips []move) error {
	var total int64
	where := make([]string, len(skips))
	for i, s := range skips {
		total += s.to - s.from
		where[i] = fmt.Sprintf("partition %d from %d to %d (%d)", s.part, s.from, s.to, s.to-s.from)
	}
	n := fmt.Sprintf("%d records", total)
	if topic != topics.Messages {
		n = fmt.Sprintf("up to %d records (compaction may have removed some)", total)
	}
	return fmt.Errorf("%w: %s would skip %s of %s it has not read: %s; they would be %s. "+
		"To replay, pick a -to at or before its position; to have it read them, start its consumers and reset once `chatctl consumer-groups list %s` shows it past them; "+
		"to skip them anyway, pass -skip-unread (%s)",
		ErrSkipsUnread, group, n, topic, strings.Join(where, ", "), k.lost, group, k.refill)
}

// isOffset reports whether -to names an offset.
func isOffset(to string) bool {
	_, err := strconv.ParseInt(to, 10, 64)
	return err == nil
}

// resetTarget turns -to into an offset per partition, within the log.
func resetTarget(ctx context.Context, a *admin, topic string, parts []int, to string) (map[int]int64, error) {
	b, err := a.bounds(ctx, topic, parts)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(parts))
	switch {
	case to == "earliest":
		for _, p := range parts {
			out[p] = b[p].first
		}
	case to == "latest":
		for _, p := range parts {
			out[p] = b[p].end
		}
	default:
		if t, err := time.Parse(time.RFC3339Nano, to); err == nil {
			return a.offsetsAt(ctx, topic, parts, t)
		}
		if err := checkTarget(to); err != nil {
			return nil, err
		}
		off, _ := strconv.ParseInt(to, 10, 64)
		for _, p := range parts {
			out[p] = min(max(off, b[p].first), b[p].end)
		}
	}
	return out, nil
}

// checkTarget refuses a -to that names no position.
func checkTarget(to string) error {
	if to == "earliest" || to == "latest" {
		return nil
	}
	if _, err := time.Parse(time.RFC3339Nano, to); err == nil {
		return nil
	}
	if off, err := strconv.ParseInt(to, 10, 64); err == nil && off >= 0 {
		return nil
	}
	return fmt.Errorf("-to %q: want earliest, latest, a time such as 2024-05-01T12:00:00Z, or an offset >= 0", to)
}

// fromStart returns the positions to save in Redis for target: a partition
// reset to its log start (or below it, should retention have moved it
// since) is saved as kafka.FirstOffset, the claim of a consumer that starts
// from nothing. Its consumer then replays it as after a Redis loss: the
// persister claims again, from ClickHouse, the first sends that retention
// removed, so that the resends the replay meets stay duplicates once their
// claims in Redis have expired.
func fromStart(ctx context.Context, a *admin, topic string, parts []int, target map[int]int64) (map[int]int64, error) {
	b, err := a.bounds(ctx, topic, parts)
	if err != nil {
		return nil, fmt.Errorf("nothing changed: %w", err)
	}
	out := make(map[int]int64, len(target))
	for p, o := range target {
		if o <= b[p].first {
			o = kafka.FirstOffset
		}
		out[p] = o
	}
	return out, nil
}

func offStr(m map[int]int64, p int) string {
	if o, ok := m[p]; ok {
		return strconv.FormatInt(o, 10)
	}
	return "-"
}
