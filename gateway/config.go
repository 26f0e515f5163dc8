package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/metrics"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// Config of a Gateway.
type Config struct {
	Redis    *store.Redis        // required: membership, cursors, presence, pushes
	Producer *producers.Producer // required
	History  *history.History    // required

	// Secret signs and verifies client tokens (HS256). Required, >= 32 bytes.
	Secret []byte
	// AdminToken guards /v1/admin/*. Empty disables administration.
	AdminToken string
	// DevTokens serves POST /v1/dev/token, which hands out a token for any
	// user id, and /v1/dev/groups, where any signed-in user creates groups
	// and adds members. Only `chatd dev` sets it; never in production.
	DevTokens bool

	// Node names this gateway in presence and its push channel. Default:
	// hostname and pid.
	Node string
	// AllowedOrigins are host patterns (path.Match) browsers may connect
	// from besides the gateway's own host. Default none.
	AllowedOrigins []string

	MaxBody int // bytes of a message body; default 16 KiB
	// SendRate and SendBurst bound a user's sends to this gateway: one
	// bucket per user, shared by all their connections and their HTTP
	// sends (so more devices are no more sends). Default 50 a second,
	// bursts of 100. The frame rate (4 x SendRate, at least 100, bursts
	// of 4 x SendBurst) stays per connection: each of a user's tabs
	// syncs, pulls and acks on its own, so their frames grow with their
	// connections where their sends do not; MaxConnsPerUser bounds a
	// user's share. A user's HTTP requests share one bucket of the frame
	// rate, and at most maxHTTPInflight are in hand at once.
	SendRate     float64
	SendBurst    int
	SendTarget   time.Duration // a send that takes longer inside the gateway means overload; default 250ms, <0 no bound
	MaxSending   int           // sends worked on at once, at most; default 1024 (the bound adapts below it, see admission)
	QueueSize    int           // outbound frames per connection before it is cut; default 512
	QueueBytes   int           // or outbound bytes; default 16 MiB (a pull page holds at most 1 MiB of bodies)
	WriteTimeout time.Duration // what is queued for a client, written at once; default 10s
	PingInterval time.Duration // default 20s
	AuthTimeout  time.Duration // time to send auth after connecting; default 10s
	PresenceTTL  time.Duration // presence entries expire unless refreshed; default 30s
	NodeLease    time.Duration // this gateway's hold on its Node name, renewed every third of it; default 10s
	TokenTTL     time.Duration // lifetime of dev tokens; default 24h, at most MaxTokenTTL
	// MaxTokenTTL is the longest life a token may have left when it is
	// shown: a token whose exp is further away is refused as bad_token.
	// Default DefaultMaxTokenTTL (30 days).
	MaxTokenTTL time.Duration
	MaxMembers  int // members of one group at most; default (and at most) protocol.MaxMembers, 10,000
	// MaxAuthenticating bounds the connections this gateway holds before
	// they authenticate (each at most AuthTimeout): past it an upgrade is
	// refused with 503 overloaded. Default 10,000.
	MaxAuthenticating int
	// MaxCatchingUp bounds the work of clients catching up that the
	// gateway does at once, apart from the sends: connection setups (once
	// authenticated), syncs and pulls. Past it they wait up to a second,
	// then are refused as overloaded; the bound gives way below it, down
	// to 4, while sends take longer than SendTarget (see catchUp).
	// Default 64; <0 no bound.
	MaxCatchingUp int
	// MaxConnsPerUser bounds the connections of one user to this gateway
	// (devices, browser tabs); past it a connection is refused. Default 32.
	MaxConnsPerUser int
	// DrainRate is how many connections a second Shutdown closes at most
	// (over half the time its context leaves at most), so that the other
	// gateways take their reconnects in a stream rather than in one wave,
	// whatever the clients' back-off. Default 2,000: 20,000 connections
	// drain over 10 s, or over half the shutdown timeout when that is
	// shorter.
	DrainRate int
	// JoinHold is how long an add's reservation of a member's place
	// (store.ReserveJoins) is held, far above the member projector's lag:
	// a join reserved is taken as being written, and its place as taken,
	// until the projector has it. It is the longest a place stays taken by
	// a gateway that crashed before writing the join, and the time a
	// leave is noted (store.MarkLeaving). Default DefaultJoinHold.
	JoinHold time.Duration
	// MaxGroupsPerUser is the most groups a user may be a member of at
	// once: an add that would put one past it is refused whole. A sync
	// lists every group of the user, 13-16 us of Redis CPU each. Default
	// DefaultMaxGroupsPerUser.
	MaxGroupsPerUser int
	// LeftListed is how long a sync lists a group the user left while
	// something of it from before the leave is not acked or not read,
	// from the first sync that listed it as left; once both cursors reach
	// the leave, it is listed no more. Default DefaultLeftListed.
	LeftListed time.Duration

	Logger  *slog.Logger
	Metrics *metrics.Set // optional: sends, pushes, end-to-end latency, connections
}

// RemoveWait bounds a removal's wait for the member's sends in flight (see
// producers.Remove), the gateway's and chatctl's: as long as a send claim
// lasts unless renewed.
const RemoveWait = sendInflight

// DefaultMaxGroupsPerUser is Config.MaxGroupsPerUser's default: a sync of
// 5,000 groups costs Redis 70-80 ms of CPU and its answer is about 400 KB,
// which one login may take and a login storm of a few such users does not
// stall Redis for; far above what people use.
const DefaultMaxGroupsPerUser = 5000

// DefaultLeftListed is Config.LeftListed's default.
const DefaultLeftListed = 30 * 24 * time.Hour

