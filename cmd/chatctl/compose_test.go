package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"gopkg.in/yaml.v3"

	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/internal/testserver"
)

// There is no Docker engine on the machines that run the tests, so the
// compose file is checked another way: it parses; every service built from
// the repository runs chatd or chatctl with a command, flags and CHAT_*
// variables they accept; start order and healthchecks hold together; and
// the same settings, with the hosts pointed at the embedded broker and
// real redis-server and clickhouse-server, bring up every role and carry a
// message from one gateway to a client of the other.

type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Profiles    []string          `yaml:"profiles"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Ports []string `yaml:"ports"`
}

var interpolation = regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*)(:-([^}]*))?\}`)

// loadCompose parses docker-compose.yml and resolves ${VAR:-default} to
// its default, as compose does with VAR unset.
func loadCompose(t *testing.T) compose {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	for name, s := range c.Services {
		for k, v := range s.Environment {
			s.Environment[k] = interpolation.ReplaceAllString(v, "$3")
		}
		c.Services[name] = s
	}
	return c
}

// argv is what a service runs: its entrypoint, then its command.
func (s service) argv() []string { return append(slices.Clone(s.Entrypoint), s.Command...) }

// chatdSettings builds chatd and reads its flags and variables from
// `chatd help`.
func chatdSettings(t *testing.T, bin string) (flags, envs map[string]bool, roles []string) {
	t.Helper()
	out, err := exec.Command(bin, "help").CombinedOutput()
	if err != nil {
		t.Fatalf("chatd help: %v\n%s", err, out)
	}
	flags, envs = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)\s+(CHAT_[A-Z_]+)\s`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]], envs[m[2]] = true, true
	}
	for _, m := range regexp.MustCompile(`(?m)^  chatd ([a-z]+)\s`).FindAllStringSubmatch(string(out), -1) {
		roles = append(roles, m[1])
	}
	if len(flags) < 10 || len(roles) < 5 {
		t.Fatalf("could not read chatd's settings from its help (%d flags, roles %v):\n%s", len(flags), roles, out)
	}
	return flags, envs, roles
}

func buildChatd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chatd")
	if out, err := exec.Command("go", "build", "-o", bin, "../chatd").CombinedOutput(); err != nil {
		t.Fatalf("go build chatd: %v\n%s", err, out)
	}
	return bin
}

// checkArgs checks that args are flags (-name value or -name=value, or a
// bool flag alone) among known.
func checkArgs(args []string, known map[string]bool, bools map[string]bool) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return fmt.Errorf("argument %q is not a flag", a)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			return fmt.Errorf("unknown flag -%s", name)
		}
		if !hasValue && !bools[name] {
			i++ // the value
		}
	}
	return nil
}

func TestComposeFileUsesOnlyWhatChatdAndChatctlAccept(t *testing.T) {
	c := loadCompose(t)
	bin := buildChatd(t)
	chatdFlags, chatdEnvs, roles := chatdSettings(t, bin)
	ctlEnvs := map[string]bool{"CHAT_JWT_SECRET": true} // chatctl token's
	for _, e := range envNames() {
		ctlEnvs[e] = true
	}
	for _, need := range []string{"kafka", "redis", "clickhouse", "topics", "persister", "projector", "fanout", "gateway-1", "gateway-2"} {
		if _, ok := c.Services[need]; !ok {
			t.Errorf("docker-compose.yml has no service %q", need)
		}
	}
	if k := c.Services["kafka"]; k.Environment["KAFKA_PROCESS_ROLES"] != "broker,controller" || k.Environment["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] != "false" {
		t.Errorf("kafka must run in KRaft mode (broker,controller) without auto topic creation: %v", k.Environment)
	}
	for name, s := range c.Services {
		for dep, d := range s.DependsOn {
			ds, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			case d.Condition == "service_healthy" && ds.Healthcheck == nil:
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			case d.Condition == "":
				t.Errorf("%s depends on %s without a condition: it would start before %s is ready", name, dep, dep)
			}
		}
		if s.Build == nil {
			if s.Healthcheck == nil {
				t.Errorf("%s has no healthcheck", name)
			}
			continue
		}
		argv := s.argv()
		if len(argv) < 2 {
			t.Errorf("%s: entrypoint and command %v, want chatd ROLE or chatctl COMMAND", name, argv)
			continue
		}
		switch argv[0] {
		case "chatd":
			if !slices.Contains(roles, argv[1]) || argv[1] == "dev" || argv[1] == "help" {
				t.Errorf("%s: chatd role %q, want one of the production roles %v", name, argv[1], roles)
			}
			if err := checkArgs(argv[2:], chatdFlags, nil); err != nil {
				t.Errorf("%s: chatd %v: %v", name, argv[1:], err)
			}
			for k := range s.Environment {
				if !chatdEnvs[k] {
					t.Errorf("%s: chatd does not read %s", name, k)
				}
			}
			for _, need := range []string{"CHAT_KAFKA_BROKERS", "CHAT_REDIS_ADDRS", "CHAT_JWT_SECRET"} {
				if s.Environment[need] == "" {
					t.Errorf("%s: %s is not set", name, need)
				}
			}
			if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "/readyz") {
				t.Errorf("%s: the healthcheck must ask /readyz", name)
			}
			if s.DependsOn["topics"].Condition != "service_completed_successfully" {
				t.Errorf("%s must start after the topics are created", name)
			}
		case "chatctl":
			cmd := strings.Join(argv[1:min(3, len(argv))], " ")
			fl, ok := flagNames(cmd)
			if !ok {
				t.Errorf("%s: chatctl has no command %q", name, cmd)
				continue
			}
			known := map[string]bool{}
			for _, f := range fl {
				known[f] = true
			}
			if err := checkArgs(argv[3:], known, map[string]bool{"dry-run": true, "force": true, "follow": true, "skip-unread": true}); err != nil {
				t.Errorf("%s: chatctl %s: %v", name, cmd, err)
			}
			for k := range s.Environment {
				if !ctlEnvs[k] {
					t.Errorf("%s: chatctl does not read %s", name, k)
				}
			}
		default:
			t.Errorf("%s: the repository's image runs chatd or chatctl, not %q", name, argv[0])
		}
	}
	if t.Failed() {
		return
	}
	t.Run("brings the system up", func(t *testing.T) { composeUp(t, c, bin) })
}

// composeUp runs the compose file's services as processes, in its start
// order, with its settings and the hosts pointed at local servers.
func composeUp(t *testing.T, c compose, bin string) {
	b := testserver.NewBroker(t)
	rs := testserver.NewRedis(t)
	ch := testserver.SharedClickHouse(t)
	hosts := map[string]string{"kafka:9092": b.Addr(), "redis:6379": rs.Addr, "clickhouse:9000": ch.Addr}
	rewrite := func(s service) (map[string]string, string) {
		env := map[string]string{}
		for k, v := range s.Environment {
			for from, to := range hosts {
				v = strings.ReplaceAll(v, from, to)
			}
			env[k] = v
		}
		http := ""
		if strings.HasSuffix(env["CHAT_HTTP_ADDR"], ":8080") {
			port, err := testserver.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			http = fmt.Sprintf("127.0.0.1:%d", port)
			env["CHAT_HTTP_ADDR"] = http
		}
		return env, http
	}

	// The one-shot service first, as its dependants wait for it.
	env, _ := rewrite(c.Services["topics"])
	var out bytes.Buffer
	if err := run(context.Background(), c.Services["topics"].Command[1:], func(k string) string { return env[k] }, &out, &out); err != nil {
		t.Fatalf("topics: %v\n%s", err, out.String())
	}
	addrs := map[string]string{}
	for _, name := range []string{"persister", "projector", "fanout", "gateway-1", "gateway-2"} {
		s := c.Services[name]
		env, http := rewrite(s)
		addrs[name] = http
		cmd := exec.Command(bin, s.Command[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Errorf("%s did not stop within 15 s of SIGTERM", name)
			}
			if t.Failed() {
				t.Logf("%s log:\n%s", name, log.String())
			}
		})
	}
	for name, addr := range addrs {
		waitReady(t, name, "http://"+addr+"/readyz")
	}

	g1, g2 := "http://"+addrs["gateway-1"], addrs["gateway-2"]
	env1 := c.Services["gateway-1"].Environment
	secret, admin := []byte(env1["CHAT_JWT_SECRET"]), env1["CHAT_ADMIN_TOKEN"]
	alice, err := gateway.IssueToken(secret, "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bob, _ := gateway.IssueToken(secret, "bob", time.Hour)
	call := func(method, url, token, body string) (int, []byte) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, body := call("POST", g1+"/v1/admin/groups", admin, `{"gid":"team","members":["alice","bob"]}`); code != 200 {
		t.Fatalf("create group on gateway-1: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+g2+"/v1/ws?token="+bob, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := call("GET", "http://"+g2+"/v1/sync", bob, "")
		if bytes.Contains(body, []byte(`"team"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob's sync never listed team: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond) // the fan-out caches presence for 2 s
	if code, body := call("POST", g1+"/v1/groups/team/messages", alice, `{"cmid":"c1","body":"through the compose settings"}`); code != 200 {
		t.Fatalf("send on gateway-1: %d %s", code, body)
	}
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("bob on gateway-2 got no push: %v", err)
		}
		var f struct {
			Op   string
			Msgs []struct{ Body string }
		}
		json.Unmarshal(frame, &f)
		if f.Op == "push" && len(f.Msgs) > 0 && f.Msgs[0].Body == "through the compose settings" {
			break
		}
	}
	// The persister stored it in ClickHouse: a pull from gateway-2 finds it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, body := call("GET", "http://"+g2+"/v1/groups/team/messages?after=-1", bob, "")
		if code == 200 && bytes.Contains(body, []byte("through the compose settings")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull on gateway-2: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The recipes of docs/operations.md run chatctl on the compose stack,
// whose Kafka, Redis and ClickHouse the host cannot reach: through a
// service that has the settings of the roles, that `up` does not start,
// and that the recipes name. Before, the only way in was the topics
// service, which knew Kafka alone: rebuild, backfill and a reset of the
// persister failed for want of Redis or ClickHouse.
func TestComposeRunsChatctlWithTheSettingsOfTheRoles(t *testing.T) {
	c := loadCompose(t)
	name, ctl := "", service{}
	for n, s := range c.Services {
		if argv := s.argv(); len(s.Profiles) > 0 && len(argv) > 0 && argv[0] == "chatctl" {
			name, ctl = n, s
		}
	}
	if name == "" {
		t.Fatal("docker-compose.yml has no chatctl service in a profile of its own (one that `up` does not start)")
	}
	if len(ctl.Entrypoint) != 1 || ctl.Entrypoint[0] != "chatctl" {
		t.Errorf("%s: entrypoint %v, want [chatctl], so that `docker compose run --rm %s COMMAND` runs chatctl COMMAND", name, ctl.Entrypoint, name)
	}
	roles := c.Services["persister"].Environment
	for _, k := range []string{"CHAT_KAFKA_BROKERS", "CHAT_REDIS_ADDRS", "CHAT_CLICKHOUSE_ADDRS", "CHAT_PARTITIONS", "CHAT_REPLICATION_FACTOR", "CHAT_MESSAGE_RETENTION"} {
		if ctl.Environment[k] == "" || ctl.Environment[k] != roles[k] {
			t.Errorf("%s: %s is %q, want the roles' %q", name, k, ctl.Environment[k], roles[k])
		}
	}
	for _, k := range []string{"CHAT_REDIS_PASSWORD", "CHAT_CLICKHOUSE_DATABASE", "CHAT_CLICKHOUSE_USER", "CHAT_CLICKHOUSE_PASSWORD", "CHAT_JWT_SECRET"} { // the secret: chatctl token
		if ctl.Environment[k] != roles[k] {
			t.Errorf("%s: %s is %q, the roles' %q", name, k, ctl.Environment[k], roles[k])
		}
	}
	for _, dep := range []string{"kafka", "redis", "clickhouse"} {
		if ctl.DependsOn[dep].Condition != "service_healthy" {
			t.Errorf("%s must wait for %s to be healthy", name, dep)
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The recipes' command lines: each chatctl in a shell block runs
	// through the service.
	prefix := "docker compose run --rm " + name + " "
	var recipes int
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		for _, line := range strings.Split(block[1], "\n") {
			switch {
			case strings.HasPrefix(line, "chatctl "):
				t.Errorf("docs/operations.md runs %q, which the compose stack cannot serve from the host; want %s...", line, prefix)
			case strings.HasPrefix(line, prefix):
				recipes++
				args := strings.Fields(strings.TrimPrefix(line, prefix))
				if i := slices.Index(args, "#"); i >= 0 {
					args = args[:i]
				}
				if _, err := parseArgs(args); err != nil {
					t.Errorf("docs/operations.md: %q: %v", line, err)
				}
			}
		}
	}
	if recipes < 5 {
		t.Errorf("docs/operations.md runs chatctl through %q %d times, want the recipes to", prefix, recipes)
	}

	// The service's settings, the hosts pointed at local servers, serve
	// the commands that need Redis and ClickHouse.
	b := testserver.NewBroker(t)
	rs := testserver.NewRedis(t)
	ch := testserver.SharedClickHouse(t)
	env := map[string]string{"CHAT_CLICKHOUSE_DATABASE": fmt.Sprintf("ctl_compose_%d", time.Now().UnixNano()%1e6)}
	for k, v := range ctl.Environment {
		v = strings.NewReplacer("kafka:9092", b.Addr(), "redis:6379", rs.Addr, "clickhouse:9000", ch.Addr).Replace(v)
		env[k] = v
	}
	for _, args := range [][]string{
		{"topics", "create"},
		ctl.Command,
		{"rebuild", "acks"},
		{"backfill", "-tables", "acks"},
		{"consumer-groups", "reset", "chat.persister", "-to", "earliest"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &out); err != nil {
			t.Errorf("%s with the settings of the %s service: %v\n%s", strings.Join(args, " "), name, err, out.String())
		}
	}
}

// parseArgs parses args as chatctl would, without running the command.
func parseArgs(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("no command")
	}
	name, rest := args[0], args[1:]
	if _, ok := commands[name]; !ok && len(rest) > 0 {
		name, rest = name+" "+rest[0], rest[1:]
	}
	cmd, ok := commands[name]
	if !ok {
		return nil, fmt.Errorf("chatctl has no command %q", name)
	}
	c := newCommand(name, func(string) string { return "" }, io.Discard, io.Discard)
	if cmd.flags != nil {
		cmd.flags(c)
	}
	return c.parse(rest)
}

func waitReady(t *testing.T, name, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 200 within 60 s (%v)", name, url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
