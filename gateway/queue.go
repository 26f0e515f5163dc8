package gateway

import "sync"

// outQueue is a connection's bounded outbound queue. It holds no memory and
// no goroutine while empty: the first item starts a writer goroutine, which
// writes until the queue is empty again and then ends. An idle connection
// so costs its reader alone.
type outQueue struct {
	mu       sync.Mutex
	items    []out
	limit    int  // items
	bytes    int  // of the items queued or being written
	maxB     int  // bytes queued or being written at most (but one item always fits); 0: no bound
	writing  bool // a writer goroutine runs
	stopped  bool // the connection ended: nothing more is queued or written
	flushing bool // the connection is ending: nothing more is queued, what is queued is written
	wg       sync.WaitGroup
}

// put queues o and starts a writer with write if none runs. It reports
// false when the queue is full (the caller cuts the connection); after
// flush or stop it drops o and reports true.
func (q *outQueue) put(o out, write func(items []out) bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped || q.flushing {
		return true
	}
	n := o.size()
	if len(q.items) >= q.limit || q.maxB > 0 && q.bytes > 0 && q.bytes+n > q.maxB {
		return false
	}
	q.items = append(q.items, o)
	q.bytes += n
	if !q.writing {
		q.writing = true
		q.wg.Add(1)
		go q.drain(write)
	}
	return true
}

// drain hands write everything queued, in order, until the queue is empty
// or write fails. The items being written count against maxB until
// written: the queue does not fill again behind them.
func (q *outQueue) drain(write func(items []out) bool) {
	defer q.wg.Done()
	taken := 0 // bytes of the items being written
	for {
		q.mu.Lock()
		q.bytes -= taken
		items := q.items
		q.items, taken = nil, q.bytes
		if len(items) == 0 || q.stopped {
			q.bytes = 0
			q.writing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if !write(items) {
			q.mu.Lock()
			q.writing = false
			q.items, q.bytes = nil, 0
			q.mu.Unlock()
			return
		}
	}
}

// stop drops what is queued, refuses what comes, and waits for the writer.
func (q *outQueue) stop() {
	q.mu.Lock()
	q.stopped = true
	q.items, q.bytes = nil, 0
	q.mu.Unlock()
	q.wg.Wait()
}

// flush refuses what comes and waits until the writer has written what is
// queued (or given up: its writes are bounded by WriteTimeout).
func (q *outQueue) flush() {
	q.mu.Lock()
	q.flushing = true
	q.mu.Unlock()
	q.wg.Wait()
}
