package store

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

// splitPipelines runs each pipeline of the client it is added to one
// command at a time and calls between with each after it: a reader that another
// client runs while the server is between two commands of a pipeline,
// which a server is free to let happen. A transaction (MULTI ... EXEC)
// runs whole, then between is called with its MULTI.
type splitPipelines struct{ between func(done redis.Cmder) }

func (splitPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (splitPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s splitPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			err := next(ctx, cmds)
			s.between(cmds[0])
			return err
		}
		var first error
		for i := range cmds {
			if err := next(ctx, cmds[i:i+1]); first == nil {
				first = err
			}
			s.between(cmds[i])
		}
		return first
	}
}

// A reader of the window never sees a run with a hole in it, however the
// server interleaves it with an append: not when one group's batch holds
// more than the window (the oldest of it are left out and the window's
// floor rises above them), nor when the window is rebuilt over a history
// whose older part only ClickHouse holds (the floor comes from there).
func TestAWindowReadBetweenTheStepsOfAnAppendFindsNoHole(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	reader := newTestRedis(t, newServerClient(t, srv), RedisConfig{WindowSize: 5})

	// check reads g1 after after, as a pull does, and fails unless the
	// messages are complete: the run goes on right after after (msgids of
	// g1 are consecutive here), or the floor sends the reader to ClickHouse.
	var seen []string
	check := func(after int64) func(redis.Cmder) {
		return func(redis.Cmder) {
			wr, err := reader.Window(ctx, "g1", after, 100, 0)
			if err != nil {
				t.Errorf("Window: %v", err)
				return
			}
			ids := msgIDs(wr.Messages)
			seen = append(seen, "read")
			if after < wr.Floor || len(ids) == 0 {
				return
			}
			if ids[0] != after+1 {
				t.Errorf("Window(after %d) mid-append = %v with floor %d: the run jumps over %d..%d",
					after, ids, wr.Floor, after+1, ids[0]-1)
			}
		}
	}

	t.Run("batch larger than the window", func(t *testing.T) {
		c := newServerClient(t, srv)
		w := newTestRedis(t, c, RedisConfig{WindowSize: 5})
		appendAll(t, w, batchOf("g1", span(0, 4)...)...) // full, no floor
		c.AddHook(splitPipelines{between: check(4)})
		seen = nil
		appendAll(t, w, batchOf("g1", span(5, 14)...)...) // 5..9 left out, 10..14 kept
		if len(seen) == 0 {
			t.Fatal("the append ran no pipeline; the test no longer reads between its steps")
		}
		if ids, complete := window(t, reader, "g1", 4, 100); complete || !slicesEqual(ids, span(10, 14)) {
			t.Errorf("after the append: %v complete=%v, want 10..14 and a floor above 4", ids, complete)
		}
	})

	t.Run("rebuilt over older history", func(t *testing.T) {
		c := newServerClient(t, srv)
		w := newTestRedis(t, c, RedisConfig{WindowSize: 5})
		older := func(context.Context, map[string]int64) (map[string]int64, error) {
			return map[string]int64{"g1": 49}, nil // ClickHouse holds ..49
		}
		c.AddHook(splitPipelines{between: check(-1)})
		seen = nil
		if err := w.AppendWindowOver(ctx, nil, batchOf("g1", span(50, 52)...), older); err != nil {
			t.Fatal(err)
		}
		if len(seen) == 0 {
			t.Fatal("the append ran no pipeline; the test no longer reads between its steps")
		}
		if ids, complete := window(t, reader, "g1", -1, 100); complete || !slicesEqual(ids, span(50, 52)) {
			t.Errorf("after the append: %v complete=%v, want 50..52 and floor 49", ids, complete)
		}
	})
}
