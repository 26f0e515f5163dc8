package testserver

import (
	"os/exec"
	"reflect"
	"runtime"
	"syscall"
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
