package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWindowHalvesOnOverloadAndGrowsBack(t *testing.T) {
	w := newWindow(4, backoff{min: time.Millisecond, max: 10 * time.Millisecond})
	ctx := context.Background()
	for range 4 {
		if _, err := w.enter(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := w.enter(short, nil); err == nil {
		t.Fatal("a fifth send entered a window of 4")
	}
	w.overloaded(0)
	for range 4 {
		w.leave(false)
	}
	if w.size != 2 {
		t.Fatalf("window %v after an overload, want 2", w.size)
	}
	for range 2 { // one window's worth of accepted sends: about +1
		w.enter(ctx, nil)
		w.leave(true)
	}
	if w.size < 2.8 || w.size >= 3 {
		t.Fatalf("window %v after 2 accepted sends from 2, want 2.9 (+1/2, then +1/2.5)", w.size)
	}
	for range 20 {
		w.enter(ctx, nil)
		w.leave(true)
	}
	if w.size != 4 {
		t.Fatalf("window %v, want its max 4", w.size)
	}
}

// The sends in flight when the server refuses one as overloaded are one
// burst: their refusals are one episode, which halves the window once and
// pauses once. A send made after the pause and refused starts the next
// episode, with a pause twice as long.
func TestWindowTakesTheRefusalsOfSendsInFlightAsOneEpisode(t *testing.T) {
	w := newWindow(8, backoff{min: 20 * time.Millisecond, max: time.Second})
	ctx := context.Background()
	var episodes []int
	for range 8 {
		e, err := w.enter(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		episodes = append(episodes, e)
	}
	first := w.overloaded(episodes[0])
	for _, e := range episodes[1:] {
		if d := w.overloaded(e); d > first {
			t.Fatalf("pause %v for a refusal within the episode, want what is left of its %v", d, first)
		}
		w.leave(false)
	}
	w.leave(false)
	if w.size != 4 {
		t.Fatalf("window %v after 8 sends in flight were refused, want 8 halved once", w.size)
	}
	until := w.until
	e, err := w.enter(ctx, nil) // waits out the pause
	if err != nil {
		t.Fatal(err)
	}
	if early := time.Until(until); early > 0 {
		t.Fatalf("a send entered %v before the pause of %v ended", early, first)
	}
	if second := w.overloaded(e); second < 20*time.Millisecond || second > 40*time.Millisecond {
		t.Fatalf("pause %v for the refusal of a send made after the first pause (10-20 ms), want 20-40 ms", second)
	}
	w.leave(false)
	if w.size != 2 {
		t.Fatalf("window %v after a second episode, want 2", w.size)
	}
}

func TestWindowWaitEndsWithTheClient(t *testing.T) {
	w := newWindow(1, backoff{min: time.Hour, max: time.Hour})
	w.overloaded(0) // paused for half an hour at least
	closed := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(closed) }()
	if _, err := w.enter(context.Background(), closed); !errors.Is(err, ErrClosed) {
		t.Fatalf("enter during a pause, as the client closes: %v, want ErrClosed", err)
	}
}
