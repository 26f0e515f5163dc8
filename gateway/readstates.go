package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/groupchat/chatd/store"
)

// readStateFresh is how long a group's read state, once loaded, answers
// read_counts and who_read. Loading it costs Redis the group's every member
// and read cursor (about 6 ms of its CPU at 10,000 members), which any
// member could otherwise have it pay at the frame rate; counts are as old
// as this at most.
const readStateFresh = 250 * time.Millisecond

// readStates holds the groups' read states loaded in the last
// readStateFresh, each dropped as it goes stale, at most maxReadStates of
// them (all dropped when full), and loads a group's state once at a time:
// who asks while it loads waits for that load.
type readStates struct {
	mu      sync.Mutex
	m       map[string]*readStateAt
	loading map[string]*readStateLoad // by gid
}

type readStateAt struct {
	st *store.ReadState
	at time.Time
}

const maxReadStates = 4096

// readStateLoad is a load of a group's read state in flight. st, err and
// retry are set before done is closed.
type readStateLoad struct {
	done  chan struct{}
	st    *store.ReadState
	err   error
	retry bool // it failed as its asker went away: who waited for it loads again
}

// get returns gid's read state, loading it unless one loaded less than
// readStateFresh ago is held, or waiting for the load in flight; check
// runs before a load (the projection's replay mark), and its error is the
// answer of everyone who waited for the load.
func (c *readStates) get(ctx context.Context, r *store.Redis, gid string, check func() error) (*store.ReadState, error) {
	for {
		now := time.Now()
		c.mu.Lock()
		if held, ok := c.m[gid]; ok && now.Sub(held.at) < readStateFresh {
			c.mu.Unlock()
			return held.st, nil
		}
		if l := c.loading[gid]; l != nil {
			c.mu.Unlock()
			select {
			case <-l.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if l.retry {
				continue
			}
			return l.st, l.err
		}
		l := &readStateLoad{done: make(chan struct{})}
		if c.loading == nil {
			c.loading = make(map[string]*readStateLoad)
		}
		c.loading[gid] = l
		c.mu.Unlock()

		var st *store.ReadState
		err := check()
		if err == nil {
			st, err = r.ReadState(ctx, gid)
		}
		c.mu.Lock()
		l.st, l.err, l.retry = st, err, err != nil && ctx.Err() != nil
		delete(c.loading, gid)
		if err == nil {
			c.hold(gid, &readStateAt{st, now})
		}
		close(l.done)
		c.mu.Unlock()
		return st, err
	}
}

// hold keeps held as gid's state until it is stale. c.mu is held.
func (c *readStates) hold(gid string, held *readStateAt) {
	if c.m == nil || len(c.m) >= maxReadStates {
		c.m = make(map[string]*readStateAt)
	}
	c.m[gid] = held
	time.AfterFunc(time.Until(held.at.Add(readStateFresh)), func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.m[gid] == held {
			delete(c.m, gid)
		}
	})
}
