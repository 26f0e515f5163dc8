package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/topics"
)

// cursorWatch polls every ack cursor in Redis during the run and checks
// that none moves backwards and none names a message its member has not
// received. While Redis is rebuilt after a wipe, cursors are allowed to be
// missing or behind; once the ack projector has replayed every ack made
// before the wipe, each must be back at least where it was.
type cursorWatch struct {
	h *harness

	mu         sync.Mutex
	max        map[string]map[string]int64 // gid -> uid -> highest seen
	rebuilding bool
	ends       map[int]int64 // chat.acks ends after the wipe; nil: not known yet
	polls      int64
	checked    int64 // cursor values checked
	found      []violation
	seen       map[string]bool // one violation per (kind, gid, uid)
}

func newCursorWatch(h *harness) *cursorWatch {
	cw := &cursorWatch{h: h, max: map[string]map[string]int64{}, seen: map[string]bool{}}
	for _, g := range h.w.gids {
		cw.max[g] = map[string]int64{}
	}
	return cw
}

func (cw *cursorWatch) wipeBegins() {
	cw.mu.Lock()
	cw.rebuilding, cw.ends = true, nil
	cw.mu.Unlock()
}

func (cw *cursorWatch) wipeEnds(ends map[int]int64) {
	cw.mu.Lock()
	cw.ends = ends
	cw.mu.Unlock()
}

// run polls every interval until ctx ends.
func (cw *cursorWatch) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cw.poll(ctx)
	}
}

func (cw *cursorWatch) poll(ctx context.Context) {
	h := cw.h
	cw.mu.Lock()
	rebuilding, ends := cw.rebuilding, cw.ends
	cw.mu.Unlock()
	if rebuilding && ends != nil && h.c.caughtUp(ctx, consumers.GroupAckProjector, topics.Acks, ends) {
		cw.mu.Lock()
		cw.rebuilding = false
		cw.mu.Unlock()
		rebuilding = false
		h.tl.note("ack cursors rebuilt after the Redis wipe")
	}
	now := time.Now()
	for _, gid := range h.w.gids {
		cur, err := h.c.redis.AckCursors(ctx, gid)
		if err != nil {
			return // Redis is down: nothing to see
		}
		cw.mu.Lock()
		cw.polls++
		for _, uid := range h.w.members[gid] {
			c, ok := cur[uid]
			prev, had := cw.max[gid][uid]
			join := h.w.joinPos[gid][uid]
			switch {
			case !ok && had && prev > join && !rebuilding:
				cw.report(violation{Kind: "cursor-lost", Gid: gid, Uid: uid, MsgID: prev, At: now,
					Detail: fmt.Sprintf("the ack cursor of %s in %s, last seen at %d, is gone after the Redis rebuild", uid, gid, prev)})
			case !ok:
			case had && c < prev && !rebuilding:
				cw.report(violation{Kind: "cursor-backwards", Gid: gid, Uid: uid, MsgID: c, At: now,
					Detail: fmt.Sprintf("the ack cursor of %s in %s went back from %d to %d", uid, gid, prev, c)})
			default:
				cw.checked++
				if !had || c > prev {
					cw.max[gid][uid] = c
				}
				if c > join && !h.rec.hasReceived(uid, gid, c) {
					cw.report(violation{Kind: "cursor-past-unreceived", Gid: gid, Uid: uid, MsgID: c, At: now,
						Detail: fmt.Sprintf("the ack cursor of %s in %s is at %d, a message none of the member's devices received", uid, gid, c)})
				}
			}
		}
		cw.mu.Unlock()
	}
}

// report records v once per (kind, gid, uid); cw.mu is held.
func (cw *cursorWatch) report(v violation) {
	key := v.Kind + "/" + v.Gid + "/" + v.Uid
	if cw.seen[key] {
		return
	}
	cw.seen[key] = true
	v.Fault = cw.h.tl.near(v.At)
	cw.found = append(cw.found, v)
}

// highest returns the highest cursor seen of every member.
func (cw *cursorWatch) highest() map[string]map[string]int64 {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	out := map[string]map[string]int64{}
	for g, m := range cw.max {
		out[g] = map[string]int64{}
		for u, c := range m {
			out[g][u] = c
		}
	}
	return out
}
