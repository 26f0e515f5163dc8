package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildBinaries compiles chatd and chatbroker into dir.
func buildBinaries(ctx context.Context, dir string) error {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/groupchat/chatd/cmd/chatd", "github.com/groupchat/chatd/cmd/chatbroker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build chatd chatbroker: %w\n%s", err, out)
	}
	return nil
}

// proc is one supervised process: started again after it exits, as a
// service manager would (Restart=always), after the delay its killer chose
// or, when it died by itself, after a second.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string
	health  string // http://addr/healthz, or "" when the process has none
	onExit  func(name string, err error, killed bool)

	mu      sync.Mutex
	cmd     *exec.Cmd
	running bool
	killed  bool          // the current exit was asked for
	delay   time.Duration // before the next start after a kill
	stopped bool
	starts  int
	wake    chan struct{}
	done    chan struct{} // closed when supervise returns
}

func newProc(name, bin, logPath, health string, env []string, args ...string) *proc {
	return &proc{name: name, bin: bin, args: args, env: env, logPath: logPath, health: health,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// supervise runs the process until stop. The goroutine stays on one OS
// thread, so the children's parent-death signal fires only when the whole
// harness dies.
func (p *proc) supervise() {
	runtime.LockOSThread()
	defer close(p.done)
	for {
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			p.mu.Unlock()
			p.onExit(p.name, err, false)
			return
		}
		fmt.Fprintf(logf, "--- chaos: start %d of %s at %s\n", p.starts+1, p.name, time.Now().Format(time.RFC3339Nano))
		cmd := exec.Command(p.bin, p.args...)
		cmd.Env = append(os.Environ(), p.env...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		logf.Close()
		if err != nil {
			p.mu.Unlock()
			p.onExit(p.name, err, false)
			return
		}
		p.cmd, p.running, p.killed = cmd, true, false
		p.starts++
		p.mu.Unlock()

		err = cmd.Wait()

		p.mu.Lock()
		p.running = false
		killed, delay, stopped := p.killed, p.delay, p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		if !killed {
			p.onExit(p.name, err, false)
			delay = time.Second
		}
		select {
		case <-time.After(delay):
		case <-p.wake:
		}
	}
}

// kill9 kills the process with SIGKILL; it is started again after delay.
func (p *proc) kill9(delay time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return false
	}
	p.killed, p.delay = true, delay
	p.cmd.Process.Signal(syscall.SIGKILL)
	return true
}

// stop ends the process with SIGTERM (SIGKILL after 15 s) and its
// supervision.
func (p *proc) stop() {
	p.mu.Lock()
	p.stopped = true
	cmd, running := p.cmd, p.running
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if running {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(15 * time.Second):
			cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	<-p.done
}

// waitHealthy waits until the process answers 200 on its health route.
func (p *proc) waitHealthy(ctx context.Context, d time.Duration) error {
	if p.health == "" {
		return nil
	}
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		resp, err := hc.Get(p.health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s is not healthy after %v (%v); its log: %s", p.name, d, last, p.logPath)
}
