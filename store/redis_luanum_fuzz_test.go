package store

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// luaNumProbe answers num(v) for the value v of KEYS[1] (as the scripts
// read a group's floor with GET), in %.17g, or "nil".
var luaNumProbe = redis.NewScript(luaNum + `
local n = num(redis.call('GET', KEYS[1]))
if n == nil then return 'nil' end
return string.format('%.17g', n)
`)

// FuzzLuaNum stores any short value where the scripts read a number with
// num (a floor: GET, then num) and reads it in Lua and in Go. The stored
// value is outside bytes (a floor or cursor of an older release, an
// operator's edit): reading it costs Redis memory (and time) of the
// value's size, not of the number it names, and where the scripts and the Go readers
// (parseMsgID) both read a number, it is the same number. The embedded
// Redis (miniredis: chatd dev and the tests) is the one whose Lua's
// tonumber does not read "1e+8", so num reads it by hand there.
func FuzzLuaNum(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	for _, s := range []string{"0", "-1", "42", "1e+8", "1e8", "1E+08", "1.5e+9", "9007199254740992", "9.007199254740992e+15",
		"1e+300", "-1e+15", "abc", "", " 1", "1.5", "0x10", "1e+99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 64 {
			return
		}
		if err := m.Set("chat:{fz}:floor", s); err != nil {
			t.Fatal(err)
		}
		// miniredis runs its Lua in this process: what the script
		// allocates shows in this process's allocations.
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := luaNumProbe.Run(ctx, r.client, []string{"chat:{fz}:floor"}).Text()
		runtime.ReadMemStats(&after)
		if a := after.TotalAlloc - before.TotalAlloc; a > 4<<20 {
			t.Fatalf("num(%q), %d bytes, allocated %d MiB", s, len(s), a>>20)
		}
		if err != nil {
			t.Fatalf("num(%q): %v", s, err)
		}
		if res == "nil" {
			return
		}
		n, err := strconv.ParseFloat(res, 64)
		if err != nil {
			t.Fatalf("num(%q) answered %q", s, res)
		}
		if v, err := parseMsgID(s); err == nil && float64(v) != n {
			t.Fatalf("%q: the scripts read %v, Go reads %d", s, n, v)
		}
	})
}
