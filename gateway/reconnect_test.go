package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// When a gateway dies or drains, its clients come back to the others,
// each of which then takes thousands of connections, syncs and pulls at
// once while its own users go on sending. Those users' sends must not be
// refused as overloaded because of the reconnects, and the reconnecting
// clients must still all catch up, in bounded time, nothing lost.
//
// The gateway here takes 64 sends at once (a scaled-down 1,024) from 40
// steady senders; 1,000 clients, four groups each with messages to catch
// up, dial it in one burst, authenticate, sync and pull every group.
func TestReconnectsDoNotStarveSteadySends(t *testing.T) {
	const (
		steadyN   = 40
		reconnN   = 1000
		groupsN   = 100 // of the reconnecting clients, 40 members each
		perClient = 4
		backlog   = 10 // messages in each group to catch up on
		caughtUp  = 90 * time.Second
	)
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxSending = 64 }})
	g := e.gws[0].g
	members := make([][]string, groupsN)
	for i := range reconnN {
		for k := range perClient {
			gi := (i + k*(groupsN/perClient)) % groupsN
			members[gi] = append(members[gi], fmt.Sprintf("r%04d", i))
		}
	}
	gid := func(i int) string { return fmt.Sprintf("rg%03d", i) }
	for i, ms := range members {
		e.group(gid(i), ms...)
	}
	for i := range steadyN {
		e.group(fmt.Sprintf("steady%02d", i), fmt.Sprintf("s%02d", i), fmt.Sprintf("away%02d", i))
	}
	// The backlog: what the reconnecting clients missed while away.
	heads := make([]int64, groupsN)
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < groupsN; i += 10 {
				for k := range backlog {
					st, body := e.http("POST", "/v1/groups/"+gid(i)+"/messages", e.token(members[i][0]),
						map[string]any{"cmid": fmt.Sprint("b", k), "body": fmt.Sprint("missed ", k)})
					if st != http.StatusOK {
						t.Errorf("backlog send to %s: %d %v", gid(i), st, body)
						return
					}
					heads[i] = int64(body["msgid"].(float64))
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The steady senders: one connection each, a send at a time, a pause
	// after a refusal as the protocol asks, then the same cmid again.
	var sent, overloaded, otherRefused atomic.Int64
	var firstOther atomic.Value
	stop := make(chan struct{})
	var steady sync.WaitGroup
	url := "ws" + strings.TrimPrefix(e.gws[0].srv.URL, "http") + "/v1/ws?token="
	for i := range steadyN {
		uid, group := fmt.Sprintf("s%02d", i), fmt.Sprintf("steady%02d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ws, _, err := websocket.Dial(ctx, url+e.token(uid), nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ws.SetReadLimit(1 << 20)
		t.Cleanup(func() { ws.CloseNow() })
		steady.Add(1)
		go func() {
			defer steady.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				for attempt := 0; ; attempt++ {
					f, err := steadySend(ws, group, fmt.Sprint(n), fmt.Sprint(n, ".", attempt))
					if err != nil {
						t.Errorf("%s: %v", uid, err)
						return
					}
					sent.Add(1)
					if f["op"] == protocol.OpAccepted {
						break
					}
					if code(f) == string(protocol.CodeOverloaded) {
						overloaded.Add(1)
					} else {
						otherRefused.Add(1)
						firstOther.CompareAndSwap(nil, fmt.Sprint(f))
					}
					select {
					case <-stop:
						return
					case <-time.After(250 * time.Millisecond):
					}
				}
			}
		}()
	}
	time.Sleep(time.Second)
	before := sent.Load()

	// The burst: every client dials at once, syncs, and pulls its groups.
	start := time.Now()
	var caught atomic.Int64
	var reconn sync.WaitGroup
	clients := make([]*member, reconnN)
	for i := range reconnN {
		uid := fmt.Sprintf("r%04d", i)
		m := &member{uid: uid, got: map[string][]int64{}, seen: map[string]map[int64]int{}}
		clients[i] = m
		reconn.Add(1)
		go func() {
			defer reconn.Done()
			ctx, cancel := context.WithTimeout(context.Background(), caughtUp)
			defer cancel()
			c, err := client.Dial(ctx, client.Config{
				URL:        url[:len(url)-len("?token=")],
				Token:      func(context.Context) (string, error) { return e.token(uid), nil },
				MinBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second,
				Logger: e.base.Logger,
				OnMessage: func(msg protocol.Message) {
					m.mu.Lock()
					defer m.mu.Unlock()
					m.got[msg.Gid] = append(m.got[msg.Gid], msg.MsgID)
				},
			})
			if err != nil {
				t.Errorf("%s dial: %v", uid, err)
				return
			}
			m.c = c
			for _, gs := range c.Groups() {
				if err := c.Open(ctx, gs.Gid); err != nil {
					t.Errorf("%s open %s: %v", uid, gs.Gid, err)
					return
				}
			}
			caught.Add(1)
		}()
	}
	reconn.Wait()
	for _, m := range clients {
		if m.c != nil {
			t.Cleanup(func() { m.c.Close() })
		}
	}
	if t.Failed() {
		close(stop)
		steady.Wait()
		t.FailNow()
	}
	// Every client holds every message of its groups, once each.
	for i, ms := range members {
		for _, uid := range ms {
			var n int
			fmt.Sscanf(uid, "r%04d", &n)
			waitFor(t, uid+" caught up on "+gid(i), 10*time.Second, func() bool {
				got := clients[n].delivered(gid(i))
				return len(got) > 0 && got[len(got)-1] == heads[i]
			})
			if got := clients[n].delivered(gid(i)); len(got) != backlog {
				t.Fatalf("%s holds %d messages of %s, want %d", uid, len(got), gid(i), backlog)
			}
		}
	}
	took := time.Since(start)
	close(stop)
	steady.Wait()
	during := sent.Load() - before
	t.Logf("%d of %d steady sends refused as overloaded during a reconnect of %d clients (%d refused otherwise, first %v); all caught up in %v; the send bound ended at %d; %d setups, syncs and pulls told to come back",
		overloaded.Load(), during, reconnN, otherRefused.Load(), firstOther.Load(), took.Round(time.Millisecond), g.Stats().SendBound, g.Stats().CatchUpRefused)
	if took > caughtUp {
		t.Errorf("the reconnecting clients took %v to catch up; want within %v", took, caughtUp)
	}
	if n := overloaded.Load(); n > during/200 {
		t.Errorf("%d of %d steady sends refused as overloaded during a reconnect of %d clients; want at most 0.5%%", n, during, reconnN)
	}
}

// steadySend sends one message and returns its answer, skipping pushes.
func steadySend(ws *websocket.Conn, gid, cmid, id string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := json.Marshal(map[string]any{"op": "send", "id": id, "gid": gid, "cmid": cmid, "body": "steady " + cmid})
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, err
	}
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		var f map[string]any
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, err
		}
		if f["id"] == id {
			return f, nil
		}
	}
}
