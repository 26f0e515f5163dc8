package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
)

// launchConfig says what chatbench starts itself when Chatd is set: a fresh
// `chatd dev` (its own data dir, ports chosen by the kernel), optionally on
// a real redis-server and clickhouse-server, and more gateways beside it.
type launchConfig struct {
	Chatd      string // path of a chatd binary; empty: drive the -url given
	Redis      bool   // start a redis-server for it (else chatd dev embeds one)
	ClickHouse bool   // start a clickhouse-server for it (the history store)
	CHNice     int    // the clickhouse-server's CPU niceness, 0 to 19
	Gateways   int    // default 1: chatd dev's own; each more is a `chatd gateway` process
	Keep       bool   // keep the directory (logs, data) after the run
}

func (l *launchConfig) setDefaults() {
	if l.Gateways == 0 {
		l.Gateways = 1
	}
}

// Validate reports the first setting that cannot work.
func (l launchConfig) Validate() error {
	if l.Chatd == "" {
		if l.Redis || l.ClickHouse || l.Gateways > 1 || l.Keep {
			return errors.New("-redis, -clickhouse, -gateways and -keep say what to start: they need -chatd (the chatd binary)")
		}
		return nil
	}
	if st, err := os.Stat(l.Chatd); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("-chatd %q: not an executable file; build one with `go build -o /tmp/ ./cmd/chatd`", l.Chatd)
	}
	if l.CHNice < 0 || l.CHNice > 19 {
		return fmt.Errorf("-clickhouse-nice %d: a niceness is 0 (as chatd) to 19 (the lowest CPU priority)", l.CHNice)
	}
	if l.Gateways < 1 || l.Gateways > 16 {
		return errors.New("-gateways must be 1 to 16")
	}
	if l.Gateways > 1 && !l.Redis {
		return errors.New("-gateways > 1 needs -redis: the gateways share presence and pushes through Redis, and chatd dev's embedded one is not reachable for them")
	}
	return nil
}

// String says what is started: "given" when nothing is.
func (l launchConfig) String() string {
	if l.Chatd == "" {
		return "given"
	}
	parts := []string{"chatd dev"}
	if l.Redis {
		parts = append(parts, "redis-server")
	} else {
		parts = append(parts, "embedded Redis")
	}
	if l.ClickHouse {
		ch := "clickhouse-server"
		if l.CHNice > 0 {
			ch += " (nice " + strconv.Itoa(l.CHNice) + ")"
		}
		parts = append(parts, ch)
	}
	if l.Gateways > 1 {
		parts = append(parts, strconv.Itoa(l.Gateways-1)+" more gateway(s)")
	}
	return strings.Join(parts, " + ")
}

// namedPID is a process whose CPU time (and RSS) a run reports.
type namedPID struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

// deployment is the chatd a run drives: given by flags, or started by
// chatbench (then stop ends it).
type deployment struct {
	URLs  []string
	Admin string
	Kafka string     // "" when unknown
	Procs []namedPID // chatd first
	Dir   string     // launched: logs (and data, with -keep)
	stop  func() error
}

// given is the deployment the flags name.
func given(cfg *Config) *deployment {
	d := &deployment{URLs: cfg.URLs, Admin: cfg.AdminToken, Kafka: cfg.Kafka, stop: func() error { return nil }}
	if cfg.PID > 0 {
		d.Procs = []namedPID{{"chatd", cfg.PID}}
	}
	return d
}

// Log lines of chatd the launcher waits for (slog's text format).
var (
	servingRe = regexp.MustCompile(`msg="serving HTTP".* addr=([0-9.:\[\]]+)`)
	kafkaRe   = regexp.MustCompile(`msg="embedded Kafka broker".* listen=([0-9.:\[\]]+)`)
)

