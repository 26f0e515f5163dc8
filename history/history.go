// Package history answers the read side of a group: a page of messages
// after a cursor (Pull), the page before a msgid for a client scrolling up
// (PullBefore) and the unread count after a cursor (Unread).
//
// Pull reads the group's recent window in Redis and falls back to ClickHouse
// for older history. Every page is a contiguous run of the group's stored
// messages: the persister writes ClickHouse before the window, so whatever
// the window has dropped is in ClickHouse. A History is safe for concurrent
// use. Its one state is the reads of ClickHouse in flight: a page waits
// for one a short while, in turn, and a user (see WithUser) holds a few
// at most, so that one user's deep pulls cannot starve the others' (see
// Config.ClickHouseReads).
package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	// MaxPageBytes caps what a page reads from the window, in encoded
	// messages, and from ClickHouse, in bodies (one message at least): a
	// page of a thousand large messages is not read whole to be cut
	// afterwards. Default PageBytes.
	MaxPageBytes int

	// ClickHouseReads caps the pages read from ClickHouse at once; keep it
	// below the store's MaxOpenConns, which other callers share, so that
	// a page never waits for a connection. Default 8.
	ClickHouseReads int
	// UserReads caps the pages read from ClickHouse at once for one user
	// (see WithUser). Default 2.
	UserReads int
	// ReadWait bounds how long a page waits for a read of ClickHouse
	// before it fails with ErrBusy. Default 1s.
	ReadWait time.Duration
}

// PageBytes is the default MaxPageBytes, and about what a gateway sends
// of a page: 1 MiB.
const PageBytes = 1 << 20

