package testserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timeouts of the redis-server child process.
const (
	redisReadyTimeout = 10 * time.Second // from exec to the first PONG
	redisStopTimeout  = 10 * time.Second // from SIGTERM to exit, then SIGKILL
	redisStartTries   = 5                // bind races on a port FreePort picked
)

// Redis is a redis-server child process on a loopback port, without
// persistence: a restart (Stop or Kill, then Start) loses every key, which is
// what the "Redis restart with data lost" tests need. Unless a SAVE wrote a
// snapshot (dump.rdb in Dir) before: Start loads it, as a Redis restarted
// from an older RDB snapshot, or from an AOF that lost its last writes, does.
// Every start has a new run_id (INFO server).
//
// Its methods are safe for concurrent use.
type Redis struct {
	Addr    string // "127.0.0.1:<port>", stable across restarts
	TLSAddr string // its TLS port's, when started by NewRedisTLS
	Dir     string // working directory: the server's --dir and redis.log

	port int
	bin  string
	args []string // more arguments of redis-server

	mu   sync.Mutex
	proc *Proc // the running server, nil when stopped
}

// NewRedis starts a redis-server in t.TempDir() and stops it when the test
// ends. A missing or broken redis-server fails the test: it never skips.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	return newRedis(t)
}

// NewRedisTLS is NewRedis with a TLS port too (TLSAddr), serving the
// certificate of f to clients that need none of their own; Addr stays
// plaintext, for the helpers that check the server is up.
func NewRedisTLS(t testing.TB, f *TLSFiles) *Redis {
	t.Helper()
	return newRedis(t, "--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile,
		"--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", "no")
}

// NewRedisMutualTLS is NewRedisTLS whose TLS port takes clients with a
// certificate f's CA signed only (tls-auth-clients yes).
func NewRedisMutualTLS(t testing.TB, f *TLSFiles) *Redis {
	t.Helper()
	return newRedis(t, "--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile,
		"--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", "yes")
}

// newRedis starts a redis-server with more arguments for the test.
func newRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	r, err := startRedis(t.TempDir(), args...)
	if err != nil {
		t.Fatalf("%v\ninstall it with `make deps` (apt-get install redis-server)", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return r
}

// AddUser gives the running server an ACL user with every right, as a
// managed Redis's user of an application.
func (r *Redis) AddUser(t testing.TB, name, password string) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	if err := rc.Do(context.Background(), "ACL", "SETUSER", name, "on", ">"+password, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("testserver: add Redis user %s: %v", name, err)
	}
}

// StartRedis starts redis-server from PATH on a free loopback port, with
// --save "" and --appendonly no and its --dir inside dir, and returns once it
// answers PING. On failure the error carries the tail of the server's log.
func StartRedis(dir string) (*Redis, error) {
	return startRedis(dir)
}

// startRedis is StartRedis with more arguments of redis-server.
func startRedis(dir string, args ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("testserver: start redis-server: %w", err)
	}
	work := filepath.Join(dir, "redis")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("testserver: start redis-server: %w", err)
	}
	var last error
	for range redisStartTries {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		run := args
		if slices.Contains(args, "--cluster-enabled") {
			// The cluster bus listens too, by default on port + 10000,
			// which may lie in the ephemeral range: pick it as well.
			bus, err := FreePort()
			if err != nil {
				return nil, err
			}
			run = append(slices.Clip(args), "--cluster-port", strconv.Itoa(bus))
		}
		tlsAddr := ""
		if slices.Contains(args, "--tls-cert-file") {
			tlsPort, err := FreePort()
			if err != nil {
				return nil, err
			}
			run = append(slices.Clip(run), "--tls-port", strconv.Itoa(tlsPort))
			tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
		}
		r := &Redis{
			Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			TLSAddr: tlsAddr,
			Dir:     work,
			port:    port,
			bin:     bin,
			args:    run,
		}
		last = r.Start()
		if last == nil {
			return r, nil
		}
		if !errors.Is(last, errAddrInUse) {
			return nil, last
		}
	}
	return nil, last
}

// Start starts the server again on the same port with an empty data set, or
// the one the last SAVE wrote. It fails if the server is running. A port taken meanwhile is retried for a
// few seconds.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		return fmt.Errorf("testserver: start redis-server on %s: already running", r.Addr)
	}
	var err error
	for try := range redisStartTries {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		if err = r.start(); !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return err
}

func (r *Redis) logPath() string { return filepath.Join(r.Dir, "redis.log") }

// start runs one attempt; r.mu is held.
func (r *Redis) start() error {
	logf, err := os.OpenFile(r.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: start redis-server: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- testserver: starting %s on %s\n", r.bin, r.Addr)
	since, _ := logf.Seek(0, io.SeekEnd)

	cmd := exec.Command(r.bin, append([]string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.Dir,
		"--daemonize", "no",
	}, r.args...)...)
	cmd.Dir = r.Dir
	cmd.Stdout = logf // the default logfile is stdout
	cmd.Stderr = logf
	// Own process group, so that Kill takes the whole group and a ^C to the
	// test's group does not reach it; a parent death signal, so that it dies
	// with the test binary even when cleanups do not run.
	p, err := Spawn(cmd)
	if err != nil {
		return fmt.Errorf("testserver: start redis-server: %w", err)
	}
	if err := waitPong(r.Addr, p.done, redisReadyTimeout); err != nil {
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		tail := r.logTail(since)
		if strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("testserver: start redis-server on %s: %w", r.Addr, errAddrInUse)
		}
		return fmt.Errorf("testserver: start redis-server on %s: %w\n--- %s (tail):\n%s", r.Addr, err, r.logPath(), tail)
	}
	r.proc = p
	return nil
}

// Stop ends the server with SIGTERM and waits; after redisStopTimeout it
// kills it. Stopping a stopped server does nothing.
func (r *Redis) Stop() error {
	return r.signal(syscall.SIGTERM)
}

// Kill ends the server with SIGKILL (as a crash would) and waits.
func (r *Redis) Kill() error {
	return r.signal(syscall.SIGKILL)
}

func (r *Redis) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.proc
	if p == nil {
		return nil
	}
	r.proc = nil
	if err := p.signal(sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testserver: stop redis-server on %s: %w", r.Addr, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(redisStopTimeout):
	}
	_ = p.signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("testserver: stop redis-server on %s: no exit %v after %v, killed", r.Addr, sig, redisStopTimeout)
}

// waitPong dials addr until the server answers PING, the process exits
// (done closes) or the timeout passes.
func waitPong(addr string, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		if last = ping(addr); last == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited before answering PING")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %w", timeout, last)
		}
		time.Sleep(delay)
	}
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		// -LOADING and the like: not ready yet.
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// logTail returns the last lines that redis.log got after offset since.
func (r *Redis) logTail(since int64) string {
	const maxBytes, maxLines = 4096, 30
	b, err := os.ReadFile(r.logPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if since >= 0 && since <= int64(len(b)) {
		b = b[since:]
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
