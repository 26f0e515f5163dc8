package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/groupchat/chatd/schema"
)

// Config is one benchmark run. Zero values take the defaults written beside
// each field.
type Config struct {
	URLs        []string      // gateway base URLs; default http://127.0.0.1:8080; clients are spread round-robin
	AdminToken  string        // required for the load mode: creates the groups
	Users       int           // default Groups*GroupSize: every user in one group
	Groups      int           // default 20
	GroupSize   int           // default 50; members of group i are users i*GroupSize.. (mod Users)
	Online      float64       // default 1: fraction of users connected (spread evenly over the groups)
	Rate        float64       // default 1000: messages per second, scheduled by the clock
	Duration    time.Duration // default 30s: measured time after the warm-up
	Warmup      time.Duration // default 5s: sent, loss-checked, but not measured
	Drain       time.Duration // default 30s: longest wait for deliveries (pushes, then final pulls) after the last send
	BodySize    int           // default 64: bytes per message body (the send timestamp fits in 40)
	AckEvery    int           // default 0 = the SDK's (10)
	AckInterval time.Duration // default 0 = the SDK's (1s)
	SendTimeout time.Duration // default 30s: a Send still unanswered after this counts as an error
	Concurrency int           // default 32: parallel setup requests and dials
	Prefix      string        // default a fresh random one: user and group ids start with it
	JSON        string        // optional: write the results there as JSON
	Idle        int           // > 0: idle mode, open this many connections instead of the load
	IdleSettle  time.Duration // default 10s: idle mode: wait this long after the last dial before measuring
	PID         int           // optional: the chatd process, for RSS (idle mode) and CPU use
	Quiet       bool          // no progress line
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
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("-url %q: want http://host:port (several separated by commas)", u)
		}
	}
	if err := schema.ValidID(c.Prefix + "-u0"); err != nil {
		return fmt.Errorf("-prefix %q: %w", c.Prefix, err)
	}
	switch {
	case c.Idle < 0:
		return errors.New("-idle must be >= 0")
	case c.Idle > 0:
		return nil // the load settings do not matter
	case c.AdminToken == "":
		return errors.New("no admin token: pass -admin-token or set CHAT_ADMIN_TOKEN (chatd dev logs it and keeps it in <data-dir>/admin-token)")
	case c.Groups < 1 || c.GroupSize < 1 || c.GroupSize > 10000:
		return errors.New("-groups must be >= 1 and -group-size 1 to 10000")
	case c.GroupSize > c.Users:
		return fmt.Errorf("-group-size %d is larger than -users %d", c.GroupSize, c.Users)
	case c.Online <= 0 || c.Online > 1:
		return errors.New("-online must be in (0, 1]")
	case c.Rate <= 0:
		return errors.New("-rate must be > 0")
	case c.Duration <= 0 || c.Warmup < 0 || c.Drain < 0:
		return errors.New("-duration must be > 0, -warmup and -drain >= 0")
	case c.BodySize < 40 || c.BodySize > 16<<10:
		return errors.New("-body-size must be 40 to 16384 bytes")
	case c.AckEvery < 0 || c.AckInterval < 0:
		return errors.New("-ack-every and -ack-interval must be >= 0")
	}
	return nil
}

// parseConfig reads the flags; CHAT_ADMIN_TOKEN is the admin token's default.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("chatbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	urls := fs.String("url", "http://127.0.0.1:8080", "gateway base URL; several comma-separated = several gateways (clients spread round-robin)")
	fs.StringVar(&c.AdminToken, "admin-token", getenv("CHAT_ADMIN_TOKEN"), "admin token (default $CHAT_ADMIN_TOKEN)")
	tokFile := fs.String("admin-token-file", "", "read the admin token from this file (chatd dev: <data-dir>/admin-token)")
	fs.IntVar(&c.Users, "users", 0, "users (default groups × group-size: one group each)")
	fs.IntVar(&c.Groups, "groups", 20, "groups")
	fs.IntVar(&c.GroupSize, "group-size", 50, "members per group")
	fs.Float64Var(&c.Online, "online", 1, "fraction of users connected")
	fs.Float64Var(&c.Rate, "rate", 1000, "messages per second, open loop, spread over the online members")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "measured time")
	fs.DurationVar(&c.Warmup, "warmup", 5*time.Second, "load before measuring (loss-checked, not measured)")
	fs.DurationVar(&c.Drain, "drain", 30*time.Second, "longest wait for deliveries after the last send (pushes, then rounds of final pulls)")
	fs.IntVar(&c.BodySize, "body-size", 64, "bytes per message body")
	fs.IntVar(&c.AckEvery, "ack-every", 0, "SDK AckEvery (0: its default, 10)")
	fs.DurationVar(&c.AckInterval, "ack-interval", 0, "SDK AckInterval (0: its default, 1s)")
	fs.DurationVar(&c.SendTimeout, "send-timeout", 30*time.Second, "a send unanswered after this is an error")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "parallel setup requests and dials")
	fs.StringVar(&c.Prefix, "prefix", "", "prefix of this run's user and group ids (default random)")
	fs.StringVar(&c.JSON, "json", "", "write machine-readable results to this file")
	fs.IntVar(&c.Idle, "idle", 0, "idle mode: open this many idle connections and report chatd's RSS per connection (needs -pid)")
	fs.DurationVar(&c.IdleSettle, "idle-settle", 10*time.Second, "idle mode: wait after the last dial before reading RSS")
	fs.IntVar(&c.PID, "pid", 0, "pid of the chatd process (RSS in idle mode; CPU use in load mode)")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress line on stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			c.URLs = append(c.URLs, u)
		}
	}
	if *tokFile != "" && c.AdminToken == "" {
		b, err := os.ReadFile(*tokFile)
		if err != nil {
			return nil, fmt.Errorf("-admin-token-file: %w", err)
		}
		c.AdminToken = strings.TrimSpace(string(b))
	}
	c.setDefaults()
	return c, c.Validate()
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	cfg, err := parseConfig(args, getenv, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	for _, u := range cfg.URLs {
		if err := newAPI(u, "", 1).waitHealthy(ctx, time.Minute); err != nil {
			return err
		}
	}
	if cfg.Idle > 0 {
		return runIdle(ctx, cfg, os.Stdout)
	}
	return runLoad(ctx, cfg, os.Stdout)
}
