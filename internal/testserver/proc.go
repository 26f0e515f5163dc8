package testserver

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Proc is one run of a server process.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // from Wait, set before done is closed
}

// Spawn starts cmd in a process group of its own (so that a signal to the
// group reaches whatever it forks, and a ^C to ours does not reach it) with
// a parent death signal (so that it dies with this process even when no
// cleanup runs). It forks from a goroutine locked to its OS thread: Linux
// sends the parent death signal when the thread that forked the child
// exits, so the thread must live as long as the child. The goroutine waits
// for the child and never unlocks; its thread ends only after the child is
// reaped, or with the whole process.
func Spawn(cmd *exec.Cmd) (*Proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setPdeathsig(cmd.SysProcAttr)
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// signal signals the process group (the server and anything it forked).
func (p *Proc) signal(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *Proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// setPdeathsig sets SysProcAttr.Pdeathsig to SIGKILL where the field exists
// (Linux); elsewhere the server outlives a test binary that dies.
func setPdeathsig(a *syscall.SysProcAttr) {
	if f := reflect.ValueOf(a).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
}

// waitStopped waits until every thread of the process is stopped (state T
// in /proc/PID/task/*/stat), after a SIGSTOP: the kernel stops them one
// after another once a thread has taken the signal, some time after kill(2)
// returned. Without procfs it returns at once.
func (p *Proc) waitStopped(timeout time.Duration) error {
	pid := p.cmd.Process.Pid
	deadline := time.Now().Add(timeout)
	for {
		stats, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
		running := 0
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			// The state follows the command name, which ends with ") ".
			if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || b[i+2] != 'T' && b[i+2] != 't' {
				running++
			}
		}
		if running == 0 {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("pid %d exited while being stopped", pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: %d threads still running %v after SIGSTOP", pid, running, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
