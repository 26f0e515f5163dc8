// Package client is the client's half of group-chat delivery: it holds one
// WebSocket connection to a gateway (reconnecting by itself), and turns the
// server's pushes and pull pages into exactly-once, in-order delivery per
// group, with batched acks and idempotent sends.
//
// # Delivery
//
// For every group the client keeps a contiguous cursor: the newest msgid it
// has received together with every message of the group before it. A pushed
// message is accepted only when its prev equals that cursor. A push whose
// prev differs (or is unknown) starts a pull of the gap, "messages after the
// cursor", page by page until the server says there are no more; pushes that
// arrive meanwhile are buffered and accepted once their predecessors are in.
// But a second record of a send already handed over (below) is neither
// buffered nor pulled for: the server keeps only the first, and a pull
// would never bring it; its prev, when it names one, is still pulled up to.
// A gap that a complete pull does not close (the server's store lags behind
// its pushes) is pulled again with back-off. Messages are deduplicated by
// msgid, so re-deliveries after a lost ack, a resend or a reconnect never
// reach the application twice within the life of a Client (a group a sync
// stops naming is forgotten, but where it was is kept for the last 10,000
// such groups, and a group taken up again starts there); and by sender
// and client_msg_id among the last Config.DedupSends messages of all groups
// (10,000, about 0.5 MiB however many the groups), so a resend that was
// written twice (the server stores it once, but may push both) is shown
// once. Two such records are one send, as the server decides, only when
// their sent_at are at most Config.DedupWindow apart (the server's, 24 h):
// a client_msg_id used again past it is a new message, which the server
// stores, and the client hands over.
//
// Acks carry the newest msgid the application has been handed (OnMessage has
// returned for it and every predecessor), never more: they are sent per group
// after Config.AckEvery messages or Config.AckInterval, whichever comes first,
// and on Close. They only move forward. MarkRead is batched the same way and
// never reads past what was delivered.
//
// The client's own frames (acks, reads, pulls and syncs) keep to
// Config.FrameRate a second, bursts of FrameBurst (100 and 100 by
// default): a gateway refuses a connection's frames over 200 a second,
// bursts of 400, as rate_limited, the application's sends among them, so
// a user in many groups would have most of a round of acks, and their
// sends, refused. A sync counts as the gateway charges it: a frame, and
// one more for each protocol.SyncPer (100) groups it lists; a sync made
// again on a connection waits until the budget holds that many. The
// answer of a WhoRead (whose frame is the application's, as a send is)
// takes one more for each protocol.WhoReadPer (500) ids it lists.
// Acks and reads over the budget stay due for the next round, the longest
// due first; at most MaxAcking of them are in flight at once. Those
// refused as rate_limited are sent again after AckInterval, and go to
// OnError as one error, once until an ack or read is accepted. A server
// whose authed frame says max_cursors takes the acks and reads of many
// groups in one cursors frame: the due ones (and those due within half
// an AckInterval) go in as few as its limit allows, each charged one frame and one more per 100 entries, as the
// gateway charges it; a server before it gets a frame a group.
//
// A new Client starts each group at the member's ack cursor from the server
// (the sync on login), so messages delivered and acked by an earlier Client
// are not delivered again; messages delivered but not yet acked when a
// process died are delivered again (at-least-once across processes,
// exactly-once within one Client). One exception: a group whose ack the
// server refuses as beyond its newest message (a push or page of a msgid
// the group does not have was taken: nothing tells it from a real one) is
// taken up again from the ack cursor the server confirmed, as a new Client
// would: the client syncs and pulls what the heads show missing, the
// refusal goes to OnError, and what was delivered since that cursor may be
// delivered again (Stats.Retakes counts these). A server that pushes such
// msgids again and again has the group taken up again and again: from the
// second time in a row the sync and pull wait 1 s, doubling up to a
// minute, with jitter (Stats.RetakesWaited), until a cursor of the group
// is accepted; the refusal that goes to OnError says so the first time.
//
// A group the latest sync does not name is forgotten once nothing of it
// waits (not opened, everything received delivered and acked, no read to
// send, no pull): a server naming new groups on every reconnect costs the
// client one sync's groups, not all it ever named. Between syncs, a server
// pushing gids no sync named (groups joined since, or a fault) on one long
// connection makes at most MaxUnnamedGroups groups of them, each holding at
// most MaxUnnamedHeld pushes behind a gap. The pushes past that are
// dropped and pulled: the gap's pull brings those of a group kept; those
// of another (Stats.UnnamedDrops), a pull once a sync names the group, as
// any group's messages sent while the user was away. A sync is taken whatever its number of groups, as a gateway sets no bound
// on a user's: only a frame over 32 MiB, or groups more than that holds of
// the shortest a gateway writes, is refused. A server frame longer than a
// server sends (more messages than a page, counts, unknown msgids or
// readers than an answer holds) is refused before it is decoded, as is a
// frame that is not JSON of the protocol: the request it answered fails
// with ErrProtocol and the reason, and a frame without an id (a push) goes
// to OnError the same way.
//
// On every (re)connect the client authenticates with an auth frame (calling
// Config.Token; the token never goes into the URL, where logs would keep it),
// syncs the per-group counts, and pulls every group it has received
// messages of (every group opened with Open among them) whose head moved
// past its cursor: one pull per group with new messages, not one per
// opened group, Config.ResyncPulls of them in flight at once (8 by
// default), so that the last of hundreds of groups is not a round trip per
// group away. Login alone fetches counts only: a group's backlog is pulled
// when the group is opened (or when a push reveals a gap). A pull the server
// refuses for a while (unavailable, internal, rate_limited) or that times
// out is made again with back-off, until it completes or the connection
// ends. When the server says it may have lost pushes to the client (a
// resync frame), the client does the same sync and pulls on the
// connection it has, trying the sync again with back-off while it is
// refused as unavailable.
//
// Reconnects wait Config.MinBackoff at first, doubling to MaxBackoff, with
// jitter. The wait starts over only after a connection that lasted
// MaxBackoff, so a server that ends every connection at once is not
// reconnected to every MinBackoff by all its clients. The first reconnect
// after a connection ends also waits a random time up to
// Config.RedialSpread (MaxBackoff/5, 2 s by default): the clients of a
// gateway that went away come back to the others spread over it, not in
// one wave.
//
// Dial makes the first connection again the same way while the server asks
// it to: a close with 1013 (try again later), 1012 (service restart) or
// 1001 (going away), or an upgrade (a gateway's 503), auth or sync refused
// as unavailable or overloaded. Each goes to OnError, and Dial returns once
// a connection is made or its ctx ends, with an error that wraps both
// ctx's error and the server's last. Every other failure (a bad token, a
// server that refuses the connection) fails Dial at once, so a Dial whose
// ctx has no deadline does not wait for ever on a server that is down.
//
// # Concurrency
//
// All methods of Client are safe for concurrent use.
//
// OnMessage is called from one goroutine owned by the Client, one message at
// a time, in ascending msgid order per group; the messages of different
// groups interleave (pushes come as they are sent, and the pulls of a
// reconnect go several at once). It may call any method of the
// Client (Send, MarkRead, Open, Cursor...), Close too: called from a
// callback, Close returns at once, and its work (delivery stopped, the
// acks of what was delivered flushed, that message's too, the connection
// closed) is done once the callback returns; Done tells when. Delivery may begin before Dial returns, so an
// OnMessage that uses the Client waits until the variable Dial's result
// is assigned to is set (a sync.WaitGroup done after Dial, as the bot
// example does): reading it before is a data race. Once Close has begun, a Send or Open waiting for a
// connection (or a Send for its turn among the sends in flight, or backing
// off before a resend), and a ReadCounts or WhoRead waiting for its answer,
// end with ErrClosed, so an OnMessage blocked in one returns. A slow OnMessage delays acks, not the connection:
// messages wait in memory, and pulls stop while MaxQueued of them wait
// (the pages in flight come on top: up to ResyncPulls after a reconnect);
// pushes, which come at the pace of the conversation, wait up to twice
// MaxQueued, past which a group's pushes are pulled once it catches up.
//
// OnError receives asynchronous errors (connection lost, reconnect failed,
// a pull or an ack refused). Calls are serialised; they come from the
// Client's goroutines and must not block for long. They may call Close,
// which returns at once as from OnMessage.
//
// Send, SendWithID and Open block until they succeed, fail for good, or
// their ctx ends; while the client is disconnected they wait for the next
// connection. A send that ends without the server's answer on it returns a
// *SendError, which gives its cmid and says whether the message may have
// been stored (an answer was lost): resend it with SendWithID and that cmid,
// as a new Send would post it twice. At most MaxSending sends are in flight
// at once; the others wait in the client. A server that answers overloaded,
// or rate_limited (the user's sends over their rate: 50 a second, bursts
// of 100, by default), halves that number and pauses every send of the
// client: for 5 × MinBackoff
// at first, with jitter down to half (0.25–0.5 s with the defaults),
// doubling while the refusals go on, up to MaxBackoff (5–10 s); then they
// are resent with their cmid. The refusals of sends that were in flight
// together count as one: a server that refuses a burst of them halves the
// number and pauses the client once. Close flushes the pending acks and
// reads (at FrameRate, within RequestTimeout), closes the connection and
// waits for every goroutine of the Client to end; messages still queued for
// OnMessage are dropped (they were not acked and will be delivered to the
// next Client).
package client
