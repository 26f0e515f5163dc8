package producers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// Join records that uid joined gid at the group's current position (Head):
// the joiner starts at the group's head. by names who made the change.
func (p *Producer) Join(ctx context.Context, gid, uid, by string) (schema.Member, error) {
	return p.changeMember(ctx, schema.Member{Gid: gid, Uid: uid, Op: schema.OpJoin, By: by})
}

// JoinAll records that each of uids joined gid at the group's current
// position, read once for all of them, in one write (produce requests of
// the producer's batch size): a group of 10,000 members is created with a
// few round trips to the broker, not two for each member. by names who
// made the change. On an error none, some or all of the joins may be
// written, as with Join.
func (p *Producer) JoinAll(ctx context.Context, gid string, uids []string, by string) ([]schema.Member, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	ms := make([]schema.Member, len(uids))
	for i, uid := range uids {
		for _, id := range []string{gid, uid} {
			if err := schema.ValidID(id); err != nil {
				return nil, fmt.Errorf("producers: %w", err)
			}
		}
		ms[i] = schema.Member{Gid: gid, Uid: uid, Op: schema.OpJoin, By: by}
	}
	pos, err := p.Head(ctx, gid)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	for i := range ms {
		ms[i].Pos, ms[i].At = pos, now
	}
	return ms, p.SendMembers(ctx, ms...)
}

// Leave records that uid left gid at the group's current position (Head):
// the leaver sees nothing sent after it. joined is the position of the join
// the leave ends (store.Membership.JoinedAt); the record carries it, so the
// member's stretch survives compaction of their join.
func (p *Producer) Leave(ctx context.Context, gid, uid string, joined int64, by string) (schema.Member, error) {
	return p.changeMember(ctx, schema.Member{Gid: gid, Uid: uid, Op: schema.OpLeave, By: by, HasJoined: true, Joined: joined})
}

// Leaving records that a leave of uid from gid (the stretch that began at
// joined) is about to be written: the fan-out pushes nothing of gid after
// the group's current position to uid from the moment it reads it. Remove
// writes it; it changes no membership.
func (p *Producer) Leaving(ctx context.Context, gid, uid string, joined int64, by string) (schema.Member, error) {
	return p.changeMember(ctx, schema.Member{Gid: gid, Uid: uid, Op: schema.OpLeaving, By: by, HasJoined: true, Joined: joined})
}

// SendGate is what Remove needs of the gateways' send claims
// (store.Redis).
type SendGate interface {
	// MarkRemoving refuses the sends of uid to gid (a member since joined)
	// claimed from now on, for hold, on behalf of the removal token, and
	// returns how many claimed before are still being produced. It fails
	// while another removal of the stretch is under way.
	MarkRemoving(ctx context.Context, gid, uid string, joined int64, token string, hold time.Duration) (int, error)
	// WaitSends waits, at most wait, until no send of uid to gid is being
	// produced, and returns how many still are.
	WaitSends(ctx context.Context, gid, uid string, wait time.Duration) (int, error)
	// EndRemoving drops the note of MarkRemoving when the removal fails.
	EndRemoving(ctx context.Context, gid, uid, token string) error
}

// ErrLeaveUnfinished marks the error of a Remove that failed after it
// wrote its Leaving: the member gets no pushes of the group until a Remove
// of them succeeds.
var ErrLeaveUnfinished = errors.New("the leave was not written")

// Remove writes the leave of uid from gid, a member since joined, so that
// the leaver sees nothing sent after their leave and sends nothing past
// it. A leave's position is the group's head when it is written, and
// neither the sends nor the fan-out order themselves against a record of
// another topic, so before it reads the head Remove
//
//   - refuses the member's new sends and waits, at most wait, for those
//     being produced (gate; nil: no gateway claims to wait for), whose
//     messages then lie at or before the leave;
//   - writes a Leaving record, after which the fan-out holds back from
//     uid every message past the head read for it: a message past the
//     leave is written after the Leaving, read by the fan-out after that
//     again, and the fan-out catches up with chat.members before it pushes
//     (messages between the two positions stay to be pulled).
//
// The refusal holds for hold and wait together, or until the caller notes
// the leave (store.Redis.MarkLeaving drops it); a Remove that fails drops
// it at once. It returns the leave written and how many sends were still
// being produced when the wait ended (their messages may lie past the
// leave). An error after the Leaving is ErrLeaveUnfinished: the caller
// says to retry, as the member gets no pushes of the group until a Remove
// of them succeeds.
func (p *Producer) Remove(ctx context.Context, gid, uid string, joined int64, by string, gate SendGate, hold, wait time.Duration) (ev schema.Member, pending int, err error) {
	if gate != nil {
		token := strconv.FormatUint(rand.Uint64(), 36)
		if pending, err = gate.MarkRemoving(ctx, gid, uid, joined, token, hold+wait); err != nil {
			return schema.Member{}, 0, err
		}
		defer func() {
			if err != nil {
				if eerr := gate.EndRemoving(context.WithoutCancel(ctx), gid, uid, token); eerr != nil {
					err = errors.Join(err, eerr)
				}
			}
		}()
	}
	if _, err := p.Leaving(ctx, gid, uid, joined, by); err != nil {
		return schema.Member{}, 0, err
	}
	if pending > 0 {
		if pending, err = gate.WaitSends(ctx, gid, uid, wait); err != nil {
			return schema.Member{}, 0, fmt.Errorf("%w: %w", ErrLeaveUnfinished, err)
		}
	}
	if ev, err = p.Leave(ctx, gid, uid, joined, by); err != nil {
		return schema.Member{}, 0, fmt.Errorf("%w: %w", ErrLeaveUnfinished, err)
	}
	return ev, pending, nil
}

