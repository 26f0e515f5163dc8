// Package history answers the read side of a group: a page of messages
// after a cursor (Pull), the page before a msgid for a client scrolling up
// (PullBefore) and the unread count after a cursor (Unread).
//
// Pull reads the group's recent window in Redis and falls back to ClickHouse
// for older history. Every page is a contiguous run of the group's stored
// messages: the persister writes ClickHouse before the window, so whatever
// the window has dropped is in ClickHouse. A History is safe for concurrent
// use; it holds no state of its own.
package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// Errors a caller can act on.
var (
	ErrNoHistory  = errors.New("history: messages this old are not kept: the Redis window holds only recent messages and no ClickHouse is configured")
	ErrIncomplete = errors.New("history: ClickHouse is missing messages the window no longer holds; run `chatctl backfill`")
)

// Config of a History.
type Config struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional: without it only the window is served

	// MaxLimit caps a page. Default 1000.
	MaxLimit int
	// DefaultLimit is used when a caller asks for 0 or fewer. Default 100.
	DefaultLimit int
}

func (c *Config) setDefaults() {
	if c.MaxLimit == 0 {
		c.MaxLimit = 1000
	}
	if c.DefaultLimit == 0 {
		c.DefaultLimit = min(100, c.MaxLimit)
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.Redis == nil {
		return errors.New("history: Redis is required")
	}
	if c.MaxLimit < 0 || c.DefaultLimit < 0 {
		return errors.New("history: limits must not be negative")
	}
	return nil
}

// History serves pulls and unread counts.
type History struct{ cfg Config }

// New returns a History.
func New(cfg Config) (*History, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &History{cfg: cfg}, nil
}

// Source says where a page came from.
type Source string

// The page sources.
const (
	FromWindow     Source = "window"
	FromClickHouse Source = "clickhouse"
)

// Page is a contiguous run of a group's messages after a cursor.
type Page struct {
	Gid      string
	Messages []schema.Message // ascending msgid, MsgID set
	More     bool             // Pull: messages follow the page; PullBefore: messages precede it
	Head     int64            // the group's newest msgid; -1 when it has none
	Source   Source
}

// Pull returns up to limit messages of gid with msgid > after (limit <= 0
// asks for the default; above MaxLimit it is capped).
func (h *History) Pull(ctx context.Context, gid string, after int64, limit int) (Page, error) {
	if err := schema.ValidID(gid); err != nil {
		return Page{}, fmt.Errorf("history: %w", err)
	}
	if after < -1 {
		after = -1
	}
	if limit <= 0 {
		limit = h.cfg.DefaultLimit
	}
	limit = min(limit, h.cfg.MaxLimit)
	head, err := h.cfg.Redis.Head(ctx, gid)
	if err != nil {
		return Page{}, fmt.Errorf("history: head of %s: %w", gid, err)
	}
	page := Page{Gid: gid, Head: head, Source: FromWindow}
	if after >= head {
		return page, nil
	}
	msgs, complete, err := h.cfg.Redis.Window(ctx, gid, after, limit)
	if err != nil {
		return Page{}, fmt.Errorf("history: window of %s: %w", gid, err)
	}
	if !complete {
		if h.cfg.ClickHouse == nil {
			return Page{}, ErrNoHistory
		}
		if msgs, err = h.cfg.ClickHouse.Messages(ctx, gid, after, limit); err != nil {
			return Page{}, fmt.Errorf("history: %s from ClickHouse: %w", gid, err)
		}
		if len(msgs) == 0 {
			return Page{}, fmt.Errorf("%w (group %s after %d, head %d)", ErrIncomplete, gid, after, head)
		}
		page.Source = FromClickHouse
	}
	page.Messages = msgs
	if n := len(msgs); n > 0 {
		page.More = msgs[n-1].MsgID < head
	}
	return page, nil
}

// PullBefore returns the newest messages of gid with after < msgid < before,
// at most limit, in ascending order: the page a client scrolling up past
// `before` loads next (after is the member's start, or -1). More says that
// older messages of that range precede the page.
func (h *History) PullBefore(ctx context.Context, gid string, after, before int64, limit int) (Page, error) {
	if err := schema.ValidID(gid); err != nil {
		return Page{}, fmt.Errorf("history: %w", err)
	}
	after = max(after, -1)
	if limit <= 0 {
		limit = h.cfg.DefaultLimit
	}
	limit = min(limit, h.cfg.MaxLimit)
	head, err := h.cfg.Redis.Head(ctx, gid)
	if err != nil {
		return Page{}, fmt.Errorf("history: head of %s: %w", gid, err)
	}
	page := Page{Gid: gid, Head: head, Source: FromWindow}
	before = min(before, head+1)
	if before <= after+1 {
		return page, nil
	}
	// One more than the page, to know whether older messages precede it.
	msgs, complete, err := h.cfg.Redis.WindowBefore(ctx, gid, after, before, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("history: window of %s: %w", gid, err)
	}
	if !complete {
		if h.cfg.ClickHouse == nil {
			return Page{}, ErrNoHistory
		}
		inWindow := len(msgs)
		if msgs, err = h.cfg.ClickHouse.MessagesBefore(ctx, gid, after, before, limit+1); err != nil {
			return Page{}, fmt.Errorf("history: %s from ClickHouse: %w", gid, err)
		}
		if len(msgs) < inWindow { // what the window holds must be there
			return Page{}, fmt.Errorf("%w (group %s before %d, head %d)", ErrIncomplete, gid, before, head)
		}
		page.Source = FromClickHouse
	}
	if len(msgs) > limit {
		msgs, page.More = msgs[len(msgs)-limit:], true
	}
	page.Messages = msgs
	return page, nil
}

// Unread is an unread count. When Exact is false, Count is a lower bound
// (the window ends above the cursor) and is shown as "N+".
type Unread struct {
	Count int64
	Exact bool
}

func (u Unread) String() string {
	if u.Exact {
		return fmt.Sprint(u.Count)
	}
	return fmt.Sprintf("%d+", u.Count)
}

// Unread counts gid's messages after cursor.
func (h *History) Unread(ctx context.Context, gid string, cursor int64) (Unread, error) {
	n, exact, err := h.cfg.Redis.Unread(ctx, gid, cursor)
	if err != nil {
		return Unread{}, fmt.Errorf("history: unread of %s: %w", gid, err)
	}
	return Unread{Count: n, Exact: exact}, nil
}
