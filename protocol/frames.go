package protocol

import "encoding/json"

// Client operations.
const (
	OpAuth = "auth" // {"op":"auth","id":"1","token":"<jwt>"}
	OpSend = "send" // {"op":"send","id":"2","gid":"g1","cmid":"c-1","body":"hi"}
	OpAck  = "ack"  // {"op":"ack","gid":"g1","upto":42}
	OpRead = "read" // {"op":"read","gid":"g1","upto":42}
	OpPull = "pull" // {"op":"pull","id":"3","gid":"g1","after":17,"limit":50}; or "before":42 to page up
	OpSync = "sync" // {"op":"sync","id":"4"}

	OpReadCounts = "read_counts" // {"op":"read_counts","id":"5","gid":"g1","msgids":[41,42]}
	OpWhoRead    = "who_read"    // {"op":"who_read","id":"6","gid":"g1","msgid":42}

	// OpCursors acks and marks read many groups in one frame:
	// {"op":"cursors","id":"7","acks":[{"gid":"g1","upto":42}],"reads":[{"gid":"g2","upto":9}]}
	OpCursors = "cursors"
)

// Server operations.
const (
	OpAuthed   = "authed"   // answer to auth
	OpAccepted = "accepted" // answer to send: the message's msgid
	OpOK       = "ok"       // answer to ack and read when they carry an id, and to cursors
	OpPage     = "page"     // answer to pull
	OpSynced   = "synced"   // answer to sync
	OpPush     = "push"     // live messages
	OpCounts   = "counts"   // answer to read_counts
	OpReaders  = "readers"  // answer to who_read
	OpReceipts = "receipts" // pushed to a sender: new read counts of their messages
	OpError    = "error"    // answer to any request that failed
	OpResync   = "resync"   // pushes to you may have been lost: sync, then pull what is missing
)

// MaxMsgIDs is the most msgids one read_counts request may name.
const MaxMsgIDs = 200

// MaxCursors is the most entries, acks and reads together, one cursors
// frame may carry: 500 entries of the longest gid and msgid are about
// 85 KB, within the frame limit at the default body limit.
const MaxCursors = 500

// Request is any client frame. Which fields matter depends on Op.
type Request struct {
	Op     string `json:"op"`
	ID     string `json:"id,omitempty"`     // echoed in the answer; at most 64 bytes
	Token  string `json:"token,omitempty"`  // auth
	Gid    string `json:"gid,omitempty"`    // send, ack, read, pull
	Cmid   string `json:"cmid,omitempty"`   // send: the client's id of the message, reused on resend
	Body   string `json:"body,omitempty"`   // send
	Upto   *int64 `json:"upto,omitempty"`   // ack, read: a msgid
	After  *int64 `json:"after,omitempty"`  // pull: exclusive; -1 or absent = from the member's start
	Before *int64 `json:"before,omitempty"` // pull: exclusive; set: the newest messages below it (scrolling up)
	Limit  int    `json:"limit,omitempty"`  // pull: 1..1000, 0 = server default

	MsgIDs []int64 `json:"msgids,omitempty"` // read_counts
	MsgID  *int64  `json:"msgid,omitempty"`  // who_read

	Acks  []Cursor `json:"acks,omitempty"`  // cursors: acks, a group at most once
	Reads []Cursor `json:"reads,omitempty"` // cursors: reads, a group at most once
}

// Cursor is one entry of a cursors frame: as an ack or a read frame's
// gid and upto.
type Cursor struct {
	Gid  string `json:"gid"`
	Upto *int64 `json:"upto"`
}

// Message is a group message as clients see it.
type Message struct {
	Gid    string `json:"gid"`
	MsgID  int64  `json:"msgid"`
	Prev   *int64 `json:"prev,omitempty"` // push only: the group's previous msgid (-1: none); absent: unknown
	Sender string `json:"sender"`
	SentAt int64  `json:"sent_at"` // unix ms
	Cmid   string `json:"cmid,omitempty"`
	Body   string `json:"body"`
}

// Authed answers auth.
type Authed struct {
	Op  string `json:"op"` // "authed"
	ID  string `json:"id,omitempty"`
	Uid string `json:"uid"`
	// MaxBody is the most bytes of a message body the server takes (of
	// the body itself, however JSON escapes it): a client refuses a longer
	// one itself, as its frame may pass the server's frame limit, which
	// closes the connection (1009). Servers before it leave it out (0).
	MaxBody int `json:"max_body,omitempty"`
	// MaxCursors is the most entries a cursors frame may carry (see
	// OpCursors). Servers before the cursors op leave it out (0): a
	// client sends them one ack or read frame a group.
	MaxCursors int `json:"max_cursors,omitempty"`
}

// Accepted answers send.
type Accepted struct {
	Op    string `json:"op"` // "accepted"
	ID    string `json:"id,omitempty"`
	Gid   string `json:"gid"`
	Cmid  string `json:"cmid"`
	MsgID int64  `json:"msgid"`
}

