package tlsclient

import (
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// recheckEvery is how often, at most, the files of a client certificate
// or of a CA are looked at for a change. A config takes it when it is
// made.
var recheckEvery = 10 * time.Second

// lookWait bounds how long the handshake that starts a look waits for
// it before it goes on with what was loaded before.
var lookWait = time.Second

// watched is a value loaded from files (a client certificate and its
// key, a CA file), loaded again when they change (cert-manager, Vault or
// a cron renewing them in place, an operator adding a CA), so a renewal
// needs no restart.
//
// The handshakes themselves start the looks, rather than a goroutine
// watching the files as the gateway's own certificate has (cmd/chatd):
// a config has no lifecycle that could stop one, and chatd makes some
// only to check the settings. A handshake due for a look (one per
// recheckEvery at most; the others pay an atomic load and a clock read)
// starts it in a goroutine of its own and waits for it up to lookWait,
// so a file system that hangs holds it up that long and no other
// handshake at all; the others meanwhile take the value loaded before.
// Files that do not load (caught half written, a key of another
// certificate) keep the value loaded before, are told to the log once,
// and are tried again at the next look. Changed files are told by their
// modification time and size (a Kubernetes secret's symlink swap too:
// os.Stat follows it).
type watched[T any] struct {
	files []string
	load  func() (*T, error)
	log   *slog.Logger // nil: nowhere
	what  string       // the files, for the log: "the CA file of CHAT_REDIS_CA_FILE"
	keeps string       // what a failed load keeps and how to mend it, for the log
	every time.Duration

	cur     atomic.Pointer[T]
	next    atomic.Int64 // when the files are due for a look, in Unix nanoseconds
	looking atomic.Bool  // a look runs; stamp and told are its own meanwhile
	stamp   []fileStamp  // the files' when cur was loaded
	told    []fileStamp  // the files' when a load that failed was last logged
}

// fileStamp tells a file written again.
type fileStamp struct {
	mod  int64 // Unix nanoseconds
	size int64
}

// watch loads w's value the first time, or returns load's error.
func (w *watched[T]) watch() error {
	w.every = recheckEvery
	w.stamp = w.stat() // before the load: files changed in between are loaded again at the first look
	v, err := w.load()
	if err != nil {
		return err
	}
	w.cur.Store(v)
	w.next.Store(time.Now().Add(w.every).UnixNano())
	return nil
}

// get is the value, after a look at the files when one is due.
func (w *watched[T]) get() *T {
	w.recheck()
	return w.cur.Load()
}

// recheck looks at the files when due and no other look runs.
func (w *watched[T]) recheck() {
	now := time.Now()
	if now.UnixNano() < w.next.Load() || !w.looking.CompareAndSwap(false, true) {
		return
	}
	w.next.Store(now.Add(w.every).UnixNano())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.looking.Store(false) // before done: a handshake right after this one may look again
		w.look()
	}()
	t := time.NewTimer(lookWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// look loads the value again if its files changed since it was loaded.
func (w *watched[T]) look() {
	stamp := w.stat()
	if slices.Equal(stamp, w.stamp) {
		return
	}
	v, err := w.load()
	if err != nil {
		// The value loaded before stays; stamp unchanged, so the next
		// look tries again. The same files are told once.
		if w.log != nil && !slices.Equal(stamp, w.told) {
			w.log.Warn(w.what+" changed but does not load; "+w.keeps, "err", err, "files", w.files)
		}
		w.told = stamp
		return
	}
	w.cur.Store(v)
	w.stamp, w.told = stamp, nil
	if w.log != nil {
		w.log.Info(w.what+" loaded again; new connections take it", "files", w.files)
	}
}

// stat is the files' stamps; a zero one for a file that cannot be read,
// which differs from any loaded, so the load is tried.
func (w *watched[T]) stat() []fileStamp {
	s := make([]fileStamp, len(w.files))
	for i, name := range w.files {
		if fi, err := os.Stat(name); err == nil {
			s[i] = fileStamp{mod: fi.ModTime().UnixNano(), size: fi.Size()}
		}
	}
	return s
}