func (p *Producer) changeMember(ctx context.Context, m schema.Member) (schema.Member, error) {
	for _, id := range []string{m.Gid, m.Uid} {
		if err := schema.ValidID(id); err != nil {
			return schema.Member{}, fmt.Errorf("producers: %w", err)
		}
	}
	pos, err := p.Head(ctx, m.Gid)
	if err != nil {
		return schema.Member{}, err
	}
	if m.HasJoined && (m.Joined < -1 || m.Joined > pos) {
		return schema.Member{}, fmt.Errorf("producers: %s leaving %s: their join at %d is outside -1 to the group's head %d; "+
			"the membership store is ahead of %s (was the topic recreated?): rebuild it with `chatctl rebuild members`",
			m.Uid, m.Gid, m.Joined, pos, topics.Messages)
	}
	m.Pos, m.At = pos, time.Now().UnixMilli()
	return m, p.SendMembers(ctx, m)
}

// Head returns the offset of the newest record in gid's partition of
// chat.messages (-1 when it is empty): every message of gid sent before the
// call has a msgid <= Head.
func (p *Producer) Head(ctx context.Context, gid string) (int64, error) {
	n, err := p.partitions(ctx, topics.Messages)
	if err != nil {
		return -1, err
	}
	return p.headOf(ctx, topics.Partition(gid, n))
}

// headOf asks the broker for the head of partition part of chat.messages.
func (p *Producer) headOf(ctx context.Context, part int) (int64, error) {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topics.Messages: {kafka.LastOffsetOf(part)}}}
	var resp *kafka.ListOffsetsResponse
	err := p.again(func() (err error) { resp, err = p.client.ListOffsets(ctx, req); return err })
	if err != nil {
		return -1, fmt.Errorf("producers: head of %s/%d: %w", topics.Messages, part, err)
	}
	for _, po := range resp.Topics[topics.Messages] {
		if po.Partition == part {
			if po.Error != nil {
				return -1, fmt.Errorf("producers: head of %s/%d: %w", topics.Messages, part, po.Error)
			}
			p.brokerHead(part, po.LastOffset-1)
			return po.LastOffset - 1, nil
		}
	}
	return -1, fmt.Errorf("producers: head of %s/%d: partition missing from the answer", topics.Messages, part)
}

// appended notes that a request of lane l got offsets first to last.
// Within a lane they only grow while the log lives: an offset handed out
// again means the log went back (a broker that lost its unsynced tail, the
// topic recreated), and what this producer knew of the partition's old log
// (its head, the keys of its batches, its start) would answer for records
// that are not there, or that are another group's now.
func (p *Producer) appended(l *lane, first, last int64) {
	if l.topic != topics.Messages {
		return
	}
	back := l.hasLast && first <= l.last
	l.last, l.hasLast = last, true
	p.mu.Lock()
	if h, ok := p.heads[l.part]; back || !ok || last > h {
		p.heads[l.part] = last
	}
	if back {
		delete(p.keys, l.part)
	}
	p.mu.Unlock()
}

// brokerHead notes the head the broker reported for partition part of
// chat.messages. One below what this producer knew means the log went back
// (see appended), or a send appended since the broker answered: either
// way the lower head is safe to keep, as it only sends the next question
// about a higher msgid to the broker.
func (p *Producer) brokerHead(part int, head int64) {
	p.mu.Lock()
	if h, ok := p.heads[part]; !ok || head != h {
		p.heads[part] = head
		if ok && head < h {
			delete(p.keys, part)
		}
	}
	p.mu.Unlock()
}

// Partition returns the partition of topic that gid's records go to.
func (p *Producer) Partition(ctx context.Context, topic, gid string) (int, error) {
	n, err := p.partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	return topics.Partition(gid, n), nil
}

// Partitions returns the partition count of topic.
func (p *Producer) Partitions(ctx context.Context, topic string) (int, error) {
	return p.partitions(ctx, topic)
}

func (p *Producer) partitions(ctx context.Context, topic string) (int, error) {
	p.mu.Lock()
	n := p.parts[topic]
	p.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	var md *kafka.MetadataResponse
	err := p.again(func() (err error) {
		md, err = p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("producers: metadata of %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name == topic && t.Error == nil && len(t.Partitions) > 0 {
			p.mu.Lock()
			p.parts[topic] = len(t.Partitions)
			p.mu.Unlock()
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("producers: topic %s not found; run chatd once or `chatctl topics create`", topic)
}

// again runs call, and once more after each temporary error, up to three
// times, dropping the pooled connections first: connections to a broker
// that restarted each answer EOF once.
func (p *Producer) again(call func() error) error {
	err := call()
	for i := 0; i < 2 && err != nil && temporary(err); i++ {
		p.transport.CloseIdleConnections()
		err = call()
	}
	return err
}