// OK answers ack, read and cursors.
type OK struct {
	Op string `json:"op"` // "ok"
	ID string `json:"id,omitempty"`
	// Refused lists the entries of a cursors frame that were refused,
	// each with the error its one-group ack or read would have had; the
	// others were taken.
	Refused []Refusal `json:"refused,omitempty"`
}

// Refusal is an entry of a cursors frame that was refused.
type Refusal struct {
	Op      string `json:"op"` // "ack" or "read": the list it was in
	Gid     string `json:"gid"`
	Upto    int64  `json:"upto"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Page answers pull: a contiguous run of the group's messages after After
// or, when Before is set, the newest ones between After and Before.
type Page struct {
	Op     string    `json:"op"` // "page"
	ID     string    `json:"id,omitempty"`
	Gid    string    `json:"gid"`
	After  int64     `json:"after"`
	Before *int64    `json:"before,omitempty"`
	Msgs   []Message `json:"msgs"`
	More   bool      `json:"more"` // more messages follow the page; with Before: precede it
	Head   int64     `json:"head"` // the newest msgid the member may see; -1: none
}

// GroupState is one group in a sync answer.
type GroupState struct {
	Gid         string `json:"gid"`
	Head        int64  `json:"head"` // newest msgid the member may see; -1: none
	Ack         int64  `json:"ack"`  // the member's delivery cursor
	Read        int64  `json:"read"` // the member's read cursor
	Unread      int64  `json:"unread"`
	UnreadExact bool   `json:"unread_exact"` // false: unread is a lower bound, show "N+"
	Left        bool   `json:"left,omitempty"`
}

// Synced answers sync: every group of the user, counts only.
type Synced struct {
	Op     string       `json:"op"` // "synced"
	ID     string       `json:"id,omitempty"`
	Groups []GroupState `json:"groups"`
}

// Push carries live messages, one or more, each with its prev.
type Push struct {
	Op   string    `json:"op"` // "push"
	Msgs []Message `json:"msgs"`
}

// ReadCount is the read count of one message: how many of its audience
// (the members when it was sent, other than its sender) have read it.
type ReadCount struct {
	MsgID    int64 `json:"msgid"`
	Read     int   `json:"read"`
	Audience int   `json:"audience"`
}

// Counts answers read_counts; msgids no longer kept are listed in Unknown.
type Counts struct {
	Op      string      `json:"op"` // "counts"
	ID      string      `json:"id,omitempty"`
	Gid     string      `json:"gid"`
	Counts  []ReadCount `json:"counts"`
	Unknown []int64     `json:"unknown,omitempty"`
}

// Readers answers who_read.
type Readers struct {
	Op     string   `json:"op"` // "readers"
	ID     string   `json:"id,omitempty"`
	Gid    string   `json:"gid"`
	MsgID  int64    `json:"msgid"`
	Read   []string `json:"read"`
	Unread []string `json:"unread"`
}

// Receipts is pushed to an online sender when read counts of their
// messages change, at most once per group per interval.
type Receipts struct {
	Op     string      `json:"op"` // "receipts"
	Gid    string      `json:"gid"`
	Counts []ReadCount `json:"counts"`
}

// Resync tells a client that pushes to it may have been lost; it should
// sync and pull what the heads show it is missing, as after a reconnect.
type Resync struct {
	Op     string `json:"op"`     // "resync"
	Reason string `json:"reason"` // a ResyncXxx: why, for logs
}

// Reasons of a resync.
const (
	// ResyncPushRoute: the gateway's route for pushes (its Redis
	// subscription) broke and was re-established.
	ResyncPushRoute = "push_route"
	// ResyncLateStore: the sync answered just after the connection (or
	// its push route) came up missed messages that were not pushed to
	// it, as the store had not written them yet.
	ResyncLateStore = "late_store"
	// ResyncPresence: the gateway could not refresh the connection's
	// presence for longer than it lasts, or write it again after Redis
	// lost it (restarted, or flushed without a restart), or the end of the
	// user's previous connection cleared it
	// for a moment, so the fan-out may have taken the user for offline
	// and pushed nothing meanwhile.
	ResyncPresence = "presence"
	// ResyncJoined: the user was added to a group while messages were
	// being sent to it, and one sent after the join's position was handed
	// out before the join was known, so it was not pushed to them.
	ResyncJoined = "joined"
	// ResyncStale: a message of one of the user's groups reached the
	// pushes more than their age limit after it was sent (the server was
	// catching up) and was not pushed, and no later push names it.
	ResyncStale = "stale"
)

// ErrorFrame answers a request that failed.
type ErrorFrame struct {
	Op      string `json:"op"` // "error"
	ID      string `json:"id,omitempty"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Marshal encodes a server frame. The frames here cannot fail to encode.
func Marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("protocol: " + err.Error()) // only plain structs are passed
	}
	return b
}
