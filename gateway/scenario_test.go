package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// member is an SDK client with a log of what it delivered.
type member struct {
	uid string
	c   *client.Client

	mu   sync.Mutex
	got  map[string][]int64 // per group, in delivery order
	seen map[string]map[int64]int
}

func (e *env) connect(gwi int, uid string, tune func(*client.Config)) *member {
	e.t.Helper()
	m := &member{uid: uid, got: map[string][]int64{}, seen: map[string]map[int64]int{}}
	cfg := client.Config{
		URL:         "ws" + strings.TrimPrefix(e.gws[gwi].srv.URL, "http") + "/v1/ws",
		Token:       func(context.Context) (string, error) { return e.token(uid), nil },
		AckInterval: 200 * time.Millisecond,
		MinBackoff:  20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: e.base.Logger,
		OnMessage: func(msg protocol.Message) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.got[msg.Gid] = append(m.got[msg.Gid], msg.MsgID)
			if m.seen[msg.Gid] == nil {
				m.seen[msg.Gid] = map[int64]int{}
			}
			m.seen[msg.Gid][msg.MsgID]++
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		e.t.Fatalf("%s dial: %v", uid, err)
	}
	m.c = c
	e.t.Cleanup(func() { c.Close() })
	return m
}

func (m *member) delivered(gid string) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int64(nil), m.got[gid]...)
}

// checkExactlyOnceInOrder asserts the member delivered exactly want, once
// each, ascending.
func (m *member) checkExactlyOnceInOrder(t *testing.T, gid string, want []int64) {
	t.Helper()
	got := m.delivered(gid)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s delivered %v in %s, want %v exactly once in order", m.uid, got, gid, want)
	}
}

func (e *env) waitAcks(gid string, upto int64, uids ...string) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("ack cursors of %v at %d", uids, upto), 20*time.Second, func() bool {
		cur, err := e.redis.AckCursors(context.Background(), gid)
		if err != nil {
			return false
		}
		for _, u := range uids {
			if cur[u] != upto {
				return false
			}
		}
		return true
	})
}

// The scenario of the design brief: A and B online, C and D offline.
func TestDesignScenario(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "x", "A", "B", "C", "D")
	a, b := e.connect(0, "A", nil), e.connect(0, "B", nil)
	x := e.connect(0, "x", nil)
	e.online(0, "A", "B")
	ctx := context.Background()
	id, err := x.c.Send(ctx, "g", "hello group")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*member{a, b} {
		waitFor(t, m.uid+" gets the push", 10*time.Second, func() bool { return len(m.delivered("g")) == 1 })
		if st := m.c.Stats(); st.Pushes < 1 || st.Pulls != 0 {
			t.Fatalf("%s: %+v; want it pushed, not pulled", m.uid, st)
		}
		m.checkExactlyOnceInOrder(t, "g", []int64{id})
	}
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(ctx, "g"); return h == id })
	for _, uid := range []string{"C", "D"} {
		m := e.connect(0, uid, nil)
		var st protocol.GroupState
		for _, g := range m.c.Groups() {
			if g.Gid == "g" {
				st = g
			}
		}
		if st.Unread != 1 || !st.UnreadExact {
			t.Fatalf("%s sync: %+v, want unread 1", uid, st)
		}
		if err := m.c.Open(ctx, "g"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, uid+" pulls it", 10*time.Second, func() bool { return len(m.delivered("g")) == 1 })
		m.checkExactlyOnceInOrder(t, "g", []int64{id})
		m.c.Close()
	}
	for _, m := range []*member{a, b, x} {
		m.c.Close()
	}
	e.waitAcks("g", id, "x", "A", "B", "C", "D")
}

func TestTwoGatewaysEveryPush(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 2})
	uids := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	e.group("g", uids...)
	var ms []*member
	for i, u := range uids {
		ms = append(ms, e.connect(i%2, u, nil))
	}
	e.online(0, "u0", "u2", "u4")
	e.online(1, "u1", "u3", "u5")
	ctx := context.Background()
	var want []int64
	for i := 0; i < 30; i++ {
		id, err := ms[i%len(ms)].c.Send(ctx, "g", fmt.Sprint("m", i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	for _, m := range ms {
		waitFor(t, m.uid+" has all 30", 10*time.Second, func() bool { return len(m.delivered("g")) == 30 })
		m.checkExactlyOnceInOrder(t, "g", want)
		if st := m.c.Stats(); st.Pulls != 0 {
			t.Errorf("%s needed %d pulls; every message should arrive by push", m.uid, st.Pulls)
		}
	}
}
