package producers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// A lane sends the records of one partition of one topic, one produce
// request at a time: a record is sent at once when no request of its
// partition is in flight, else it joins the records that wait for the
// request in flight to be answered, and they leave together in the next.
// So a quiet partition adds no linger to a send, and a busy one gathers as
// many records a request as arrive during a round trip; the records of a
// partition reach the log in the order they were handed over.
type lane struct {
	topic string
	part  int
	// id is used by the lane's sender goroutine only (one at a time).
	id    identity
	hasID bool
	// last is the offset of the lane's newest record, as its sender
	// goroutine saw it appended (hasLast once it has).
	last    int64
	hasLast bool

	mu      sync.Mutex
	waiting []*job
	busy    bool // a goroutine is sending this lane's requests
}

// job is the records one call hands to one lane. Its records go in one
// request, so they get consecutive offsets.
type job struct {
	msgs  []kafka.Message
	bytes int64
	done  chan struct{}
	base  int64 // the first record's offset, once done without err
	err   error
}

func newJob(msgs []kafka.Message) *job {
	j := &job{msgs: msgs, done: make(chan struct{})}
	for _, m := range msgs {
		j.bytes += recordBytes(&m)
	}
	return j
}

// recordBytes is what m takes in a request, framing included.
func recordBytes(m *kafka.Message) int64 {
	n := int64(len(m.Key) + len(m.Value) + recordOverhead)
	for _, h := range m.Headers {
		n += int64(len(h.Key) + len(h.Value) + 10)
	}
	return n
}

// chunk cuts idx (indexes into recs, of one partition) into runs that fit
// one request each, in order: a call may hand a partition more than the
// broker takes in one request (a projector appending again thousands of
// cursors), and that request would be refused for good.
func (p *Producer) chunk(recs []kafka.Message, idx []int) [][]int {
	var out [][]int
	start, bytes := 0, int64(0)
	for k, i := range idx {
		b := recordBytes(&recs[i])
		if k > start && (k-start >= p.cfg.BatchSize || bytes+b > p.cfg.BatchBytes) {
			out = append(out, idx[start:k])
			start, bytes = k, 0
		}
		bytes += b
	}
	return append(out, idx[start:])
}

// lane returns the lane of (topic, part), made on first use.
func (p *Producer) lane(topic string, part int) *lane {
	key := laneKey{topic, part}
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.lanes[key]
	if !ok {
		l = &lane{topic: topic, part: part}
		p.lanes[key] = l
	}
	return l
}

type laneKey struct {
	topic string
	part  int
}

// enqueue hands j to l and starts l's sender if none runs.
func (p *Producer) enqueue(l *lane, j *job) {
	l.mu.Lock()
	l.waiting = append(l.waiting, j)
	start := !l.busy
	l.busy = true
	l.mu.Unlock()
	if start {
		p.senders.Add(1)
		go p.drain(l)
	}
}