// DefaultJoinHold is Config.JoinHold's default, and chatctl's hold of the
// joins it writes.
const DefaultJoinHold = 30 * time.Second

func (c *Config) setDefaults() {
	if c.Node == "" {
		h, _ := os.Hostname()
		c.Node = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if c.MaxBody == 0 {
		c.MaxBody = 16 << 10
	}
	if c.SendRate == 0 {
		c.SendRate = 50
	}
	if c.SendBurst == 0 {
		c.SendBurst = 100
	}
	if c.SendTarget == 0 {
		c.SendTarget = 250 * time.Millisecond
	}
	if c.MaxSending == 0 {
		c.MaxSending = 1024
	}
	if c.MaxCatchingUp == 0 {
		c.MaxCatchingUp = 64
	}
	if c.QueueSize == 0 {
		c.QueueSize = 512
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = protocol.MaxMembers
	}
	if c.MaxAuthenticating == 0 {
		c.MaxAuthenticating = 10000
	}
	if c.DrainRate == 0 {
		c.DrainRate = 2000
	}
	if c.MaxConnsPerUser == 0 {
		c.MaxConnsPerUser = 32
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = 16 << 20
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 20 * time.Second
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 10 * time.Second
	}
	if c.PresenceTTL == 0 {
		c.PresenceTTL = 30 * time.Second
	}
	if c.NodeLease == 0 {
		c.NodeLease = 10 * time.Second
	}
	if c.JoinHold == 0 {
		c.JoinHold = DefaultJoinHold
	}
	if c.MaxGroupsPerUser == 0 {
		c.MaxGroupsPerUser = DefaultMaxGroupsPerUser
	}
	if c.LeftListed == 0 {
		c.LeftListed = DefaultLeftListed
	}
	if c.MaxTokenTTL == 0 {
		c.MaxTokenTTL = DefaultMaxTokenTTL
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = min(24*time.Hour, c.MaxTokenTTL)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Redis == nil || c.Producer == nil || c.History == nil:
		return errors.New("gateway: Redis, Producer and History are required")
	case len(c.Secret) < 32:
		return errors.New("gateway: the token secret must be at least 32 bytes; set CHAT_JWT_SECRET")
	case c.MaxBody < 1 || c.MaxBody > producers.MaxBody:
		return fmt.Errorf("gateway: max body %d out of range 1..%d (what one Kafka record batch carries by default)", c.MaxBody, producers.MaxBody)
	case c.SendRate < 0 || c.SendBurst < 1 || c.QueueSize < 1 || c.QueueBytes < 1 || c.MaxConnsPerUser < 1 || c.MaxAuthenticating < 1 || c.DrainRate < 1:
		return errors.New("gateway: send rate, burst, queue size, queue bytes, connections per user, connections authenticating and drain rate must be positive")
	case c.MaxMembers < 1 || c.MaxMembers > protocol.MaxMembers:
		return fmt.Errorf("gateway: max members %d out of range 1..%d", c.MaxMembers, protocol.MaxMembers)
	case c.MaxGroupsPerUser < 1:
		return fmt.Errorf("gateway: max groups per user %d must be at least 1; set CHAT_MAX_GROUPS_PER_USER", c.MaxGroupsPerUser)
	case c.LeftListed < 0:
		return fmt.Errorf("gateway: LeftListed %v is negative", c.LeftListed)
	case c.MaxTokenTTL < time.Minute:
		return fmt.Errorf("gateway: max token TTL %v is below 1m: every token would be refused; set CHAT_MAX_TOKEN_TTL to e.g. 720h", c.MaxTokenTTL)
	case c.TokenTTL < 0 || c.TokenTTL > c.MaxTokenTTL:
		return fmt.Errorf("gateway: dev tokens would live %v, past the max token TTL of %v that the gateway takes; lower TokenTTL", c.TokenTTL, c.MaxTokenTTL)
	case c.MaxSending < minSending:
		return fmt.Errorf("gateway: max sending %d is below the floor of %d", c.MaxSending, minSending)
	case c.MaxCatchingUp > 0 && c.MaxCatchingUp < minCatchingUp:
		return fmt.Errorf("gateway: max catching up %d is below the floor of %d (or negative: no bound)", c.MaxCatchingUp, minCatchingUp)
	}
	// The loops tick at a fraction of these (a ticker panics on zero), and
	// a write or an auth given no time at all cuts every client.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"WriteTimeout", c.WriteTimeout}, {"PingInterval", c.PingInterval}, {"AuthTimeout", c.AuthTimeout},
		{"PresenceTTL", c.PresenceTTL}, {"NodeLease", c.NodeLease}, {"JoinHold", c.JoinHold}} {
		if d.v != 0 && d.v < time.Millisecond {
			return fmt.Errorf("gateway: %s is %v; it must be at least 1ms (leave it 0 for the default)", d.name, d.v)
		}
	}
	if c.Node != "" {
		if err := schema.ValidID(c.Node); err != nil {
			return fmt.Errorf("gateway: node name: %w", err)
		}
	}
	return nil
}

// maxFrame is the most bytes a client's frame or HTTP body may hold: a
// message body of MaxBody bytes, each of which JSON may escape to six
// (\u003c for <, as Go's encoder writes it), and room for the other fields.
func (c Config) maxFrame() int64 { return 6*int64(c.MaxBody) + 4096 }

// frameRate is the rate and burst of frames one WebSocket connection may
// send, and of one user's HTTP requests: 4 x SendRate (at least 100) a
// second, bursts of 4 x SendBurst.
func (c Config) frameRate() (float64, int) { return max(c.SendRate*4, 100), c.SendBurst * 4 }
