package producers

import (
	"context"
	"fmt"
	"time"

	"github.com/groupchat/chatd/topics"
)

// headGap is the least time between two reads of a partition's head by
// HeadAtLeast once one found an ask past the log's end, and between two
// reads of a partition's bounds (outOfRange). A member may ask past the
// end with every frame, and no message it has lies there: such asks wait
// for the next read, which all the asks of the meantime share.
const headGap = 50 * time.Millisecond

// headReads are HeadAtLeast's reads of the head of one partition of
// chat.messages. An ask is answered by a read that began after it, so
// that the head it gets is at least that of any record written before the
// ask; the asks made before a read begins share it.
type headReads struct {
	cur, next *headRead // the read under way (or about to begin), and the one asked for after it began
	began     time.Time // when the newest read began
	beyond    bool      // the newest read found an ask past the log's end: the next begins headGap after it
}

type headRead struct {
	begun bool  // p.mu
	want  int64 // the highest upto asked of it; p.mu
	done  chan struct{}
	head  int64
	err   error
}

// HeadAtLeast returns a head of gid's partition of chat.messages that is
// at least upto when the log has reached upto, without asking the broker
// when this producer already knows: from its own sends and earlier heads
// (a log head never goes back). Gateways check acks against it: the acks
// of a busy group arrive before the persister has moved the group's head
// in Redis, and a broker round trip for each of them cost more than the
// ack. Otherwise it returns the head read by the broker after the call,
// in a read shared with the other calls for the partition (see headReads),
// later when the last read found the log short of an upto (see headGap).
func (p *Producer) HeadAtLeast(ctx context.Context, gid string, upto int64) (int64, error) {
	n, err := p.partitions(ctx, topics.Messages)
	if err != nil {
		return -1, err
	}
	part := topics.Partition(gid, n)
	p.mu.Lock()
	if h, ok := p.heads[part]; ok && h >= upto {
		p.mu.Unlock()
		return h, nil
	}
	if p.closed { // Close waits for no read begun after it
		p.mu.Unlock()
		return p.headOf(ctx, part)
	}
	x := p.headRead(part, upto)
	p.mu.Unlock()
	select {
	case <-x.done:
		return x.head, x.err
	case <-ctx.Done():
		return -1, fmt.Errorf("producers: head of %s/%d: %w", topics.Messages, part, ctx.Err())
	}
}

// headRead returns the read of part's head that answers an ask for upto
// made now; p.mu held.
func (p *Producer) headRead(part int, upto int64) *headRead {
	r := p.reads[part]
	if r == nil {
		r = &headReads{}
		p.reads[part] = r
	}
	var x *headRead
	switch {
	case r.cur == nil:
		x = &headRead{done: make(chan struct{})}
		r.cur = x
		p.reading.Add(1)
		go p.readHead(part, r, x)
	case !r.cur.begun:
		x = r.cur
	default:
		if r.next == nil {
			r.next = &headRead{done: make(chan struct{})}
		}
		x = r.next
	}
	x.want = max(x.want, upto)
	return x
}

// readHead reads part's head for x, no sooner than headGap after the
// last read if that one found an ask past the log's end, then starts the
// next read if one was asked for meanwhile.
func (p *Producer) readHead(part int, r *headReads, x *headRead) {
	defer p.reading.Done()
	p.mu.Lock()
	var wait time.Duration
	if r.beyond {
		wait = time.Until(r.began.Add(headGap))
	}
	p.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
	}
	p.mu.Lock()
	x.begun, r.began = true, time.Now()
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
	x.head, x.err = p.headOf(ctx, part)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	r.beyond = x.err == nil && x.want > x.head
	close(x.done)
	r.cur, r.next = r.next, nil
	if r.cur != nil {
		p.reading.Add(1)
		go p.readHead(part, r, r.cur)
	}
}
