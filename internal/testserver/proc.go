package testserver

import (
	"os/exec"
	"reflect"
	"runtime"
	"syscall"
)

// proc is one run of a server process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // from Wait, set before done is closed
}

// spawn starts cmd from a goroutine locked to its OS thread. Linux sends the
// parent death signal when the thread that forked the child exits, so the
// thread must live as long as the child: the goroutine waits for the child
// and never unlocks, and its thread ends only after the child is reaped, or
// with the whole test binary.
func spawn(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{})}
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

// signal signals the process group (the server and anything it forked).
func (p *proc) signal(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *proc) exited() bool {
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
