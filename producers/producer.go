package producers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// Config of a Producer.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string

	// BatchTimeout is how long a partial batch waits for more records.
	// Default 1ms (kafka-go's own default is 1s).
	BatchTimeout time.Duration

	// BatchSize is the most records in one produce request per partition.
	// Default 1000.
	BatchSize int

	// BatchBytes is the most bytes in one produce request per partition.
	// Default 1 MiB, Kafka's default max.message.bytes.
	BatchBytes int64

	// WriteTimeout bounds one produce request. Default 10s.
	WriteTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.BatchTimeout == 0 {
		c.BatchTimeout = time.Millisecond
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 1 << 20
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("producers: no brokers configured; set CHAT_KAFKA_BROKERS (host:port,...)")
	}
	if c.BatchTimeout < 0 || c.BatchSize < 0 || c.BatchBytes < 0 || c.WriteTimeout < 0 {
		return errors.New("producers: batch and timeout settings must not be negative")
	}
	return nil
}

// Producer sends chat.* events.
type Producer struct {
	w      *kafka.Writer
	client *kafka.Client

	mu    sync.Mutex
	parts map[string]int // partition counts by topic
	heads map[int]int64  // per partition of chat.messages, the newest offset known to exist
}

// sent travels in kafka.Message.WriterData so that the writer's Completion
// hook can hand the record's position back to the sender.
type sent struct {
	partition int
	offset    int64
}

// New returns a Producer. It does not dial until the first send.
func New(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	addr := kafka.TCP(cfg.Brokers...)
	w := &kafka.Writer{
		Addr:         addr,
		Balancer:     topics.Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: cfg.BatchTimeout,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   cfg.BatchBytes,
		WriteTimeout: cfg.WriteTimeout,
		MaxAttempts:  3,
		Completion: func(msgs []kafka.Message, err error) {
			if err != nil {
				return
			}
			for i := range msgs {
				if s, ok := msgs[i].WriterData.(*sent); ok {
					s.partition, s.offset = msgs[i].Partition, msgs[i].Offset
				}
			}
		},
	}
	return &Producer{
		w:      w,
		client: &kafka.Client{Addr: addr, Timeout: cfg.WriteTimeout},
		parts:  map[string]int{},
		heads:  map[int]int64{},
	}, nil
}

// SendMessage appends m to chat.messages and returns its msgid.
func (p *Producer) SendMessage(ctx context.Context, m *schema.Message) (int64, error) {
	ids, err := p.SendMessages(ctx, []schema.Message{*m})
	if err != nil {
		return -1, err
	}
	return ids[0], nil
}

// SendMessages appends ms to chat.messages in one call and returns their
// msgids in the same order. On error none of the msgids is known; a retry
// with the same client_msg_ids is deduplicated downstream.
func (p *Producer) SendMessages(ctx context.Context, ms []schema.Message) ([]int64, error) {
	recs := make([]kafka.Message, len(ms))
	slots := make([]sent, len(ms))
	for i := range ms {
		if err := checkMessage(&ms[i]); err != nil {
			return nil, err
		}
		slots[i].offset = -1
		recs[i] = kafka.Message{
			Topic:      topics.Messages,
			Key:        schema.MessageKey(ms[i].Gid),
			Value:      schema.AppendMessage(nil, &ms[i]),
			Time:       time.UnixMilli(ms[i].SentAt),
			WriterData: &slots[i],
		}
	}
	if err := p.w.WriteMessages(ctx, recs...); err != nil {
		return nil, fmt.Errorf("producers: send to %s: %w", topics.Messages, err)
	}
	ids := make([]int64, len(ms))
	for i := range slots {
		if slots[i].offset < 0 {
			return nil, fmt.Errorf("producers: send to %s: broker returned no offset", topics.Messages)
		}
		ids[i] = slots[i].offset
		p.sawHead(slots[i].partition, slots[i].offset)
	}
	return ids, nil
}

// SendAcks appends delivery-cursor events to chat.acks.
func (p *Producer) SendAcks(ctx context.Context, acks ...schema.Ack) error {
	recs := make([]kafka.Message, len(acks))
	for i := range acks {
		recs[i] = kafka.Message{Topic: topics.Acks, Key: schema.MemberKey(acks[i].Gid, acks[i].Uid),
			Value: schema.AppendAck(nil, &acks[i])}
	}
	return p.write(ctx, topics.Acks, recs)
}

// SendReceipts appends read-cursor events to chat.receipts.
func (p *Producer) SendReceipts(ctx context.Context, rs ...schema.Receipt) error {
	recs := make([]kafka.Message, len(rs))
	for i := range rs {
		recs[i] = kafka.Message{Topic: topics.Receipts, Key: schema.MemberKey(rs[i].Gid, rs[i].Uid),
			Value: schema.AppendReceipt(nil, &rs[i])}
	}
	return p.write(ctx, topics.Receipts, recs)
}

