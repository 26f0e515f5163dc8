package producers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// Config of a Producer.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Security is how connections to them are made. Default plaintext.
	Security topics.Security

	// BatchSize is the most records in one produce request. Default 1000.
	BatchSize int

	// BatchBytes is the most bytes of records (keys, values and their
	// framing) in one produce request; a single larger send still goes,
	// alone. Default MaxBatchBytes less the batch header: what Kafka's
	// default max.message.bytes lets one request carry.
	BatchBytes int64

	// WriteTimeout bounds one produce request. Default 10s.
	WriteTimeout time.Duration

	// MaxAttempts is how many times a produce request is sent when the
	// broker answers with a temporary error. Default 3.
	MaxAttempts int

	// Observe, when set, is told how long each send took, from the call
	// to the broker's acknowledgement (the wait for a request in flight
	// included), by topic.
	Observe func(topic string, d time.Duration)
}

func (c *Config) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = MaxBatchBytes - batchOverhead
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
}

// Sizes of what the broker takes. A produce request's record batch may be
// at most max.message.bytes (Kafka's default, and the embedded broker's,
// is MaxBatchBytes): a 61-byte header and the records, each framed in up
// to 36 bytes besides its key, value and headers.
const (
	MaxBatchBytes  = 1048588
	batchOverhead  = 61
	recordOverhead = 36
	// MaxBody is the largest message body whose record fits a batch with
	// ids of the longest allowed size, rounded down to 1 MiB less 1 KiB.
	MaxBody = 1<<20 - 1<<10
)

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("producers: no brokers configured; set CHAT_KAFKA_BROKERS (host:port,...)")
	}
	if c.BatchSize < 0 || c.BatchBytes < 0 || c.WriteTimeout < 0 || c.MaxAttempts < 0 {
		return errors.New("producers: batch, timeout and attempt settings must not be negative")
	}
	return nil
}

// Producer sends chat.* events. Each partition of a topic has a lane (see
// lane): a send goes at once when its partition has no request in flight,
// else with the sends that queued behind that request.
type Producer struct {
	cfg       Config
	client    *kafka.Client
	transport *kafka.Transport // this producer's connections
	calls     sync.WaitGroup   // sends under way
	senders   sync.WaitGroup   // lanes' drain goroutines

	mu     sync.Mutex
	closed bool
	lanes  map[laneKey]*lane
	parts  map[string]int     // partition counts by topic
	heads  map[int]int64      // per partition of chat.messages, the newest offset known to exist
	keys   map[int]*partKeys  // per partition of chat.messages, what IsMessageOf knows (see keys.go)
	reads  map[int]*headReads // per partition of chat.messages, HeadAtLeast's reads (see headread.go)
	// reading counts the head reads under way, which Close waits for.
	reading sync.WaitGroup
}

// ErrClosed is returned by sends after Close.
var ErrClosed = errors.New("producers: the producer is closed")

// New returns a Producer. It does not dial until the first send.
func New(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	t := cfg.Security.Transport()
	return &Producer{
		cfg:       cfg,
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: cfg.WriteTimeout, Transport: t},
		transport: t,
		lanes:     map[laneKey]*lane{},
		parts:     map[string]int{},
		heads:     map[int]int64{},
		keys:      map[int]*partKeys{},
		reads:     map[int]*headReads{},
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
	for i := range ms {
		if err := checkMessage(&ms[i]); err != nil {
			return nil, err
		}
		recs[i] = kafka.Message{
			Key:   schema.MessageKey(ms[i].Gid),
			Value: schema.AppendMessage(nil, &ms[i]),
			Time:  time.UnixMilli(ms[i].SentAt),
		}
	}
	ids, _, err := p.send(ctx, topics.Messages, recs)
	if err != nil {
		return nil, err
	}
	return ids, nil // their lanes noted the heads (see appended)
}

// SendAcks appends delivery-cursor events to chat.acks.
func (p *Producer) SendAcks(ctx context.Context, acks ...schema.Ack) error {
	recs := make([]kafka.Message, len(acks))
	for i := range acks {
		recs[i] = kafka.Message{Topic: topics.Acks, Key: schema.MemberKey(acks[i].Gid, acks[i].Uid),
			Value: schema.AppendAck(nil, &acks[i])}
		if _, err := schema.DecodeAck(recs[i].Value); err != nil {
			return fmt.Errorf("producers: ack %d would not decode: %w", i, err)
		}
	}
	return p.write(ctx, topics.Acks, recs)
}

// SendReceipts appends read-cursor events to chat.receipts.
func (p *Producer) SendReceipts(ctx context.Context, rs ...schema.Receipt) error {
	recs := make([]kafka.Message, len(rs))
	for i := range rs {
		recs[i] = kafka.Message{Topic: topics.Receipts, Key: schema.MemberKey(rs[i].Gid, rs[i].Uid),
			Value: schema.AppendReceipt(nil, &rs[i])}
		if _, err := schema.DecodeReceipt(recs[i].Value); err != nil {
			return fmt.Errorf("producers: receipt %d would not decode: %w", i, err)
		}
	}
	return p.write(ctx, topics.Receipts, recs)
}

