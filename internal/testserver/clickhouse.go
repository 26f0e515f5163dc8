package testserver

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeouts of the ClickHouse server's life cycle.
const (
	clickHouseStartTimeout = 60 * time.Second // until it answers /ping
	clickHouseStopTimeout  = 10 * time.Second // SIGTERM to SIGKILL
	pauseTimeout           = 10 * time.Second // SIGSTOP to every thread stopped
)

// clickHouseInstallHint ends every failure of NewClickHouse and
// SharedClickHouse.
const clickHouseInstallHint = "install it with `make deps` (apt-get install clickhouse-server)"

var errAddrInUse = errors.New("address already in use")

// ClickHouse is a clickhouse-server child process listening on 127.0.0.1.
// Stop, Kill and Start may be called any number of times, in any order; the
// ports and the directory (and so the data) stay the same.
type ClickHouse struct {
	Addr     string // native protocol, 127.0.0.1:port
	HTTPAddr string // HTTP interface, 127.0.0.1:port
	// SecureAddr is the native protocol over TLS, 127.0.0.1:port, with
	// the TLS option only.
	SecureAddr string
	Dir        string // config.xml, users.xml, data/ and *.log

	bin  string    // clickhouse-server, or clickhouse with args ["server"]
	args []string  // before --config-file
	nice int       // the server's CPU niceness (0: as the caller's)
	tls  *TLSFiles // the TLS option's certificate

	mu   sync.Mutex
	proc *Proc // the running server, nil when stopped
}

// ClickHouseOption changes how StartClickHouse runs the server.
type ClickHouseOption func(*ClickHouse)

// Niceness runs the server (and every later Start) at CPU niceness n, 1 to
// 19 (19: the lowest priority), through nice(1): a server sharing its cores
// with latency-bound processes then takes only the CPU they leave.
func Niceness(n int) ClickHouseOption {
	return func(c *ClickHouse) { c.nice = n }
}

// SecurePort makes the server serve the native protocol over TLS too, at
// SecureAddr, with the certificate of f.
func SecurePort(f *TLSFiles) ClickHouseOption {
	return func(c *ClickHouse) { c.tls = f }
}

// StartClickHouse writes a config into dir (which must exist and hold no
// earlier server), starts clickhouse-server from PATH on free loopback ports
// and waits until it answers, for up to 60 s. A failure to start includes
// the tail of the server's logs. Starting as root works: the data directory
// belongs to the user running the test, which is all the server checks.
func StartClickHouse(dir string, opts ...ClickHouseOption) (*ClickHouse, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.xml")); err == nil {
		return nil, fmt.Errorf("testserver: clickhouse: %s already holds a server; restart it with Start", dir)
	}
	bin, args, err := findClickHouse()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // FreePort races other processes
		ports, err := freePorts(4)
		if err != nil {
			return nil, err
		}
		c := &ClickHouse{
			Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
			Dir:      dir,
			bin:      bin,
			args:     args,
		}
		for _, o := range opts {
			o(c)
		}
		if c.nice < 0 || c.nice > 19 {
			return nil, fmt.Errorf("testserver: clickhouse: niceness %d is outside 0..19", c.nice)
		}
		secure := ""
		if c.tls != nil {
			c.SecureAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3]))
			secure = fmt.Sprintf(`
    <tcp_port_secure>%d</tcp_port_secure>
    <openSSL>
        <server>
            <certificateFile>%s</certificateFile>
            <privateKeyFile>%s</privateKeyFile>
            <verificationMode>none</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>
            <disableProtocols>sslv2,sslv3</disableProtocols>
        </server>
    </openSSL>`, ports[3], c.tls.CertFile, c.tls.KeyFile)
		}
		if err := c.writeConfig(ports[0], ports[1], ports[2], secure); err != nil {
			return nil, err
		}
		if lastErr = c.Start(); lastErr == nil {
			return c, nil
		}
		if !errors.Is(lastErr, errAddrInUse) {
			break
		}
	}
	return nil, lastErr
}

