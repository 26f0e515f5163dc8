package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// unreadScript counts a group's messages in the window above a cursor and
// its floor, and returns the floor (empty when none). KEYS: window, floor;
// ARGV: the cursor. A late append (see windowRange) puts messages below the
// floor back for one command: they are not the window's, and not counted.
var unreadScript = redis.NewScript(luaNum + `
local f = redis.call('GET', KEYS[2])
local lo = tonumber(ARGV[1])
local fl = f and num(f)
if fl and fl > lo then lo = fl end
return {redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', lo), '+inf'), f or ''}
`)

// unreadCall is one unreadScript call for gid's messages after cursor.
func unreadCall(gid string, cursor int64) scriptCall {
	return scriptCall{keys: []string{windowKey(gid), floorKey(gid)}, args: []any{cursor}}
}

// unreadResult reads an unreadScript answer (or syncScript's count and
// floor) for a cursor: the count, and whether it is exact (the window was
// not trimmed above the cursor).
func unreadResult(v []any, cursor int64) (n int64, exact bool, err error) {
	if len(v) != 2 {
		return 0, false, fmt.Errorf("%w: unread answered %v", ErrCorruptValue, v)
	}
	n, ok := v[0].(int64)
	f, ok2 := v[1].(string)
	if !ok || !ok2 {
		return 0, false, fmt.Errorf("%w: unread answered %v", ErrCorruptValue, v)
	}
	if f == "" {
		return n, true, nil
	}
	floor, err := parseMsgID(f) // a score's form: miniredis writes 1e+08
	if err != nil {
		return 0, false, fmt.Errorf("floor: %w", err)
	}
	return n, cursor >= floor, nil
}

// Unread counts the group's messages in the window with msgid > cursor.
// exact is false when the window was trimmed above the cursor: then there
// are more, shown as "N+".
func (r *Redis) Unread(ctx context.Context, gid string, cursor int64) (n int64, exact bool, err error) {
	cmds, err := r.runScript(ctx, unreadScript, []scriptCall{unreadCall(gid, cursor)})
	if err == nil {
		var v []any
		if v, err = cmds[0].Slice(); err == nil {
			n, exact, err = unreadResult(v, cursor)
		}
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: unread of %q: %w", gid, err)
	}
	return n, exact, nil
}
