package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/groupchat/chatd/protocol"
)

// api is the gateway's HTTP API as chatbench uses it: dev tokens,
// administration and sync. Safe for concurrent use.
type api struct {
	base  string // http://host:port
	admin string
	hc    *http.Client
}

func newAPI(base, admin string, conns int) *api {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	return &api{base: base, admin: admin, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// call sends body (JSON, when not nil) with the bearer token and decodes
// the answer into out.
func (a *api) call(ctx context.Context, method, path, bearer string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for {
		req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.hc.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			// A user's requests are held to a connection's frame rate:
			// wait as told, as a client would (1 to 60 s: a number past
			// that, or none, is no chatd's).
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			wait = min(max(wait, 1), 60)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s %s: %s, and %w while waiting to retry", method, path, resp.Status, ctx.Err())
			case <-time.After(time.Duration(wait) * time.Second):
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
		return nil
	}
}

// token gets a dev token for uid (only `chatd dev` hands them out).
func (a *api) token(ctx context.Context, uid string) (string, error) {
	var ans struct{ Token string }
	if err := a.call(ctx, http.MethodPost, "/v1/dev/token", "", map[string]string{"uid": uid}, &ans); err != nil {
		return "", fmt.Errorf("dev token (is this chatd dev?): %w", err)
	}
	return ans.Token, nil
}

func (a *api) createGroup(ctx context.Context, gid string, members []string) error {
	body := map[string]any{"gid": gid, "members": members}
	if err := a.call(ctx, http.MethodPost, "/v1/admin/groups", a.admin, body, nil); err != nil {
		return fmt.Errorf("create group %s: %w", gid, err)
	}
	return nil
}

// syncGids returns the groups the token's user is a member of, per sync.
func (a *api) syncGids(ctx context.Context, token string) (map[string]bool, error) {
	var ans protocol.Synced
	if err := a.call(ctx, http.MethodGet, "/v1/sync", token, nil, &ans); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ans.Groups))
	for _, g := range ans.Groups {
		if !g.Left {
			out[g.Gid] = true
		}
	}
	return out, nil
}

// waitHealthy waits until GET /healthz answers 200 (chatd's projections
// have caught up), for at most d.
// It says at the first failure what it waits for: a -url where no chatd
// runs was waited for 2 minutes without a word, and Ctrl-C meanwhile
// ended it with "context canceled" alone.
func (a *api) waitHealthy(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for told := false; ; told = true {
		err := a.call(ctx, http.MethodGet, "/healthz", "", nil, nil)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("chatd at %s was not healthy yet when chatbench was stopped (%w): %v", a.base, ctx.Err(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chatd at %s is not healthy after %v: %w; is chatd running there, and is -url its gateway's address?", a.base, d, err)
		}
		if !told {
			logf("waiting up to %v for chatd at %s to be healthy (%v)", d, a.base, err)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return fmt.Errorf("chatd at %s was not healthy yet when chatbench was stopped (%w): %v", a.base, ctx.Err(), err)
		}
	}
}

// tokens gets a dev token for every uid, conc at a time.
func (a *api) tokens(ctx context.Context, uids []string, conc int) ([]string, error) {
	toks := make([]string, len(uids))
	err := parallel(ctx, len(uids), conc, func(ctx context.Context, i int) (err error) {
		toks[i], err = a.token(ctx, uids[i])
		return err
	})
	return toks, err
}

// parallel calls fn for 0..n-1, conc at a time, and returns the first error.
func parallel(ctx context.Context, n, conc int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error { return fn(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err() // the group's ctx ends with Wait; the caller's tells
}
