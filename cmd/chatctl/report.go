package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// expectation is the state a projection must hold after a replay, folded
// in memory from the records exactly as the projector folds them: cursors
// to their maximum (per partition: a group lives in one), member events in
// offset order. It holds one entry per member ever seen.
type expectation struct {
	p       store.Projection
	mu      sync.Mutex
	folds   map[int]*cursorFold                    // partition -> its cursors
	members map[string]map[string]store.Membership // gid -> uid -> membership
}

func newExpectation(p store.Projection) *expectation {
	return &expectation{p: p, folds: map[int]*cursorFold{}, members: map[string]map[string]store.Membership{}}
}

// fold returns a partition's cursor fold. Only the goroutine reading the
// partition uses it.
func (e *expectation) fold(part int) *cursorFold {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.folds[part]
	if f == nil {
		f = &cursorFold{groups: map[string]map[string]cursor{}}
		e.folds[part] = f
	}
	return f
}

// cursorFold is every member's highest cursor in one partition, and which
// of them are not written yet.
type cursorFold struct {
	groups map[string]map[string]cursor // gid -> uid -> cursor
	dirty  int                          // cursors not written yet
	next   int64                        // offset after the last record folded
	// "gid/uid" of every member chat.members has named so far (ids hold
	// no "/").
	members map[string]bool
}

type cursor struct {
	v       int64
	pending bool // not written to Redis yet
	// Of the projection's own records (not joins): whether there were any,
	// the highest and the last, in offset order. A last below the highest
	// is what compaction would keep, so the rebuild appends the highest
	// again, as the live projector does.
	recorded  bool
	rec, last int64
}

// add folds a cursor record of the projection's topic.
func (f *cursorFold) add(gid, uid string, upto int64) {
	c := f.raise(gid, uid, upto)
	if !c.recorded || upto > c.rec {
		c.rec = upto
	}
	c.recorded, c.last = true, upto
	f.groups[gid][uid] = c
}

// addJoin folds the cursor raise of a join.
func (f *cursorFold) addJoin(gid, uid string, pos int64) {
	f.groups[gid][uid] = f.raise(gid, uid, pos)
	f.name(gid, uid)
}

// name notes that a member event named uid in gid: the member projector
// knows them from then on.
func (f *cursorFold) name(gid, uid string) {
	if f.members == nil {
		f.members = map[string]bool{}
	}
	f.members[gid+"/"+uid] = true
}

// named reports whether a member event named uid in gid.
func (f *cursorFold) named(gid, uid string) bool { return f.members[gid+"/"+uid] }

// raise returns uid's cursor in gid raised to at least v, counting it as
// unwritten when it moved.
func (f *cursorFold) raise(gid, uid string, v int64) cursor {
	g := f.groups[gid]
	if g == nil {
		g = map[string]cursor{}
		f.groups[gid] = g
	}
	c, ok := g[uid]
	if ok && v <= c.v {
		return c
	}
	if !c.pending {
		f.dirty++
	}
	c.v, c.pending = v, true
	g[uid] = c
	return c
}

// behind returns the cursors whose last record is below their highest: the
// records that must be appended again for a compacted topic to keep them.
func (f *cursorFold) behind() []schema.Ack {
	var out []schema.Ack
	for gid, us := range f.groups {
		for uid, c := range us {
			if c.recorded && c.last < c.rec {
				out = append(out, schema.Ack{Gid: gid, Uid: uid, Upto: c.rec})
			}
		}
	}
	return out
}

// flush hands the unwritten cursors to write, in chunks, and marks them
// written.
func (f *cursorFold) flush(write func([]schema.Ack) error) error {
	const chunk = 50000
	out := make([]schema.Ack, 0, min(f.dirty, chunk))
	for gid, us := range f.groups {
		for uid, c := range us {
			if !c.pending {
				continue
			}
			out = append(out, schema.Ack{Gid: gid, Uid: uid, Upto: c.v})
			c.pending = false
			us[uid] = c
			if len(out) == chunk {
				if err := write(out); err != nil {
					return err
				}
				out = out[:0]
			}
		}
	}
	if len(out) > 0 {
		if err := write(out); err != nil {
			return err
		}
	}
	f.dirty = 0
	return nil
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
		if m, ok := g[ev.Uid]; ok || m.Apply(ev).State != store.MemberNone {
			g[ev.Uid] = m.Apply(ev)
		}
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
func entryHash(gid, uid string, v int64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(gid))
	h.Write([]byte{0})
	h.Write([]byte(uid))
	h.Write([]byte{0})
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	h.Write(b[:])
	return h.Sum64()
}

// membershipValue packs a membership into one number for entryHash.
func membershipValue(m store.Membership) int64 {
	return int64(m.State)<<60 ^ m.JoinedAt<<30 ^ m.LeftAt
}

func (e *expectation) check(ctx context.Context, rds *store.Redis) (*report, error) {
	if e.p == store.ProjectionMembers {
		return e.checkMembers(ctx, rds)
	}
	curs := map[string]map[string]cursor{} // gid -> uid -> cursor, all partitions
	for _, f := range e.folds {
		for gid, us := range f.groups {
			curs[gid] = us
		}
	}
	r := &report{what: string(e.p), groups: len(curs)}
	for gid, us := range curs {
		r.entries += len(us)
		for uid, c := range us {
			r.wantSum += entryHash(gid, uid, c.v)
		}
	}
	seen := map[string]bool{}
	err := rds.EachCursors(ctx, e.p, func(gid string, got map[string]int64) error {
		seen[gid] = true
		r.foundGroups++
		r.found += len(got)
		want := curs[gid]
		for uid, c := range got {
			r.gotSum += entryHash(gid, uid, c)
			w, ok := want[uid]
			switch {
			case !ok:
				r.extra++
				r.example("%s/%s: Redis has cursor %d, the topic none", gid, uid, c)
			case w.v != c:
				r.differ++
				r.example("%s/%s: Redis has cursor %d, the topic says %d", gid, uid, c, w.v)
			}
		}
		for uid, w := range want {
			if _, ok := got[uid]; !ok {
				r.missing++
				r.example("%s/%s: Redis has no cursor, the topic says %d", gid, uid, w.v)
			}
		}
		return nil
	})
	for gid, us := range curs {
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
			r.wantSum += entryHash(gid, uid, membershipValue(m))
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
			r.gotSum += entryHash(gid, uid, membershipValue(m))
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
	indexed := map[string]bool{}
	err = rds.EachUserGroups(ctx, func(uid string, got map[string]store.Membership) error {
		indexed[uid] = true
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
	if err != nil {
		return nil, err
	}
	for uid, want := range byUser {
		if !indexed[uid] {
			r.userIndexMismatch += len(want)
			r.example("user index of %s: none, the topic says %d groups", uid, len(want))
		}
	}
	return r, nil
}
