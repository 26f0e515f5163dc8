package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/topics"
)

// admin is a Kafka client for metadata, offsets and consumer groups, on
// connections of its own (topics.NewClient): close lets them go.
type admin struct {
	brokers []string
	sec     topics.Security
	client  *kafka.Client
	close   func()
}

func newAdmin(brokers []string, sec topics.Security) *admin {
	client, closeClient := topics.NewClient(brokers, sec, 15*time.Second)
	return &admin{brokers: brokers, sec: sec, client: client, close: closeClient}
}

// upHint is the advice that follows a request to the brokers that failed
// with err: the TLS settings for a failed handshake, none when ctx ended
// (Ctrl-C), which says nothing of the broker.
func upHint(ctx context.Context, err error) string {
	if a := tlsclient.Advice(err, "CHAT_KAFKA_TLS", "CHAT_KAFKA_CA_FILE", "the brokers'"); a != "" {
		return a
	}
	if ctx.Err() != nil {
		return ""
	}
	return "; is the broker up?"
}

// partitions returns the partition ids of topic, sorted.
func (a *admin) partitions(ctx context.Context, topic string) ([]int, error) {
	md, err := a.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s from %v: %w%s", topic, a.brokers, err, upHint(ctx, err))
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
			return nil, missingTopic(topic)
		}
		if t.Error != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, t.Error)
		}
		ps := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ps[i] = p.ID
		}
		sort.Ints(ps)
		return ps, nil
	}
	return nil, missingTopic(topic)
}

// missingTopic says what to do about a topic the broker does not have: a
// chat.* topic is created by `chatctl topics create`; another name is
// likely a typo.
func missingTopic(topic string) error {
	if slices.Contains(chatTopics, topic) {
		return fmt.Errorf("topic %s does not exist; create the topics with `chatctl topics create`", topic)
	}
	return fmt.Errorf("topic %s does not exist, and is none of chatd's (%s); check the name", topic, strings.Join(chatTopics, ", "))
}

// bounds are the first and next offsets of a partition: it holds records
// at offsets in [first, end).
type bounds struct{ first, end int64 }

// bounds returns the log start and end of every partition of topic.
func (a *admin) bounds(ctx context.Context, topic string, parts []int) (map[int]bounds, error) {
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	resp, err := a.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	out := make(map[int]bounds, len(parts))
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = bounds{first: po.FirstOffset, end: po.LastOffset}
	}
	for _, p := range parts {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("offsets of %s/%d: missing from the broker's answer", topic, p)
		}
	}
	return out, nil
}

// offsetsAt returns, per partition, the first offset whose record time is
// at or after t; a partition with no such record gets its end.
func (a *admin) offsetsAt(ctx context.Context, topic string, parts []int, t time.Time) (map[int]int64, error) {
	b, err := a.bounds(ctx, topic, parts)
	if err != nil {
		return nil, err
	}
	// Kafka takes a time as milliseconds since 1970, and a negative one as
	// the name of an offset (-1 the end, -2 the start, -3 the record of
	// the latest time) or refuses it; kafka-go counts it in nanoseconds
	// first, which overflow past 2262. A time outside is asked as the
	// nearest within, which the same records are at or after.
	if lo := time.UnixMilli(0); t.Before(lo) {
		t = lo
	}
	if hi := time.Unix(0, math.MaxInt64); t.After(hi) {
		t = hi
	}
	reqs := make([]kafka.OffsetRequest, len(parts))
	for i, p := range parts {
		reqs[i] = kafka.TimeOffsetOf(p, t)
	}
	resp, err := a.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s at %v: %w", topic, t, err)
	}
	out := make(map[int]int64, len(parts))
	for _, p := range parts {
		out[p] = b[p].end
	}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d at %v: %w", topic, po.Partition, t, po.Error)
		}
		for off := range po.Offsets {
			if off >= 0 && off < out[po.Partition] {
				out[po.Partition] = off
			}
		}
	}
	return out, nil
}

// groupInfo is what the broker says about a consumer group.
type groupInfo struct {
	ID      string
	State   string
	Members []kafka.DescribeGroupsResponseMember
}

func (a *admin) describeGroup(ctx context.Context, id string) (groupInfo, error) {
	resp, err := a.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{id}})
	if err != nil {
		return groupInfo{}, fmt.Errorf("describe consumer group %s: %w", id, err)
	}
	for _, g := range resp.Groups {
		if g.GroupID == id {
			if g.Error != nil && !errors.Is(g.Error, kafka.GroupIdNotFound) {
				return groupInfo{}, fmt.Errorf("describe consumer group %s: %w", id, g.Error)
			}
			return groupInfo{ID: id, State: g.GroupState, Members: g.Members}, nil
		}
	}
	return groupInfo{ID: id, State: "Dead"}, nil
}

// groups lists the consumer groups the cluster knows, sorted.
func (a *admin) groups(ctx context.Context) ([]string, error) {
	// ListGroups asks each broker of the cluster; kafka-go asks none, and
	// answers an empty list, when it cannot learn the cluster. Learn it
	// first, so that a broker that is down is an error, not a cluster
	// without groups.
	md, err := a.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return nil, fmt.Errorf("list consumer groups from %v: %w%s", a.brokers, err, upHint(ctx, err))
	}
	if len(md.Brokers) == 0 {
		return nil, fmt.Errorf("list consumer groups from %v: the cluster named no broker", a.brokers)
	}
	resp, err := a.client.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		return nil, fmt.Errorf("list consumer groups: %w", err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("list consumer groups: %w", resp.Error)
	}
	out := make([]string, 0, len(resp.Groups))
	for _, g := range resp.Groups {
		out = append(out, g.GroupID)
	}
	sort.Strings(out)
	return out, nil
}

// committed returns a group's committed offsets on topic; a partition
// without a commit is absent.
func (a *admin) committed(ctx context.Context, group, topic string, parts []int) (map[int]int64, error) {
	resp, err := a.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s on %s: %w", group, topic, err)
	}
	out := map[int]int64{}
	if errors.Is(resp.Error, kafka.GroupIdNotFound) {
		return out, nil // never committed
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("committed offsets of %s on %s: %w", group, topic, resp.Error)
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("committed offset of %s on %s/%d: %w", group, topic, p.Partition, p.Error)
		}
		if p.CommittedOffset >= 0 {
			out[p.Partition] = p.CommittedOffset
		}
	}
	return out, nil
}

// commit stores offsets for a group that has no active member (a "simple"
// commit, generation -1, as kafka-consumer-groups does).
func (a *admin) commit(ctx context.Context, group, topic string, offsets map[int]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	oc := make([]kafka.OffsetCommit, 0, len(offsets))
	for p, o := range offsets {
		oc = append(oc, kafka.OffsetCommit{Partition: p, Offset: o})
	}
	resp, err := a.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: oc}})
	if err != nil {
		return fmt.Errorf("commit offsets of %s on %s: %w", group, topic, err)
	}
	for _, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return fmt.Errorf("commit offset of %s on %s/%d: %w (is the group active? stop its consumers first)", group, topic, p.Partition, p.Error)
			}
		}
	}
	return nil
}

// topicsOf returns the topics a group has committed offsets on, among
// candidates.
func (a *admin) topicsOf(ctx context.Context, group string, candidates []string) ([]string, error) {
	var out []string
	for _, t := range candidates {
		parts, err := a.partitions(ctx, t)
		if err != nil {
			continue
		}
		c, err := a.committed(ctx, group, t, parts)
		if err != nil {
			return nil, err
		}
		if len(c) > 0 {
			out = append(out, t)
		}
	}
	return out, nil
}
