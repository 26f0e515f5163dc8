package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// The gateway holds a user's HTTP requests to a connection's frame rate:
// past it, 429 with Retry-After. A set-up step (chatbench's pulls of every
// group by one user) waits and asks again rather than failing the run.
func TestAnAnswerOfTooManyRequestsIsRetriedAfterItsWait(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"code":"rate_limited"}`, http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	a := &api{base: srv.URL, hc: srv.Client()}
	var out struct{ OK bool }
	start := time.Now()
	if err := a.call(context.Background(), http.MethodGet, "/v1/sync", "tok", nil, &out); err != nil || !out.OK {
		t.Fatalf("call after a 429: %v, %+v; want the second answer", err, out)
	}
	if took := time.Since(start); took < time.Second || asked.Load() != 2 {
		t.Errorf("asked %d times in %v; want twice, a second apart", asked.Load(), took)
	}
}