// NewClickHouse starts a server in t.TempDir() and stops it when the test
// ends. A failure to start fails the test (it never skips).
func NewClickHouse(t testing.TB, opts ...ClickHouseOption) *ClickHouse {
	t.Helper()
	c, err := StartClickHouse(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("%v\n%s", err, clickHouseInstallHint)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Logf("%v", err)
		}
	})
	return c
}

var shared struct {
	once sync.Once
	c    *ClickHouse
	err  error
}

// SharedClickHouse returns one server per test binary, started on first
// use, for tests that isolate themselves (a database each) and never Stop,
// Kill or Pause it. It is not stopped by a cleanup: the parent death signal
// kills it when the test binary exits, and a later SharedClickHouse removes
// the directories of servers whose test binary is gone.
func SharedClickHouse(t testing.TB) *ClickHouse {
	t.Helper()
	shared.once.Do(func() {
		removeStaleSharedDirs()
		dir, err := os.MkdirTemp("", fmt.Sprintf("chatd-clickhouse-%d-", os.Getpid()))
		if err != nil {
			shared.err = fmt.Errorf("testserver: clickhouse: %w", err)
			return
		}
		if shared.c, shared.err = StartClickHouse(dir); shared.err != nil {
			os.RemoveAll(dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("%v\n%s", shared.err, clickHouseInstallHint)
	}
	return shared.c
}

// removeStaleSharedDirs deletes the directories of shared servers whose
// test binary (the pid in the name) no longer runs.
func removeStaleSharedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "chatd-clickhouse-*-*"))
	for _, d := range dirs {
		f := strings.Split(filepath.Base(d), "-")
		pid, err := strconv.Atoi(f[2])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// Start starts the server again (after Stop or Kill) on the same ports and
// directory and waits until it answers.
func (c *ClickHouse) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil && !c.proc.exited() {
		return fmt.Errorf("testserver: clickhouse on %s: already running", c.Addr)
	}
	out, err := os.OpenFile(filepath.Join(c.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: clickhouse: %w", err)
	}
	defer out.Close() // the child holds its own descriptor
	args := append(append([]string(nil), c.args...), "--config-file="+filepath.Join(c.Dir, "config.xml"))
	cmd := exec.Command(c.bin, args...)
	if c.nice > 0 {
		nice, err := exec.LookPath("nice")
		if err != nil {
			return fmt.Errorf("testserver: clickhouse at niceness %d needs nice(1) (coreutils): %w", c.nice, err)
		}
		cmd = exec.Command(nice, append([]string{"-n", strconv.Itoa(c.nice), c.bin}, args...)...) // nice execs the server: same pid
	}
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "CLICKHOUSE_WATCHDOG_ENABLE=0") // no forked watchdog on newer releases
	p, err := Spawn(cmd)
	if err != nil {
		return fmt.Errorf("testserver: start %s: %w", c.bin, err)
	}
	c.proc = p
	if err := c.waitReady(p); err != nil {
		p.signal(syscall.SIGKILL)
		<-p.done
		c.proc = nil
		tail := c.logTail()
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w (%w)", err, errAddrInUse)
		}
		return fmt.Errorf("testserver: clickhouse on %s (dir %s): %w\n--- log tail ---\n%s", c.Addr, c.Dir, err, tail)
	}
	return nil
}

// Stop sends SIGTERM and waits for the server to exit; after 10 s it sends
// SIGKILL and returns an error saying so. Stopping a stopped server is a
// no-op.
func (c *ClickHouse) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	p.signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(clickHouseStopTimeout):
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("testserver: clickhouse on %s: no exit within %v of SIGTERM; killed", c.Addr, clickHouseStopTimeout)
}

// Kill sends SIGKILL and waits for the server to exit. Killing a stopped
// server is a no-op.
func (c *ClickHouse) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.proc; p != nil {
		c.proc = nil
		p.signal(syscall.SIGKILL)
		<-p.done
	}
	return nil
}