// launch starts a fresh deployment as l says. chatd processes inherit
// chatbench's environment, so CHAT_* settings (CHAT_PARTITIONS, ...) set for
// chatbench reach them.
func launch(ctx context.Context, l launchConfig) (_ *deployment, err error) {
	dir, err := os.MkdirTemp("", "chatbench-")
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	d := &deployment{Dir: dir}
	var stops []func() error // in reverse order
	d.stop = func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		if !l.Keep {
			errs = append(errs, os.RemoveAll(dir))
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = d.stop()
		}
	}()

	env := []string{"CHAT_HTTP_ADDR=127.0.0.1:0", "CHAT_LOG_LEVEL=info", "CHAT_LOG_FORMAT=text"}
	if l.Redis {
		r, err := testserver.StartRedis(dir)
		if err != nil {
			return nil, fmt.Errorf("launch: %w (install it with `make deps`)", err)
		}
		stops = append(stops, r.Stop)
		d.Procs = append(d.Procs, namedPID{"redis-server", r.PID()})
		env = append(env, "CHAT_REDIS_ADDRS="+r.Addr)
	}
	if l.ClickHouse {
		chDir := filepath.Join(dir, "clickhouse")
		if err := os.Mkdir(chDir, 0o755); err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		ch, err := testserver.StartClickHouse(chDir, testserver.Niceness(l.CHNice))
		if err != nil {
			return nil, fmt.Errorf("launch: %w (install it with `make deps`)", err)
		}
		stops = append(stops, ch.Stop)
		d.Procs = append(d.Procs, namedPID{"clickhouse-server", ch.PID()})
		env = append(env, "CHAT_CLICKHOUSE_ADDRS="+ch.Addr)
	}

	data := filepath.Join(dir, "data")
	dev, err := startChild("chatd", l.Chatd, []string{"dev"}, append(env,
		"CHAT_DATA_DIR="+data, "CHAT_KAFKA_LISTEN=127.0.0.1:0"), filepath.Join(dir, "chatd.log"))
	if err != nil {
		return nil, err
	}
	stops = append(stops, dev.stop)
	d.Procs = append([]namedPID{{"chatd", dev.PID()}}, d.Procs...)
	m, err := dev.waitLog(ctx, 2*time.Minute, kafkaRe, servingRe)
	if err != nil {
		return nil, err
	}
	d.Kafka, d.URLs = m[0], []string{"http://" + m[1]}
	secret, err1 := os.ReadFile(filepath.Join(data, "jwt-secret"))
	admin, err2 := os.ReadFile(filepath.Join(data, "admin-token"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("launch: chatd dev's secrets: %w", err)
	}
	d.Admin = strings.TrimSpace(string(admin))

	for i := 2; i <= l.Gateways; i++ {
		name := "chatd-gateway" + strconv.Itoa(i)
		gw, err := startChild(name, l.Chatd, []string{"gateway"}, append(env,
			"CHAT_KAFKA_BROKERS="+d.Kafka, "CHAT_NODE_ID=bench-gw"+strconv.Itoa(i),
			"CHAT_JWT_SECRET="+strings.TrimSpace(string(secret)), "CHAT_ADMIN_TOKEN="+d.Admin),
			filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		stops = append(stops, gw.stop)
		d.Procs = append(d.Procs, namedPID{name, gw.PID()})
		m, err := gw.waitLog(ctx, time.Minute, servingRe)
		if err != nil {
			return nil, err
		}
		d.URLs = append(d.URLs, "http://"+m[0])
	}
	return d, nil
}

// child is a process chatbench started; it dies with chatbench (parent
// death signal) even when chatbench is killed.
type child struct {
	name, logPath string
	*testserver.Proc
}

func startChild(name, bin string, args, env []string, logPath string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := testserver.Spawn(cmd)
	if err != nil {
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	return &child{name: name, logPath: logPath, Proc: p}, nil
}

// waitLog waits until the log has a line matching each pattern and returns
// their first submatches, in order.
func (c *child) waitLog(ctx context.Context, timeout time.Duration, res ...*regexp.Regexp) ([]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(c.logPath)
		out := make([]string, 0, len(res))
		for _, re := range res {
			if m := re.FindSubmatch(b); m != nil {
				out = append(out, string(m[1]))
			}
		}
		if len(out) == len(res) {
			return out, nil
		}
		select {
		case <-c.Done():
			return nil, fmt.Errorf("launch: %s exited while starting; its log (%s) ends:\n%s", c.name, c.logPath, tail(b, 2000))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("launch: %s did not start within %v; its log (%s) ends:\n%s", c.name, timeout, c.logPath, tail(b, 2000))
		}
	}
}

// stop sends SIGTERM and waits for the exit; after 20 s, SIGKILL.
func (c *child) stop() error {
	pid := c.PID()
	if pid == 0 {
		return nil // exited already
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-c.Done():
		return nil
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-c.Done()
		return fmt.Errorf("%s did not stop within 20 s of SIGTERM; killed", c.name)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
