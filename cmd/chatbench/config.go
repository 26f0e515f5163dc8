package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// Config is one benchmark run. Zero values take the defaults written beside
// each field.
type Config struct {
	// What to drive: the gateways of a running chatd (URLs, AdminToken,
	// PID, Kafka), or a chatd this run starts itself (Launch.Chatd set).
	URLs       []string     // gateway base URLs; default http://127.0.0.1:8080; clients are spread round-robin
	AdminToken string       // required for the load and pull modes: creates the groups
	PID        int          // optional: the chatd process, for RSS (idle mode) and CPU use
	Kafka      string       // optional: a Kafka broker of the deployment: counts the records of chat.* per message; the pull mode's preload
	Launch     launchConfig // Launch.Chatd set: start a fresh deployment for the run (each sweep step gets its own)

	// The load's shape.
	Users        int           // default Groups*GroupSize: every user in one group
	Groups       int           // default 20
	GroupSize    int           // default 50; members of group i are users i*GroupSize.. (mod Users)
	Online       float64       // default 1: fraction of users connected (spread evenly over the groups)
	Rate         float64       // default 1000: messages per second, scheduled by the clock
	Duration     time.Duration // default 30s: measured time after the warm-up
	Warmup       time.Duration // default 5s: sent, loss-checked, but not measured
	Drain        time.Duration // default 30s: longest wait for deliveries (pushes, then final pulls) after the last send
	BodySize     int           // default 64: bytes per message body (the send timestamp fits in 40)
	AckEvery     int           // default 0 = the SDK's (10)
	AckInterval  time.Duration // default 0 = the SDK's (1s)
	PageSize     int           // default 0 = the SDK's (200): messages per pull page
	Read         float64       // default 0: fraction of delivered messages (not their own) each online member marks read
	Churn        float64       // default 0: online members per second that disconnect, to come back after ChurnOffline
	ChurnOffline time.Duration // default 5s
	OfflineCheck int           // offline members that log in after the run and must pull every message: -1 all (the flag's default), 0 none, N that many
	SendTimeout  time.Duration // default 30s: a Send still unanswered after this counts as an error
	Concurrency  int           // default 32: parallel setup requests and dials
	Prefix       string        // default a fresh random one: user and group ids start with it

	// Other modes.
	Idle       int           // > 0: idle mode, open this many connections instead of the load
	IdleSettle time.Duration // default 10s: idle mode: wait this long after the last dial before measuring
	Pull       int           // > 0: pull mode: preload this many messages into each group, then time members pulling them all
	PullUsers  int           // default 5: pull mode: members who each pull everything once, one after the other
	Sweep      []float64     // sweep mode: one load step per rate
	FindMax    bool          // search mode: the highest rate whose end-to-end p99 stays within Target
	MaxRate    float64       // default 50000: search mode: the highest rate tried
	Target     time.Duration // default 100ms: search mode: the p99 a passing step must keep
	Tolerance  float64       // default 0.1: search mode: stop when the bracket is this narrow (relative)
	MaxSteps   int           // default 10: search mode: at most this many steps
	Plot       string        // optional (sweep, search): render latency percentiles against the rate into this PNG

	// Output.
	JSON       string // optional: write the results there as JSON
	Quiet      bool   // no progress line
	CPUProfile string // optional: chatbench's own CPU profile
	MemProfile string // optional: chatbench's own heap profile at the end
}

