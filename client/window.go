package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// window bounds a client's sends in flight, as TCP's window bounds its
// bytes: it grows by one for every window's worth of sends accepted and
// halves when the server says it is overloaded. Then every send of the
// client also waits out a pause, which doubles while the server keeps
// refusing. As TCP halves its window once per round trip, the refusals of
// the sends that were in flight when an episode of overload began belong
// to it: a server that refuses a burst of them at once is answered once. So a client never queues more sends on its connection than the
// server answers in time, and a refused server is not flooded with
// resends: a send waits in the client, where its ctx can still end it
// before the server spends anything on it.
type window struct {
	max   float64
	pause backoff

	mu      sync.Mutex
	size    float64
	used    int
	episode int           // episodes of overload so far
	until   time.Time     // no send before
	change  chan struct{} // closed and replaced when a place frees or the pause ends
}

func newWindow(max int, pause backoff) *window {
	return &window{max: float64(max), size: float64(max), pause: pause, change: make(chan struct{})}
}

// enter waits for a place in the window, and for a pause to end, or
// until ctx ends (its error, saying what it waited for) or closed is
// closed (ErrClosed). It returns
// the episode of overload the send is made in, for overloaded.
func (w *window) enter(ctx context.Context, closed <-chan struct{}) (episode int, err error) {
	for {
		w.mu.Lock()
		wait, change := time.Until(w.until), w.change
		if wait <= 0 && float64(w.used) < w.size {
			w.used++
			episode = w.episode
			w.mu.Unlock()
			return episode, nil
		}
		w.mu.Unlock()
		var t *time.Timer
		var tc <-chan time.Time
		if wait > 0 {
			t = time.NewTimer(wait)
			tc = t.C
		}
		shut := false
		select {
		case <-change:
		case <-tc:
		case <-ctx.Done():
		case <-closed:
			shut = true
		}
		if t != nil {
			t.Stop()
		}
		if err := ctx.Err(); err != nil {
			if wait > 0 {
				return 0, fmt.Errorf("waiting out the pause of the sends after an overloaded refusal: %w", err)
			}
			return 0, fmt.Errorf("waiting for a place among the sends in flight: %w", err)
		}
		if shut {
			return 0, ErrClosed
		}
	}
}

// leave frees the place: accepted tells an accepted send, which grows the
// window and ends the pauses' doubling.
func (w *window) leave(accepted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.used--
	if accepted {
		w.size = min(w.max, w.size+1/w.size)
		w.pause.reset()
	}
	close(w.change)
	w.change = make(chan struct{})
}

// overloaded takes the server's refusal as overloaded of a send made in
// episode (enter's). A send made since the latest episode began starts a
// new one: the window halves and every send pauses, twice as long as in the
// last episode unless a send was accepted since. The refusal of a send made
// before belongs to the latest episode, already answered. It returns the
// pause left.
func (w *window) overloaded(episode int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if episode != w.episode {
		return max(0, time.Until(w.until))
	}
	w.episode++
	w.size = max(1, w.size/2)
	d := w.pause.next()
	w.until = time.Now().Add(d)
	return d
}
