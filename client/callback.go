package client

import (
	"reflect"
	"runtime"

	"github.com/groupchat/chatd/protocol"
)

// The client calls the application's callbacks through these, and only
// these: Close finds them on its caller's stack when it is called from a
// callback, which its goroutine's end waits for (see Close). They are not
// inlined, so that each is a frame of its own.

//go:noinline
func (c *Client) onMessage(m protocol.Message) {
	c.callbacks.Add(1)
	defer c.callbacks.Add(-1)
	c.cfg.OnMessage(m)
}

//go:noinline
func (c *Client) onError(err error) {
	c.callbacks.Add(1)
	defer c.callbacks.Add(-1)
	c.cfg.OnError(err)
}

//go:noinline
func (c *Client) onReceipts(r protocol.Receipts) {
	c.callbacks.Add(1)
	defer c.callbacks.Add(-1)
	c.cfg.OnReceipts(r)
}

// callbackFuncs are the names of the functions above, as a stack shows them.
var callbackFuncs = func() map[string]bool {
	names := map[string]bool{}
	for _, f := range []any{(*Client).onMessage, (*Client).onError, (*Client).onReceipts} {
		names[runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()] = true
	}
	return names
}()

// inCallback reports whether its caller runs inside a callback the client
// called: whether one of the functions above is on the goroutine's stack.
// Go names no goroutine, so the stack is what tells the callback's own
// goroutine from another's calling Close while a callback runs. It walks
// the whole stack (a callback may call Close deep down), and is called
// only by Close, while a callback runs.
func inCallback() bool {
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if callbackFuncs[f.Function] {
			return true
		}
		if !more {
			return false
		}
	}
}
