package consumers

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// groupCommits gathers the group commits of one generation's partitions and
// sends them together once per interval. kafka-go sends every commit of a
// group over the one coordinator connection and waits for each answer by
// polling, so a commit per partition per interval, from every partition at
// once, cost more CPU than the records did.
type groupCommits struct {
	commit   func(map[string]map[int]int64) error // the generation's CommitOffsets
	topic    string
	interval time.Duration // < 0: every commit is sent at once
	log      *slog.Logger

	mu      sync.Mutex
	pending map[int]int64

	sendMu sync.Mutex    // one send at a time, so that they reach the group in order
	sent   map[int]int64 // the highest offset sent, by partition
}

// add commits next for part: at once when the interval is negative or final
// is set (the partition is stopping), else with the next flush. A pending
// commit flushed after a final one is below it, and send drops it.
func (c *groupCommits) add(part int, next int64, final bool) {
	if c.interval < 0 || final {
		c.send(map[int]int64{part: next})
		return
	}
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[int]int64{}
	}
	c.pending[part] = next
	c.mu.Unlock()
}

// run flushes every interval until ctx ends, then once more.
func (c *groupCommits) run(ctx context.Context) {
	if c.interval < 0 {
		return
	}
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.flush()
			return
		case <-t.C:
			c.flush()
		}
	}
}

func (c *groupCommits) flush() {
	c.mu.Lock()
	p := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(p) > 0 {
		c.send(p)
	}
}

// send commits offsets, leaving out any below what was sent before for its
// partition: a flush that took a pending offset before a final commit went
// must not move the group's position back after it.
func (c *groupCommits) send(offsets map[int]int64) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.sent == nil {
		c.sent = map[int]int64{}
	}
	for part, next := range offsets {
		if prev, ok := c.sent[part]; ok && next < prev {
			delete(offsets, part)
		} else {
			c.sent[part] = next
		}
	}
	if len(offsets) == 0 {
		return
	}
	if err := c.commit(map[string]map[int]int64{c.topic: offsets}); err != nil {
		// Effects are idempotent: a lost commit only means a replay from the
		// previous one. The next commit covers this one.
		c.log.Debug("group commit failed", "offsets", offsets, "err", err)
	}
}
