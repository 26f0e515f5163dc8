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

// readStates holds the groups' read states recently loaded, at most
// maxReadStates of them (all dropped when full).
type readStates struct {
	mu sync.Mutex
	m  map[string]readStateAt
}

type readStateAt struct {
	st *store.ReadState
	at time.Time
}

const maxReadStates = 4096

// get returns gid's read state, loading it unless one loaded less than
// readStateFresh ago is held; check runs before a load (the projection's
// replay mark).
func (c *readStates) get(ctx context.Context, r *store.Redis, gid string, check func() error) (*store.ReadState, error) {
	now := time.Now()
	c.mu.Lock()
	held, ok := c.m[gid]
	c.mu.Unlock()
	if ok && now.Sub(held.at) < readStateFresh {
		return held.st, nil
	}
	if err := check(); err != nil {
		return nil, err
	}
	st, err := r.ReadState(ctx, gid)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxReadStates {
		c.m = make(map[string]readStateAt)
	}
	c.m[gid] = readStateAt{st, now}
	return st, nil
}