// SendMembers appends membership events to chat.members as they are; see
// ChangeMember for the usual way, which fills in the position.
func (p *Producer) SendMembers(ctx context.Context, ms ...schema.Member) error {
	recs := make([]kafka.Message, len(ms))
	for i := range ms {
		recs[i] = kafka.Message{Topic: topics.Members, Key: schema.MemberKey(ms[i].Gid, ms[i].Uid),
			Value: schema.AppendMember(nil, &ms[i])}
	}
	return p.write(ctx, topics.Members, recs)
}

// ChangeMember records a join or leave of uid in gid at the group's current
// position (Head), so that a joiner starts at the group head and a leaver
// sees nothing sent after the change.
func (p *Producer) ChangeMember(ctx context.Context, gid, uid string, op schema.MemberOp, by string) (schema.Member, error) {
	for _, id := range []string{gid, uid} {
		if err := schema.ValidID(id); err != nil {
			return schema.Member{}, fmt.Errorf("producers: %w", err)
		}
	}
	pos, err := p.Head(ctx, gid)
	if err != nil {
		return schema.Member{}, err
	}
	m := schema.Member{Gid: gid, Uid: uid, Op: op, Pos: pos, At: time.Now().UnixMilli(), By: by}
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
	part := topics.Partition(gid, n)
	resp, err := p.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topics.Messages: {kafka.LastOffsetOf(part)}},
	})
	if err != nil {
		return -1, fmt.Errorf("producers: head of %s/%d: %w", topics.Messages, part, err)
	}
	for _, po := range resp.Topics[topics.Messages] {
		if po.Partition == part {
			if po.Error != nil {
				return -1, fmt.Errorf("producers: head of %s/%d: %w", topics.Messages, part, po.Error)
			}
			p.sawHead(part, po.LastOffset-1)
			return po.LastOffset - 1, nil
		}
	}
	return -1, fmt.Errorf("producers: head of %s/%d: partition missing from the answer", topics.Messages, part)
}

// HeadAtLeast returns a head of gid's partition of chat.messages that is
// at least upto when the log has reached upto, without asking the broker
// when this producer already knows: from its own sends and earlier heads
// (a log head never goes back). Otherwise it returns Head. Gateways check
// acks against it: the acks of a busy group arrive before the persister has
// moved the group's head in Redis, and a broker round trip for each of them
// cost more than the ack.
func (p *Producer) HeadAtLeast(ctx context.Context, gid string, upto int64) (int64, error) {
	n, err := p.partitions(ctx, topics.Messages)
	if err != nil {
		return -1, err
	}
	p.mu.Lock()
	h, ok := p.heads[topics.Partition(gid, n)]
	p.mu.Unlock()
	if ok && h >= upto {
		return h, nil
	}
	return p.Head(ctx, gid)
}

// sawHead notes that offset exists in partition part of chat.messages.
func (p *Producer) sawHead(part int, offset int64) {
	p.mu.Lock()
	if h, ok := p.heads[part]; !ok || offset > h {
		p.heads[part] = offset
	}
	p.mu.Unlock()
}

// DeadLetter copies a record no consumer could use to chat.deadletter, with
// where it came from and why in its headers.
func (p *Producer) DeadLetter(ctx context.Context, rec kafka.Message, consumer string, cause error) error {
	hdr := []kafka.Header{
		{Key: "source.topic", Value: []byte(rec.Topic)},
		{Key: "source.partition", Value: fmt.Appendf(nil, "%d", rec.Partition)},
		{Key: "source.offset", Value: fmt.Appendf(nil, "%d", rec.Offset)},
		{Key: "consumer", Value: []byte(consumer)},
		{Key: "error", Value: []byte(cause.Error())},
	}
	out := kafka.Message{Topic: topics.DeadLetter, Key: rec.Key, Value: rec.Value, Headers: append(hdr, rec.Headers...)}
	return p.write(ctx, topics.DeadLetter, []kafka.Message{out})
}

// Close flushes pending batches and releases connections.
func (p *Producer) Close() error { return p.w.Close() }

func (p *Producer) write(ctx context.Context, topic string, recs []kafka.Message) error {
	if err := p.w.WriteMessages(ctx, recs...); err != nil {
		return fmt.Errorf("producers: send to %s: %w", topic, err)
	}
	return nil
}

func (p *Producer) partitions(ctx context.Context, topic string) (int, error) {
	p.mu.Lock()
	n := p.parts[topic]
	p.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	md, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
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

func checkMessage(m *schema.Message) error {
	for _, f := range []struct{ name, v string }{{"gid", m.Gid}, {"sender", m.Sender}} {
		if err := schema.ValidID(f.v); err != nil {
			return fmt.Errorf("producers: message %s: %w", f.name, err)
		}
	}
	if m.ClientMsgID != "" {
		if err := schema.ValidID(m.ClientMsgID); err != nil {
			return fmt.Errorf("producers: message client_msg_id: %w", err)
		}
	}
	if len(m.Body) > schema.MaxBodyLen {
		return fmt.Errorf("producers: message body is %d bytes, limit %d", len(m.Body), schema.MaxBodyLen)
	}
	return nil
}