func (c *Config) setDefaults() {
	if c.MaxLimit == 0 {
		c.MaxLimit = 1000
	}
	if c.DefaultLimit == 0 {
		c.DefaultLimit = min(100, c.MaxLimit)
	}
	if c.MaxPageBytes == 0 {
		c.MaxPageBytes = PageBytes
	}
	if c.ClickHouseReads == 0 {
		c.ClickHouseReads = 8
	}
	if c.UserReads == 0 {
		c.UserReads = 2
	}
	if c.ReadWait == 0 {
		c.ReadWait = time.Second
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.Redis == nil {
		return errors.New("history: Redis is required")
	}
	if c.MaxLimit < 0 || c.DefaultLimit < 0 || c.MaxPageBytes < 0 || c.ClickHouseReads < 0 || c.UserReads < 0 || c.ReadWait < 0 {
		return errors.New("history: limits must not be negative")
	}
	return nil
}

// History serves pulls and unread counts.
type History struct {
	cfg   Config
	reads *reads // of ClickHouse
}

// New returns a History.
func New(cfg Config) (*History, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &History{cfg: cfg, reads: newReads(cfg.ClickHouseReads, cfg.UserReads, cfg.ReadWait)}, nil
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
//
// What the window has trimmed comes from ClickHouse. ClickHouse must then
// hold the floor, the newest message trimmed: when it does not (it was
// attached to a deployment that ran without it, or is being backfilled),
// the page would jump over messages, and Pull fails with ErrIncomplete
// instead. A page that needs ClickHouse waits for one of the reads of it
// (see Config.ClickHouseReads, WithUser), and fails with ErrBusy when it
// waited ReadWait in vain; PullBefore too.
func (h *History) Pull(ctx context.Context, gid string, after int64, limit int) (Page, error) {
	if err := schema.ValidID(gid); err != nil {
		return Page{}, fmt.Errorf("history: %w", err)
	}
	after = max(after, -1)
	limit = h.limit(limit)
	// One more than the page, to know whether messages follow it: the head
	// cannot tell, since the persister adds a batch to the window just
	// before it raises the head.
	wr, err := h.cfg.Redis.Window(ctx, gid, after, limit+1, h.cfg.MaxPageBytes)
	if err != nil {
		return Page{}, fmt.Errorf("history: %w", err)
	}
	page := Page{Gid: gid, Head: wr.Head, Source: FromWindow}
	msgs := wr.Messages
	if after < wr.Floor {
		if h.cfg.ClickHouse == nil {
			return Page{}, ErrNoHistory
		}
		release, err := h.reads.acquire(ctx)
		if err != nil {
			return Page{}, fmt.Errorf("history: %s from ClickHouse: %w", gid, err)
		}
		old, cut, err := h.cfg.ClickHouse.MessagesWithin(ctx, gid, after, wr.Floor, limit, h.cfg.MaxPageBytes)
		release()
		if err != nil {
			return Page{}, fmt.Errorf("history: %s from ClickHouse: %w", gid, err)
		}
		if n := len(old); !cut && n < limit && (n == 0 || old[n-1].MsgID != wr.Floor) {
			return Page{}, fmt.Errorf("%w (group %s after %d: ClickHouse lacks %d, the newest message the window dropped)",
				ErrIncomplete, gid, after, wr.Floor)
		}
		if cut {
			// The budget ends the page below the floor; the window's
			// messages come on a later one.
			msgs, page.More = old, true
		} else {
			// The window starts right above the floor: the run goes on there.
			msgs = append(old, msgs...)
		}
		page.Source = FromClickHouse
	}
	if len(msgs) > limit {
		msgs, page.More = msgs[:limit], true
	}
	page.Messages = msgs
	if n := len(msgs); n > 0 {
		page.More = page.More || wr.Cut || msgs[n-1].MsgID < wr.Head
		page.Head = max(wr.Head, msgs[n-1].MsgID)
	}
	return page, nil
}

// PullBefore returns the newest messages of gid with after < msgid < before,
// at most limit, in ascending order: the page a client scrolling up past
// `before` loads next (after is the member's start, or -1). More says that
// older messages of that range precede the page.
//
// A page is served from the window whenever the window holds the newest
// messages of the range: near the floor it may then be shorter than limit
// (More is set, since the floor itself is older and in the range). Only a
// range wholly at or below the floor is read from ClickHouse.
func (h *History) PullBefore(ctx context.Context, gid string, after, before int64, limit int) (Page, error) {
	if err := schema.ValidID(gid); err != nil {
		return Page{}, fmt.Errorf("history: %w", err)
	}
	after = max(after, -1)
	limit = h.limit(limit)
	// One more than the page, to know whether older messages precede it.
	wr, err := h.cfg.Redis.WindowBefore(ctx, gid, after, before, limit+1, h.cfg.MaxPageBytes)
	if err != nil {
		return Page{}, fmt.Errorf("history: %w", err)
	}
	page := Page{Gid: gid, Head: wr.Head, Source: FromWindow}
	msgs := wr.Messages
	switch {
	case len(msgs) > 0 || after >= wr.Floor:
		// The newest of the range, all above the floor; older ones follow
		// when the page is cut or the floor is in the range.
		page.More = len(msgs) > limit || wr.Cut || len(msgs) > 0 && after < wr.Floor
	case h.cfg.ClickHouse == nil:
		return Page{}, ErrNoHistory
	default:
		release, err := h.reads.acquire(ctx)
		if err != nil {
			return Page{}, fmt.Errorf("history: %s from ClickHouse: %w", gid, err)
		}
		var cut bool
		msgs, cut, err = h.cfg.ClickHouse.MessagesBeforeWithin(ctx, gid, after, before, limit+1, h.cfg.MaxPageBytes)
		release()
		if err != nil {
			return Page{}, fmt.Errorf("history: %s from ClickHouse: %w", gid, err)
		}
		// The window holds nothing of the range: when the floor is in it,
		// ClickHouse must have it, unless the page stops above it (at the
		// limit or the budget). (Above the floor ClickHouse may hold
		// messages the window is about to take: the persister writes
		// ClickHouse first.)
		if before > wr.Floor && !slices.ContainsFunc(msgs, func(m schema.Message) bool { return m.MsgID == wr.Floor }) &&
			(len(msgs) <= limit && !cut || len(msgs) > 0 && msgs[0].MsgID < wr.Floor) {
			return Page{}, fmt.Errorf("%w (group %s before %d: ClickHouse lacks %d, the newest message the window dropped)",
				ErrIncomplete, gid, before, wr.Floor)
		}
		page.More = len(msgs) > limit || cut
		page.Source = FromClickHouse
	}
	if len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
	}
	page.Messages = msgs
	if n := len(msgs); n > 0 {
		page.Head = max(wr.Head, msgs[n-1].MsgID) // the window may hold messages the head does not count yet
	}
	return page, nil
}

// limit applies the default and the cap to a page size a caller asked for.
func (h *History) limit(n int) int {
	if n <= 0 {
		n = h.cfg.DefaultLimit
	}
	return min(n, h.cfg.MaxLimit)
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