func (c *Config) setDefaults() {
	if len(c.URLs) == 0 {
		c.URLs = []string{"http://127.0.0.1:8080"}
	}
	if c.Groups == 0 {
		c.Groups = 20
	}
	if c.GroupSize == 0 {
		c.GroupSize = 50
	}
	if c.Users == 0 {
		c.Users = c.Groups * c.GroupSize
	}
	if c.Online == 0 {
		c.Online = 1
	}
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Drain == 0 {
		c.Drain = 30 * time.Second
	}
	if c.BodySize == 0 {
		c.BodySize = 64
	}
	if c.ChurnOffline == 0 {
		c.ChurnOffline = 5 * time.Second
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = 30 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Prefix == "" {
		c.Prefix = "b" + strings.ToLower(rand.Text()[:8])
	}
	if c.IdleSettle == 0 {
		c.IdleSettle = 10 * time.Second
	}
	if c.PullUsers == 0 {
		c.PullUsers = 5
	}
	if c.MaxRate == 0 {
		c.MaxRate = 50000
	}
	if c.Target == 0 {
		c.Target = 100 * time.Millisecond
	}
	if c.Tolerance == 0 {
		c.Tolerance = 0.1
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = 10
	}
	c.Launch.setDefaults()
}

// chatdPath reports whether path holds one of chatd's own paths, which
// chatbench adds to -url itself. Another path is a proxy's prefix.
func chatdPath(path string) bool {
	for _, seg := range strings.Split(path, "/") {
		switch seg {
		case "v1", "healthz", "readyz", "metrics":
			return true
		}
	}
	return false
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("-url %q: want http://host:port (several separated by commas)", u)
		}
		if chatdPath(p.Path) || p.RawQuery != "" {
			// chatbench adds the paths (/healthz, /v1/ws): with one of
			// chatd's own, it waited 2 minutes for /v1/ws/healthz to
			// answer. Another path is a proxy's prefix, kept.
			return fmt.Errorf("-url %q: want the gateway's base URL, %s://%s, without chatd's paths: chatbench adds /v1/ws and the API's paths itself", u, p.Scheme, p.Host)
		}
	}
	if err := schema.ValidID(c.Prefix + "-u0"); err != nil {
		return fmt.Errorf("-prefix %q: %w", c.Prefix, err)
	}
	if err := c.Launch.Validate(); err != nil {
		return err
	}
	modes := 0
	for _, on := range []bool{c.Idle > 0, c.Pull > 0, len(c.Sweep) > 0, c.FindMax} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return errors.New("-idle, -pull, -sweep and -find-max are separate modes: give one of them")
	case c.Idle < 0 || c.Pull < 0:
		return errors.New("-idle and -pull must be >= 0")
	case c.Idle > 0:
		return nil // the load settings do not matter
	case c.AdminToken == "" && c.Launch.Chatd == "":
		return errors.New("no admin token: pass -admin-token or set CHAT_ADMIN_TOKEN (chatd dev logs it and keeps it in <data-dir>/admin-token), or let chatbench start chatd with -chatd")
	case c.Groups < 1 || c.GroupSize < 1 || c.GroupSize > 10000:
		return errors.New("-groups must be >= 1 and -group-size 1 to 10000")
	case c.GroupSize > c.Users:
		return fmt.Errorf("-group-size %d is larger than -users %d", c.GroupSize, c.Users)
	case c.BodySize < 40 || c.BodySize > 16<<10:
		return errors.New("-body-size must be 40 to 16384 bytes")
	case c.AckEvery < 0 || c.AckInterval < 0:
		return errors.New("-ack-every and -ack-interval must be >= 0")
	case c.PageSize < 0 || c.PageSize > protocol.MaxLimit:
		return fmt.Errorf("-page-size must be 0 (the SDK's default) to %d", protocol.MaxLimit)
	case c.Pull > 0 && c.Kafka == "" && c.Launch.Chatd == "":
		return errors.New("-pull preloads the groups through Kafka: pass -kafka host:port of the deployment's broker, or let chatbench start chatd with -chatd")
	case c.Pull > 0 && (c.PullUsers < 1 || c.PullUsers+1 > c.GroupSize):
		return errors.New("-pull: -pull-users must be >= 1 and -group-size at least -pull-users + 1 (a sender besides the readers)")
	case c.Pull > 0:
		return nil
	case !(c.Online > 0 && c.Online <= 1): // NaN too
		return errors.New("-online must be in (0, 1]")
	case !hasInterval(c.Rate):
		return fmt.Errorf("-rate %g: want a rate > 0 of at most %g a second", c.Rate, mostPerSecond)
	case c.Duration <= 0 || c.Warmup < 0 || c.Drain < 0:
		return errors.New("-duration must be > 0, -warmup and -drain >= 0")
	case !(c.Read >= 0 && c.Read <= 1):
		return errors.New("-read must be in [0, 1]: the fraction of delivered messages marked read")
	case c.Churn != 0 && !hasInterval(c.Churn) || c.ChurnOffline < 0:
		return fmt.Errorf("-churn %g and -churn-offline %v: want 0, or a rate > 0 of at most %g a second, and a duration >= 0", c.Churn, c.ChurnOffline, mostPerSecond)
	case c.OfflineCheck < -1:
		return errors.New("-offline-check must be -1 (every offline member), 0 (none) or a number of members")
	}
	for _, r := range c.Sweep {
		if !hasInterval(r) {
			return fmt.Errorf("-sweep: rate %g: every rate must be > 0 and at most %g a second", r, mostPerSecond)
		}
	}
	if c.Plot != "" && len(c.Sweep) == 0 && !c.FindMax {
		return fmt.Errorf("-plot %s draws latency against the rate of several steps: add -sweep R,R,... or -find-max, or drop -plot (a single run writes no plot)", c.Plot)
	}
	if c.FindMax && (!hasInterval(c.MaxRate) || !(c.MaxRate >= c.Rate) || c.Target <= 0 || !(c.Tolerance > 0) || c.MaxSteps < 1) {
		return errors.New("-find-max: want -max-rate >= -rate, -p99-target > 0, -tolerance > 0, -max-steps >= 1")
	}
	return nil
}

// mostPerSecond is the most events a second whose interval a time.Duration
// holds: one nanosecond.
const mostPerSecond = float64(time.Second)

// hasInterval reports whether events at rate per second are spaced by a
// positive time.Duration, as the send schedule (drain.go) and the churn
// ticker (churn.go) space them: a rate of 0, NaN, infinite, or above
// mostPerSecond has none (time.NewTicker panics on it, the schedule sends
// without end), and one so low that its interval overflows neither.
func hasInterval(rate float64) bool {
	d := float64(time.Second) / rate
	return d >= 1 && d < math.MaxInt64
}
