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
		if err := w.enter(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.enter(short, nil); err == nil {
		t.Fatal("a fifth send entered a window of 4")
	}
	w.overloaded()
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

func TestWindowWaitEndsWithTheClient(t *testing.T) {
	w := newWindow(1, backoff{min: time.Hour, max: time.Hour})
	w.overloaded() // paused for half an hour at least
	closed := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(closed) }()
	if err := w.enter(context.Background(), closed); !errors.Is(err, ErrClosed) {
		t.Fatalf("enter during a pause, as the client closes: %v, want ErrClosed", err)
	}
}