// SendMembers appends membership events to chat.members as they are; see
// Join and Leave for the usual way, which fill in the position.
func (p *Producer) SendMembers(ctx context.Context, ms ...schema.Member) error {
	recs := make([]kafka.Message, len(ms))
	for i := range ms {
		recs[i] = kafka.Message{Topic: topics.Members, Key: schema.MemberKey(ms[i].Gid, ms[i].Uid),
			Value: schema.AppendMember(nil, &ms[i])}
		if _, err := schema.DecodeMember(recs[i].Value); err != nil {
			return fmt.Errorf("producers: member event %d would not decode: %w", i, err)
		}
	}
	return p.write(ctx, topics.Members, recs)
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
	key, value, headers := rec.Key, rec.Value, rec.Headers
	if size := len(key) + len(value) + headersSize(headers); size > maxDeadLetter {
		// A record near the broker's size limit would make a copy past it,
		// refused for good, and its partition would wait on it for ever:
		// keep the start of its key and value, and say so.
		hdr = append(hdr, kafka.Header{Key: "truncated.from", Value: fmt.Appendf(nil, "%d", size)})
		key, value, headers = key[:min(len(key), maxDeadLetter/4)], value[:min(len(value), maxDeadLetter/2)], nil
	}
	out := kafka.Message{Topic: topics.DeadLetter, Key: key, Value: value, Headers: append(hdr, headers...)}
	return p.write(ctx, topics.DeadLetter, []kafka.Message{out})
}

// maxDeadLetter is the most bytes of a poison record a dead-letter copy
// keeps whole: well within the broker's default limit of a record (1 MiB),
// with room for the copy's headers.
const maxDeadLetter = 512 << 10

func headersSize(hs []kafka.Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Close waits for the sends in flight and releases connections; sends
// after it fail with ErrClosed.
func (p *Producer) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.calls.Wait() // no lane is started after this
	p.senders.Wait()
	p.reading.Wait()
	p.transport.CloseIdleConnections()
	return nil
}

func (p *Producer) write(ctx context.Context, topic string, recs []kafka.Message) error {
	_, _, err := p.send(ctx, topic, recs)
	return err
}

// send appends recs to topic, each to the partition of the gid in its key,
// and returns their offsets and partitions. The records of one partition go
// in order, in one request when the batch limits let them.
func (p *Producer) send(ctx context.Context, topic string, recs []kafka.Message) (offsets []int64, parts []int, err error) {
	if p.cfg.Observe != nil {
		defer func(start time.Time) { p.cfg.Observe(topic, time.Since(start)) }(time.Now())
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("producers: send to %s: %w", topic, ErrClosed)
	}
	p.calls.Add(1)
	p.mu.Unlock()
	defer p.calls.Done()
	n, err := p.partitions(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	parts = make([]int, len(recs))
	byPart := map[int][]int{} // partition -> indexes into recs
	for i := range recs {
		parts[i] = topics.Partition(string(schema.GidOfKey(recs[i].Key)), n)
		byPart[parts[i]] = append(byPart[parts[i]], i)
	}
	type placed struct {
		l   *lane
		j   *job
		idx []int
	}
	jobs := make([]placed, 0, len(byPart))
	for part, all := range byPart {
		l := p.lane(topic, part)
		for _, idx := range p.chunk(recs, all) {
			msgs := make([]kafka.Message, len(idx))
			for k, i := range idx {
				msgs[k] = recs[i]
			}
			j := newJob(msgs)
			p.enqueue(l, j)
			jobs = append(jobs, placed{l, j, idx})
		}
	}
	offsets = make([]int64, len(recs))
	for k, pl := range jobs {
		select {
		case <-pl.j.done:
		case <-ctx.Done():
			// What still waits for its request is taken back: it would be
			// written long after the caller was told it failed, and its
			// resend written again.
			withdrawn := true
			for _, rest := range jobs[k:] {
				withdrawn = rest.l.withdraw(rest.j) && withdrawn
			}
			if withdrawn && k == 0 {
				return nil, nil, fmt.Errorf("producers: send to %s: %w (nothing was written)", topic, ctx.Err())
			}
			return nil, nil, fmt.Errorf("producers: send to %s: %w (the records may still be written)", topic, ctx.Err())
		}
		if pl.j.err != nil {
			return nil, nil, fmt.Errorf("producers: send to %s/%d: %w", topic, parts[pl.idx[0]], pl.j.err)
		}
		for k, i := range pl.idx {
			offsets[i] = pl.j.base + int64(k)
		}
	}
	return offsets, parts, nil
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
	if len(m.Body) > MaxBody {
		return fmt.Errorf("producers: message body is %d bytes, limit %d (what one Kafka record batch carries by default)", len(m.Body), MaxBody)
	}
	if !utf8.Valid(m.Body) {
		return errors.New("producers: message body is not valid UTF-8, which consumers refuse; send text")
	}
	return nil
}
