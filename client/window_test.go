package client

import (
	"context"
	"testing"
	"time"
)

func TestWindowHalvesOnOverloadAndGrowsBack(t *testing.T) {
	w := newWindow(4, backoff{min: time.Millisecond, max: 10 * time.Millisecond})
	ctx := context.Background()
	for range 4 {
		if err := w.enter(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.enter(short); err == nil {
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
		w.enter(ctx)
		w.leave(true)
	}
	if w.size < 2.8 || w.size >= 3 {
		t.Fatalf("window %v after 2 accepted sends from 2, want 2.9 (+1/2, then +1/2.5)", w.size)
	}
	for range 20 {
		w.enter(ctx)
		w.leave(true)
	}
	if w.size != 4 {
		t.Fatalf("window %v, want its max 4", w.size)
	}
}
