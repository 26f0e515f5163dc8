package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrBusy says that a page needed ClickHouse and waited Config.ReadWait
// for a read in vain: the process's reads, or the user's own, were all
// taken. The caller should retry in a moment.
var ErrBusy = errors.New("history: busy: too many reads of old messages at once; retry in a moment")

type userKey struct{}

// WithUser returns ctx naming uid as the user pages are read for: the
// user's reads of ClickHouse are then held to Config.UserReads, so that
// one user's pulls cannot take every read of the process. A page read for
// no user is held to the process's reads only.
func WithUser(ctx context.Context, uid string) context.Context {
	return context.WithValue(ctx, userKey{}, uid)
}

// reads bounds the reads of ClickHouse in flight: the process's, and each
// user's. A read waits for a place, first among its user's and then among
// the process's, at most wait in all. Places go in the order they were
// asked for (a full channel hands a freed place to the sender that waited
// longest), and a user waits for the process's with at most perUser
// reads: a user with many reads queued delays the others by perUser
// reads at most.
type reads struct {
	slots   chan struct{}
	perUser int
	wait    time.Duration

	mu    sync.Mutex
	users map[string]*userReads // the users that read or wait to
}

type userReads struct {
	slots chan struct{}
	refs  int // reads holding or waiting for a place
}

func newReads(n, perUser int, wait time.Duration) *reads {
	return &reads{slots: make(chan struct{}, n), perUser: perUser, wait: wait, users: make(map[string]*userReads)}
}

// acquire waits for a read for the user ctx names (see WithUser) and
// returns the function that gives it back.
func (r *reads) acquire(ctx context.Context) (release func(), err error) {
	timer := time.NewTimer(r.wait)
	defer timer.Stop()
	uid, _ := ctx.Value(userKey{}).(string)
	var u *userReads
	if uid != "" {
		u = r.join(uid)
		if err := take(ctx, timer, u.slots); err != nil {
			r.leave(uid, u)
			return nil, fmt.Errorf("%w (%s has %d reads of ClickHouse in flight)", err, uid, r.perUser)
		}
	}
	if err := take(ctx, timer, r.slots); err != nil {
		if u != nil {
			<-u.slots
			r.leave(uid, u)
		}
		return nil, fmt.Errorf("%w (the %d reads of ClickHouse of this server are in flight)", err, cap(r.slots))
	}
	return func() {
		<-r.slots
		if u != nil {
			<-u.slots
			r.leave(uid, u)
		}
	}, nil
}

func take(ctx context.Context, timer *time.Timer, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-timer.C:
		return ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *reads) join(uid string) *userReads {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.users[uid]
	if u == nil {
		u = &userReads{slots: make(chan struct{}, r.perUser)}
		r.users[uid] = u
	}
	u.refs++
	return u
}

func (r *reads) leave(uid string, u *userReads) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u.refs--; u.refs == 0 {
		delete(r.users, uid)
	}
}
