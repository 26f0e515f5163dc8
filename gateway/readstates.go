package gateway

import (
	"container/list"
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

// maxReadStateMembers bounds the members of the read states held, summed
// over their groups: a state costs about 420 bytes a member (4.2 MiB for
// 10,000 members with 128-byte uids), so about 420 MiB at most.
const maxReadStateMembers = 1 << 20

// readStates holds the groups' read states loaded in the last
// readStateFresh, each dropped as it goes stale, and at most maxMembers
// members in all (0: maxReadStateMembers), the oldest dropped first to
// make room; a state larger than that is not held. A group's state is
// loaded once at a time: who asks while it loads waits for that load.
type readStates struct {
	maxMembers int

	mu      sync.Mutex
	loads   map[string]*readStateLoad // by gid: the load in flight, or the state held
	held    list.List                 // of *readStateLoad: the states held, oldest first
	members int                       // in the states held
}

// readStateLoad is one load of a group's read state. st, err and retry
// are set before done is closed.
type readStateLoad struct {
	gid   string
	at    time.Time // when it began
	done  chan struct{}
	st    *store.ReadState
	err   error
	retry bool // it failed as its asker went away: who waited for it loads again

	elem  *list.Element // in readStates.held while held, else nil
	stale *time.Timer   // drops it once stale, while held
}

// get returns gid's read state, loading it unless one loaded less than
// readStateFresh ago is held, or waiting for the load in flight; check
// runs before a load (the projection's replay mark), and its error is the
// answer of everyone who waited for the load.
func (c *readStates) get(ctx context.Context, r *store.Redis, gid string, check func() error) (*store.ReadState, error) {
	for {
		c.mu.Lock()
		l := c.loads[gid]
		switch {
		case l != nil && l.elem == nil: // in flight
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
		case l != nil && time.Since(l.at) < readStateFresh:
			c.mu.Unlock()
			return l.st, nil
		case l != nil:
			c.drop(l) // stale, its timer not yet run
		}
		l = &readStateLoad{gid: gid, at: time.Now(), done: make(chan struct{})}
		if c.loads == nil {
			c.loads = make(map[string]*readStateLoad)
		}
		c.loads[gid] = l
		c.mu.Unlock()
		return c.load(ctx, r, l, check)
	}
}

// load runs l, the load in flight of its group, and holds its state.
func (c *readStates) load(ctx context.Context, r *store.Redis, l *readStateLoad, check func() error) (*store.ReadState, error) {
	var st *store.ReadState
	err := check()
	if err == nil {
		st, err = r.ReadState(ctx, l.gid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l.st, l.err, l.retry = st, err, err != nil && ctx.Err() != nil
	delete(c.loads, l.gid)
	if err == nil {
		c.hold(l)
	}
	close(l.done)
	return st, err
}

// hold keeps l's state until it is stale, dropping the oldest held to
// make room for its members. c.mu is held.
func (c *readStates) hold(l *readStateLoad) {
	limit := c.maxMembers
	if limit == 0 {
		limit = maxReadStateMembers
	}
	n := len(l.st.Members)
	if n > limit {
		return
	}
	for c.members+n > limit {
		c.drop(c.held.Front().Value.(*readStateLoad))
	}
	c.loads[l.gid] = l
	l.elem = c.held.PushBack(l)
	c.members += n
	l.stale = time.AfterFunc(time.Until(l.at.Add(readStateFresh)), func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if l.elem != nil {
			c.drop(l)
		}
	})
}

// drop lets go of l's state, which is held. c.mu is held.
func (c *readStates) drop(l *readStateLoad) {
	l.stale.Stop()
	c.held.Remove(l.elem)
	l.elem = nil
	c.members -= len(l.st.Members)
	if c.loads[l.gid] == l {
		delete(c.loads, l.gid)
	}
}
