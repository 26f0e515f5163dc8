package client

import (
	"context"
	"fmt"

	"github.com/groupchat/chatd/protocol"
)

// A server that says max_cursors in its authed frame takes the acks and
// reads of many groups in one cursors frame: the ack loop sends what is
// due in as few of them as the server's limit and frame size allow, each
// charged to the frame budget as the gateway charges it (one frame, and
// one more per protocol.CursorsPer entries). Each entry the server refuses is
// handled as the refusal of its one-group frame (settleCursors). A server
// before the op says nothing, and is sent a frame a group.

// cursorsRoom is what a cursors frame may take of the server's frame
// limit (six times its body limit and 4 KiB), the rest left for what a
// frame's JSON adds around its entries.
func cursorsRoom(maxBody int) int { return 6*maxBody + 4096 - 512 }

// entryBytes bounds the JSON of one entry: {"gid":"…","upto":…}, a comma.
func entryBytes(gid string) int { return len(`{"gid":"","upto":-9223372036854775808},`) + len(gid) }

// batches splits ups into the updates of each cursors frame: at most
// s.maxCursors entries, and bytes within the server's frame limit.
func (s *session) batches(ups []cursorUpdate) [][]cursorUpdate {
	room := cursorsRoom(s.maxBody)
	if s.maxBody <= 0 {
		room = cursorsRoom(16 << 10) // the default body limit
	}
	var out [][]cursorUpdate
	lo, size := 0, 0
	for i, u := range ups {
		n := entryBytes(u.g.gid)
		if i > lo && (i-lo == s.maxCursors || size+n > room) {
			out = append(out, ups[lo:i])
			lo, size = i, 0
		}
		size += n
	}
	if lo < len(ups) {
		out = append(out, ups[lo:])
	}
	return out
}

// sendBatched sends ups in cursors frames, at most MaxAcking in flight,
// each once the frame budget has room, and waits for every answer.
func (c *Client) sendBatched(ctx context.Context, s *session, ups []cursorUpdate) error {
	if len(ups) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	bs := s.batches(ups)
	errs := make([][]error, len(bs))
	next := make(chan int, len(bs))
	for i := range bs {
		next <- i
	}
	close(next)
	done := make(chan struct{}, len(bs))
	for range min(c.cfg.MaxAcking, len(bs)) {
		go func() {
			for i := range next {
				errs[i] = c.sendCursorsFrame(ctx, s, bs[i])
				done <- struct{}{}
			}
		}()
	}
	for range bs {
		<-done
	}
	var all []error
	for _, e := range errs {
		all = append(all, e...)
	}
	return c.settleCursors(s, ups, all)
}

// sendCursorsFrame sends ups in one cursors frame once the frame budget
// has room, and returns each update's outcome.
func (c *Client) sendCursorsFrame(ctx context.Context, s *session, ups []cursorUpdate) []error {
	errs := make([]error, len(ups))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := c.frames.wait(ctx); err != nil {
		return fail(fmt.Errorf("waiting for room among the client's frames: %w", err))
	}
	c.frames.charge(protocol.CursorsFrames(len(ups)))
	req := protocol.Request{Op: protocol.OpCursors}
	c.mu.Lock()
	for _, u := range ups {
		upto := u.upto
		if u.op == protocol.OpAck {
			req.Acks = append(req.Acks, protocol.Cursor{Gid: u.g.gid, Upto: &upto})
			c.stats.Acks++
		} else {
			req.Reads = append(req.Reads, protocol.Cursor{Gid: u.g.gid, Upto: &upto})
			c.stats.Reads++
		}
	}
	c.stats.CursorFrames++
	c.mu.Unlock()
	f, err := s.request(ctx, req)
	if err != nil {
		return fail(err)
	}
	refused := make(map[[2]string]*protocol.Error, len(f.Refused))
	for _, r := range f.Refused {
		refused[[2]string{r.Op, r.Gid}] = &protocol.Error{Code: r.Code, Message: r.Message}
	}
	for i, u := range ups {
		if pe := refused[[2]string{u.op, u.g.gid}]; pe != nil {
			errs[i] = pe
		}
	}
	return errs
}
