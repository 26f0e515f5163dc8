package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/groupchat/chatd/internal/flags"
)

// parseConfig reads the flags; CHAT_ADMIN_TOKEN is the admin token's default.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("chatbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}

	urls := fs.String("url", "http://127.0.0.1:8080", "gateway base URL; several comma-separated = several gateways (clients spread round-robin)")
	fs.StringVar(&c.AdminToken, "admin-token", "", "admin token (default $CHAT_ADMIN_TOKEN)")
	tokFile := fs.String("admin-token-file", "", "read the admin token from this file (chatd dev: <data-dir>/admin-token)")
	fs.IntVar(&c.PID, "pid", 0, "pid of the chatd process (RSS in idle mode; CPU use in load mode)")
	fs.StringVar(&c.Kafka, "kafka", "", "a Kafka broker of the deployment (host:port): ack and receipt records per message; the pull mode's preload")

	fs.StringVar(&c.Launch.Chatd, "chatd", "", "start this chatd binary (`chatd dev`, fresh data dir, kernel-chosen ports) for the run, and stop it after; every sweep step gets a fresh one")
	fs.BoolVar(&c.Launch.Redis, "redis", false, "with -chatd: start a redis-server for it (else chatd dev embeds one)")
	fs.BoolVar(&c.Launch.ClickHouse, "clickhouse", false, "with -chatd: start a clickhouse-server for it (the history store)")
	fs.IntVar(&c.Launch.CHNice, "clickhouse-nice", 19, "with -clickhouse: its CPU niceness, 0 (as chatd) to 19 (lowest priority: its bursts of inserts and merges then wait for chatd)")
	fs.IntVar(&c.Launch.Gateways, "gateways", 1, "with -chatd: gateways to start (`chatd gateway` beside `chatd dev`; more than 1 needs -redis)")
	fs.BoolVar(&c.Launch.Keep, "keep", false, "with -chatd: keep the deployment's directory (logs, data) after the run")

	fs.IntVar(&c.Users, "users", 0, "users (default groups × group-size: one group each)")
	fs.IntVar(&c.Groups, "groups", 20, "groups")
	fs.IntVar(&c.GroupSize, "group-size", 50, "members per group")
	fs.Float64Var(&c.Online, "online", 1, "fraction of users connected while the load runs; the others log in afterwards and pull (see -offline-check)")
	fs.Float64Var(&c.Rate, "rate", 1000, "messages per second, open loop, spread over the online members (-find-max: the first rate tried)")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "measured time")
	fs.DurationVar(&c.Warmup, "warmup", 5*time.Second, "load before measuring (loss-checked, not measured)")
	fs.DurationVar(&c.Drain, "drain", 30*time.Second, "longest wait for deliveries after the last send (pushes, then rounds of final pulls)")
	fs.IntVar(&c.BodySize, "body-size", 64, "bytes per message body")
	fs.IntVar(&c.AckEvery, "ack-every", 0, "SDK AckEvery (0: its default, 10)")
	fs.DurationVar(&c.AckInterval, "ack-interval", 0, "SDK AckInterval (0: its default, 1s)")
	fs.IntVar(&c.PageSize, "page-size", 0, "SDK PageSize, messages per pull page (0: its default, 200)")
	fs.Float64Var(&c.Read, "read", 0, "read receipts: fraction of delivered messages (not their own) each online member marks read (0: none)")
	fs.Float64Var(&c.Churn, "churn", 0, "online members per second that disconnect and come back after -churn-offline")
	fs.DurationVar(&c.ChurnOffline, "churn-offline", 5*time.Second, "how long a churned member stays away")
	fs.IntVar(&c.OfflineCheck, "offline-check", -1, "offline members that log in after the run and must pull every message of their groups (-1: all, 0: none)")
	fs.DurationVar(&c.SendTimeout, "send-timeout", 30*time.Second, "a send unanswered after this is an error")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "parallel setup requests and dials")
	fs.StringVar(&c.Prefix, "prefix", "", "prefix of this run's user and group ids (default random)")

	fs.IntVar(&c.Idle, "idle", 0, "idle mode: open this many idle connections and report chatd's RSS per connection (needs -pid or -chatd)")
	fs.DurationVar(&c.IdleSettle, "idle-settle", 10*time.Second, "idle mode: wait after the last dial before reading RSS")
	fs.IntVar(&c.Pull, "pull", 0, "pull mode: preload this many messages into each of -groups groups, then time members pulling them all")
	fs.IntVar(&c.PullUsers, "pull-users", 5, "pull mode: members who each pull everything once, one after the other")
	sweep := fs.String("sweep", "", "sweep mode: comma-separated rates, one load step each (e.g. 50,100,200,400)")
	fs.BoolVar(&c.FindMax, "find-max", false, "search mode: find the highest rate whose end-to-end p99 stays within -p99-target (doubling from -rate, then bisecting)")
	fs.Float64Var(&c.MaxRate, "max-rate", 50000, "search mode: highest rate tried")
	fs.DurationVar(&c.Target, "p99-target", 100*time.Millisecond, "search mode: the end-to-end p99 a passing step must keep")
	fs.Float64Var(&c.Tolerance, "tolerance", 0.1, "search mode: stop bisecting when the bracket is this narrow (relative)")
	fs.IntVar(&c.MaxSteps, "max-steps", 10, "search mode: at most this many steps")
	fs.StringVar(&c.Plot, "plot", "", "sweep and search modes: render latency percentiles against the rate into this PNG")

	fs.StringVar(&c.JSON, "json", "", "write machine-readable results to this file")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress line on stderr")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write chatbench's own CPU profile to this file")
	fs.StringVar(&c.MemProfile, "memprofile", "", "write chatbench's own heap profile to this file at the end")
	// A value a flag cannot take is answered with what the flag wants, not
	// with the whole list of flags above "invalid value "10" for flag
	// -duration: parse error". -h prints the usage and the list.
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return nil, err
	}
	if err != nil {
		return nil, flags.Explain(fs, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; chatbench takes flags only (chatbench -h lists them)", fs.Arg(0))
	}
	if c.AdminToken == "" {
		c.AdminToken = getenv("CHAT_ADMIN_TOKEN") // read after parsing: -h prints the defaults
	}
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			c.URLs = append(c.URLs, u)
		}
	}
	if *tokFile != "" && c.AdminToken == "" {
		b, err := os.ReadFile(*tokFile)
		if err != nil {
			return nil, fmt.Errorf("-admin-token-file: %w; name the file that holds the admin token (chatd dev keeps it in <data-dir>/admin-token, e.g. data/admin-token)", err)
		}
		// Empty, it was taken for no token at all: "no admin token: pass
		// -admin-token or set CHAT_ADMIN_TOKEN", which named not the file.
		if c.AdminToken = strings.TrimSpace(string(b)); c.AdminToken == "" {
			return nil, fmt.Errorf("-admin-token-file %s is empty; name the file that holds the admin token (chatd dev keeps it in <data-dir>/admin-token), or pass -admin-token", *tokFile)
		}
	}
	var rates []float64
	rates, err = parseRates(*sweep)
	if err != nil {
		return nil, err
	}
	c.Sweep = rates
	c.setDefaults()
	return c, c.Validate()
}

// parseRates reads "50,100,200" (empty: none).
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("-sweep %q: %q is not a rate; want numbers separated by commas, e.g. 50,100,200", s, f)
		}
		out = append(out, v)
	}
	return out, nil
}

const usage = `chatbench drives chatd over WebSocket through the Go client SDK and measures it.

Modes:
  (default)    the load: N users in G groups, open-loop sends at -rate, a loss check at the end
  -sweep R,..  one load step per rate (-plot draws latency against the rate)
  -find-max    the highest rate whose end-to-end p99 stays within -p99-target
  -pull N      preload N messages into each group, time members pulling them all
  -idle N      N idle connections, chatd's RSS per connection

Against a running chatd (-url, -admin-token, -pid), or one it starts itself:
  chatbench -chatd ./chatd -redis -clickhouse -groups 20 -group-size 50 -rate 1000

Flags:
`
