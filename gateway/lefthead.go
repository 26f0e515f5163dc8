package gateway

import (
	"context"
	"sync"

	"github.com/groupchat/chatd/store"
)

// leftHead returns the newest message of gid that m, a member who left,
// sees: the head a sync or a pull gives them. Their leave's position is the
// head of the group's partition, which other groups share, so it is often
// no message of gid; a client told it as the head would wait for ever for
// a message it can never pull ("0+" unread, a pull at every heartbeat).
// head is the group's newest message. Once the group's head is past the
// leave, the answer never changes: it is remembered (leftHeads).
func (g *Gateway) leftHead(ctx context.Context, gid string, m store.Membership, head int64) int64 {
	if head <= m.LeftAt {
		return head
	}
	key := leftStretch{gid, m.JoinedAt, m.LeftAt}
	if v, ok := g.leftHeads.get(key); ok {
		return v
	}
	page, err := g.cfg.History.PullBefore(ctx, gid, m.JoinedAt, m.LeftAt+1, 1)
	if err != nil {
		g.log.Warn("newest message seen before a leave", "gid", gid, "err", err)
		return m.LeftAt // as good as the client can be told now
	}
	v := m.JoinedAt // none: the stretch saw no message
	if n := len(page.Messages); n > 0 {
		v = page.Messages[n-1].MsgID
	}
	g.leftHeads.put(key, v)
	return v
}

// leftLookups is how many leftHead look-ups one sync makes at once: a user
// who left many groups long ago (their messages in ClickHouse) logs in
// without a round trip for each in turn, and leaves most of the ClickHouse
// driver's ten connections to the others.
const leftLookups = 4

// leftAt is a group a member left, with the group's newest message.
type leftAt struct {
	m    store.Membership
	head int64
}

// leftHeadsOf returns leftHead of each group of left, leftLookups at once.
func (g *Gateway) leftHeadsOf(ctx context.Context, left map[string]leftAt) map[string]int64 {
	out := make(map[string]int64, len(left))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, leftLookups)
	for gid, l := range left {
		if v, ok := g.leftHeads.get(leftStretch{gid, l.m.JoinedAt, l.m.LeftAt}); ok || l.head <= l.m.LeftAt {
			if !ok {
				v = l.head
			}
			out[gid] = v
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			v := g.leftHead(ctx, gid, l.m, l.head)
			<-slots
			mu.Lock()
			out[gid] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// leftStretch is a stretch of membership that ended.
type leftStretch struct {
	gid              string
	joinedAt, leftAt int64
}

// leftHeadCache remembers leftHead's answers, at most maxLeftHeads of
// them (all dropped when full: they are cheap to find again).
type leftHeadCache struct {
	mu sync.Mutex
	m  map[leftStretch]int64
}

const maxLeftHeads = 1 << 16

func (c *leftHeadCache) get(k leftStretch) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *leftHeadCache) put(k leftStretch, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxLeftHeads {
		c.m = make(map[leftStretch]int64)
	}
	c.m[k] = v
}