// withdraw takes j back when it still waits for a request, and reports
// whether it did: a job already sent (or answered) stays.
func (l *lane) withdraw(j *job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.waiting {
		if w == j {
			l.waiting = append(l.waiting[:i:i], l.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// drain sends l's waiting jobs, as many a request as the batch limits let
// (at least one job), until none waits.
func (p *Producer) drain(l *lane) {
	defer p.senders.Done()
	for {
		l.mu.Lock()
		n, recs, bytes := 0, 0, int64(0)
		for n < len(l.waiting) {
			j := l.waiting[n]
			if n > 0 && (recs+len(j.msgs) > p.cfg.BatchSize || bytes+j.bytes > p.cfg.BatchBytes) {
				break
			}
			n, recs, bytes = n+1, recs+len(j.msgs), bytes+j.bytes
		}
		if n == 0 {
			l.waiting, l.busy = nil, false
			l.mu.Unlock()
			return
		}
		jobs := l.waiting[:n:n]
		l.waiting = l.waiting[n:]
		l.mu.Unlock()

		p.sendJobs(l, jobs, recs)
	}
}

// sendJobs sends jobs in one request. A broker that takes less per request
// than the batch limits assumed (a topic's smaller max.message.bytes)
// refuses it as too large: the jobs then go one request each, in order.
func (p *Producer) sendJobs(l *lane, jobs []*job, recs int) {
	all := make([]kafka.Message, 0, recs)
	for _, j := range jobs {
		all = append(all, j.msgs...)
	}
	base, err := p.produce(l, all)
	if len(jobs) > 1 && errors.Is(err, kafka.MessageSizeTooLarge) {
		for _, j := range jobs {
			p.sendJobs(l, []*job{j}, len(j.msgs))
		}
		return
	}
	if err == nil {
		p.appended(l, base, base+int64(len(all))-1)
	}
	for _, j := range jobs {
		j.base, j.err = base, err
		base += int64(len(j.msgs))
		close(j.done)
	}
}

// produce sends one request, retrying errors the broker calls temporary
// (a leader moving, say) with back-off, and returns the first record's
// offset. Every attempt carries the same producer id, epoch and sequence,
// so a retry of a request the broker appended but whose answer was lost
// is not appended again: the broker answers with the first offsets. When
// the lane gives up, it moves to the next epoch, so that the request it
// gave up on, should it still arrive, is refused rather than appended
// after later ones.
func (p *Producer) produce(l *lane, msgs []kafka.Message) (int64, error) {
	var err error
	var batch []byte
	for attempt := 0; attempt < p.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(min(backoffMin<<(attempt-1), backoffMax))
		}
		if !l.hasID {
			if err = p.identify(l); err != nil {
				if temporary(err) {
					continue
				}
				break
			}
			batch = nil
		}
		if batch == nil {
			batch = encodeBatch(msgs, l.id)
		}
		var base int64
		if base, err = p.produceOnce(l, batch); err == nil {
			l.id.seq = nextSequence(l.id.seq, len(msgs))
			return base, nil
		}
		if errors.Is(err, kafka.OutOfOrderSequenceNumber) || errors.Is(err, kafka.UnknownProducerId) {
			// The broker has no state of this lane's sequence (its state
			// was lost, the partition recreated): this batch was not
			// appended; it goes again from a new epoch.
			l.bumpEpoch()
			batch = nil
			continue
		}
		if !temporary(err) {
			break
		}
	}
	l.bumpEpoch()
	return 0, err
}

// identify gets the lane a producer id. Each lane has its own: a broker
// may keep one epoch per producer id, and a lane moves its epoch alone.
func (p *Producer) identify(l *lane) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
	defer cancel()
	res, err := p.client.InitProducerID(ctx, &kafka.InitProducerIDRequest{})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		return fmt.Errorf("get a producer id: %w", err)
	}
	l.id, l.hasID = identity{pid: int64(res.Producer.ProducerID), epoch: int16(res.Producer.ProducerEpoch)}, true
	return nil
}

// bumpEpoch starts the lane's next epoch at sequence 0; past the last
// epoch it asks for a new producer id.
func (l *lane) bumpEpoch() {
	if !l.hasID || l.id.epoch == math.MaxInt16 {
		l.hasID = false
		return
	}
	l.id.epoch++
	l.id.seq = 0
}

// nextSequence is the sequence after a batch of n records at seq; it wraps
// at the largest int32, as the broker's does.
func nextSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}

const (
	backoffMin = 100 * time.Millisecond
	backoffMax = time.Second
)

func (p *Producer) produceOnce(l *lane, batch []byte) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
	defer cancel()
	res, err := p.client.RawProduce(ctx, &kafka.RawProduceRequest{
		Topic:        l.topic,
		Partition:    l.part,
		RequiredAcks: kafka.RequireAll,
		RawRecords:   protocol.RawRecordSet{Reader: bytes.NewReader(batch)},
	})
	if err != nil {
		return 0, err
	}
	if res.Error != nil {
		return 0, res.Error
	}
	for i, rerr := range res.RecordErrors {
		return 0, fmt.Errorf("record %d: %w", i, rerr)
	}
	return res.BaseOffset, nil
}

// temporary reports whether a produce that failed with err may succeed if
// sent again: the errors kafka-go's own Writer retries. A retry carries the
// batch's producer id and sequence, so the broker does not append what it
// already has.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	if errors.As(err, &t) && t.Temporary() {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
