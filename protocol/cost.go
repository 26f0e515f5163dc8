package protocol

// What an answer costs the connection that asked for it, in frames of its
// rate (a gateway's default: 200 a second, bursts of 400) beyond the frame
// of the request. A gateway charges it once the answer is known, into debt
// if need be, and refuses the frames after it as rate_limited until the
// rate has paid for it (over HTTP, requests of the user's rate). A client
// that keeps its own frames within the rate charges its budget the same:
// the Go SDK's pacer, and the web page's (web/static/pace.js, which keeps
// its own copy of these numbers).
const (
	// SyncPer is how many groups a sync answer lists for each frame it
	// costs: a sync of 1,000 groups costs a gateway's Redis 9-12 ms of
	// CPU, and at one frame whatever its groups a connection could have
	// it do that at its frame rate, 200 times a second.
	SyncPer = 100
	// WhoReadPer is how many ids of a message's audience a who_read answer
	// lists for each frame it costs. Its answer, to a frame of 70 bytes,
	// lists up to MaxMembers ids of up to 128 bytes (1.23 MiB, 5-9 ms of
	// work, at 10,000 members): at one frame each a connection had it
	// listed at its frame rate, 200 times a second.
	WhoReadPer = 500
	// CursorsPer is how many entries of a cursors frame cost a frame more:
	// an entry is a read of Redis and a record, and at one frame whatever
	// its entries a connection could have a gateway write MaxCursors
	// records 200 times a second. As a sync's groups (SyncPer).
	CursorsPer = 100
)

// SyncFrames is what a sync answer listing groups groups costs beyond the
// frame that asked: a sync of 1,000 groups costs 10 more, 11 in all.
func SyncFrames(groups int) int { return groups / SyncPer }

// WhoReadFrames is what a who_read answer listing ids members (read and
// unread together) costs beyond the frame that asked: 20 more at 10,000.
func WhoReadFrames(ids int) int { return ids / WhoReadPer }

// CursorsFrames is what a cursors frame of entries entries (acks and
// reads together) costs beyond itself: 5 more at 500.
func CursorsFrames(entries int) int { return entries / CursorsPer }
