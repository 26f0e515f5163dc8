package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// expectation is the state a projection must hold after a replay, folded
// in memory from the records exactly as the projector folds them: cursors
// to their maximum, member events in offset order. It holds one entry per
// member ever seen.
type expectation struct {
	p       store.Projection
	mu      sync.Mutex
	curs    map[string]map[string]int64            // gid -> uid -> cursor
	members map[string]map[string]store.Membership // gid -> uid -> membership
}

func newExpectation(p store.Projection) *expectation {
	return &expectation{p: p, curs: map[string]map[string]int64{}, members: map[string]map[string]store.Membership{}}
}

func (e *expectation) cursors(acks []schema.Ack) {
	e.cursorRecords(len(acks), func(i int) schema.Ack { return acks[i] })
}

func (e *expectation) cursorRecords(n int, at func(int) schema.Ack) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 0; i < n; i++ {
		a := at(i)
		g := e.curs[a.Gid]
		if g == nil {
			g = map[string]int64{}
			e.curs[a.Gid] = g
		}
		if cur, ok := g[a.Uid]; !ok || a.Upto > cur {
			g[a.Uid] = a.Upto
		}
	}
}

func (e *expectation) memberRecords(n int, at func(int) schema.Member) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 0; i < n; i++ {
		ev := at(i)
		g := e.members[ev.Gid]
		if g == nil {
			g = map[string]store.Membership{}
			e.members[ev.Gid] = g
		}
		g[ev.Uid] = g[ev.Uid].Apply(ev)
	}
}

// report compares the expected state with Redis.
type report struct {
	what                         string
	groups, entries              int // expected
	foundGroups, found           int // in Redis
	missing, differ, extra       int
	wantSum, gotSum              uint64
	userIndex, userIndexMismatch int // members only: user index entries checked, and wrong
	examples                     []string
}

func (r *report) ok() bool {
	return r.missing == 0 && r.differ == 0 && r.extra == 0 && r.userIndexMismatch == 0 && r.wantSum == r.gotSum
}

func (r *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "consistency report for %s:\n", r.what)
	fmt.Fprintf(&b, "  from the topic: %d groups, %d entries, checksum %016x\n", r.groups, r.entries, r.wantSum)
	fmt.Fprintf(&b, "  in Redis:       %d groups, %d entries, checksum %016x\n", r.foundGroups, r.found, r.gotSum)
	fmt.Fprintf(&b, "  missing %d, different %d, unexpected %d", r.missing, r.differ, r.extra)
	if r.what == string(store.ProjectionMembers) {
		fmt.Fprintf(&b, "; user index: %d entries checked, %d wrong", r.userIndex, r.userIndexMismatch)
	}
	b.WriteString("\n")
	for _, ex := range r.examples {
		fmt.Fprintf(&b, "  e.g. %s\n", ex)
	}
	if r.ok() {
		b.WriteString("  OK: Redis holds exactly what the topic says\n")
	}
	return b.String()
}

func (r *report) example(format string, args ...any) {
	if len(r.examples) < 5 {
		r.examples = append(r.examples, fmt.Sprintf(format, args...))
	}
}

// entryHash hashes one entry; sums of it are order-independent checksums.
func entryHash(gid, uid, v string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(gid))
	h.Write([]byte{0})
	h.Write([]byte(uid))
	h.Write([]byte{0})
	h.Write([]byte(v))
	return h.Sum64()
}

func (e *expectation) check(ctx context.Context, rds *store.Redis) (*report, error) {
	if e.p == store.ProjectionMembers {
		return e.checkMembers(ctx, rds)
	}
	r := &report{what: string(e.p), groups: len(e.curs)}
	for gid, us := range e.curs {
		r.entries += len(us)
		for uid, c := range us {
			r.wantSum += entryHash(gid, uid, fmt.Sprint(c))
		}
	}
	seen := map[string]bool{}
	err := rds.EachCursors(ctx, e.p, func(gid string, got map[string]int64) error {
		seen[gid] = true
		r.foundGroups++
		r.found += len(got)
		want := e.curs[gid]
		for uid, c := range got {
			r.gotSum += entryHash(gid, uid, fmt.Sprint(c))
			w, ok := want[uid]
			switch {
			case !ok:
				r.extra++
				r.example("%s/%s: Redis has cursor %d, the topic none", gid, uid, c)
			case w != c:
				r.differ++
				r.example("%s/%s: Redis has cursor %d, the topic says %d", gid, uid, c, w)
			}
		}
		for uid, w := range want {
			if _, ok := got[uid]; !ok {
				r.missing++
				r.example("%s/%s: Redis has no cursor, the topic says %d", gid, uid, w)
			}
		}
		return nil
	})
	for gid, us := range e.curs {
		if !seen[gid] {
			r.missing += len(us)
			r.example("%s: Redis has no cursors, the topic has %d", gid, len(us))
		}
	}
	return r, err
}

func (e *expectation) checkMembers(ctx context.Context, rds *store.Redis) (*report, error) {
	r := &report{what: string(e.p)}
	byUser := map[string]map[string]store.Membership{}
	for gid, us := range e.members {
		n := 0
		for uid, m := range us {
			if m.State == store.MemberNone {
				continue
			}
			n++
			r.wantSum += entryHash(gid, uid, fmt.Sprint(m))
			if byUser[uid] == nil {
				byUser[uid] = map[string]store.Membership{}
			}
			byUser[uid][gid] = m
		}
		if n > 0 {
			r.groups++
			r.entries += n
		}
	}
	seen := map[string]bool{}
	err := rds.EachMembers(ctx, func(gid string, got map[string]store.Membership) error {
		seen[gid] = true
		r.foundGroups++
		r.found += len(got)
		want := e.members[gid]
		for uid, m := range got {
			r.gotSum += entryHash(gid, uid, fmt.Sprint(m))
			w, ok := want[uid]
			switch {
			case !ok || w.State == store.MemberNone:
				r.extra++
				r.example("%s/%s: Redis has %+v, the topic nothing", gid, uid, m)
			case w != m:
				r.differ++
				r.example("%s/%s: Redis has %+v, the topic says %+v", gid, uid, m, w)
			}
		}
		for uid, w := range want {
			if _, ok := got[uid]; !ok && w.State != store.MemberNone {
				r.missing++
				r.example("%s/%s: Redis has no membership, the topic says %+v", gid, uid, w)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for gid, us := range e.members {
		if !seen[gid] && len(us) > 0 {
			r.missing += len(us)
			r.example("%s: Redis has no members, the topic has %d", gid, len(us))
		}
	}
	err = rds.EachUserGroups(ctx, func(uid string, got map[string]store.Membership) error {
		want := byUser[uid]
		for gid, m := range got {
			r.userIndex++
			if want[gid] != m {
				r.userIndexMismatch++
				r.example("user index of %s: %s is %+v, the topic says %+v", uid, gid, m, want[gid])
			}
		}
		if len(got) < len(want) {
			r.userIndexMismatch += len(want) - len(got)
			r.example("user index of %s: %d groups, the topic says %d", uid, len(got), len(want))
		}
		return nil
	})
	return r, err
}