// Pause freezes the server (SIGSTOP): it keeps its sockets but answers
// nothing, as a hung server would. It returns once every thread of the
// server has stopped: kill(2) returns before that, and on a busy machine a
// server "paused" that way still answered a call made right after. Resume
// undoes it.
func (c *ClickHouse) Pause() error {
	if err := c.signalRunning(syscall.SIGSTOP); err != nil {
		return err
	}
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("testserver: clickhouse on %s: not running", c.Addr)
	}
	if err := p.waitStopped(pauseTimeout); err != nil {
		return fmt.Errorf("testserver: clickhouse on %s: %w", c.Addr, err)
	}
	return nil
}

// Resume continues a paused server (SIGCONT).
func (c *ClickHouse) Resume() error { return c.signalRunning(syscall.SIGCONT) }

func (c *ClickHouse) signalRunning(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return fmt.Errorf("testserver: clickhouse on %s: not running", c.Addr)
	}
	if err := c.proc.signal(sig); err != nil {
		return fmt.Errorf("testserver: clickhouse on %s: %v: %w", c.Addr, sig, err)
	}
	return nil
}

// waitReady polls the HTTP /ping until it answers.
func (c *ClickHouse) waitReady(p *Proc) error {
	// No keep-alive: an idle HTTP connection delays a later shutdown.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(clickHouseStartTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited during start-up: %v", p.err)
		default:
		}
		// The server binds every port before it serves any, so a /ping
		// answer means the native port accepts too.
		if pingHTTP(client, "http://"+c.HTTPAddr+"/ping") == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on http://%s/ping within %v", c.HTTPAddr, clickHouseStartTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pingHTTP(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte("Ok.")) {
		return fmt.Errorf("ping: %s %q", resp.Status, body)
	}
	return nil
}

// logTail returns the last lines of the server's error log and console.
func (c *ClickHouse) logTail() string {
	var b strings.Builder
	for _, name := range []string{"server.err.log", "stdout.log"} {
		data, err := os.ReadFile(filepath.Join(c.Dir, name))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "%s:\n%s\n", name, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no log output)"
	}
	return b.String()
}

// writeConfig writes config.xml and users.xml: loopback only, every path
// inside c.Dir, small caches, logs to files in c.Dir. The <yandex> root is
// read by 18.16 and by current releases alike.
func (c *ClickHouse) writeConfig(tcpPort, httpPort, interserverPort int, secure string) error {
	var dir bytes.Buffer
	if err := xml.EscapeText(&dir, []byte(filepath.Clean(c.Dir))); err != nil {
		return fmt.Errorf("testserver: clickhouse config: %w", err)
	}
	d := dir.String()
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>information</level>
        <log>%[1]s/server.log</log>
        <errorlog>%[1]s/server.err.log</errorlog>
        <size>50M</size>
        <count>2</count>
        <console>0</console>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%[2]d</tcp_port>
    <http_port>%[3]d</http_port>
    <interserver_http_port>%[4]d</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mark_cache_size>67108864</mark_cache_size>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
    <max_concurrent_queries>100</max_concurrent_queries>
    <keep_alive_timeout>1</keep_alive_timeout>
    <mlock_executable>false</mlock_executable>%[5]s
</yandex>
`, d, tcpPort, httpPort, interserverPort, secure)
	users := `<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <!-- idle connections notice a shutdown within 1 s, not 10 -->
            <poll_interval>1</poll_interval>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas><default></default></quotas>
</yandex>
`
	for name, text := range map[string]string{"config.xml": config, "users.xml": users} {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("testserver: clickhouse config: %w", err)
		}
	}
	return nil
}

// findClickHouse finds clickhouse-server, or the single clickhouse binary of
// newer releases, on PATH or where Debian installs it.
func findClickHouse() (bin string, args []string, err error) {
	for _, cand := range []struct {
		name string
		args []string
	}{
		{"clickhouse-server", nil},
		{"/usr/sbin/clickhouse-server", nil},
		{"clickhouse", []string{"server"}},
		{"/usr/bin/clickhouse", []string{"server"}},
	} {
		if p, err := exec.LookPath(cand.name); err == nil {
			return p, cand.args, nil
		}
	}
	return "", nil, errors.New("testserver: clickhouse-server not found on PATH")
}
