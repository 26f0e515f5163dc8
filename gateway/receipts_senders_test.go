package gateway

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// read_counts needs only each message's sender: the answer about messages
// of 16 KiB costs Redis about the answer, not their bodies. It read the
// messages whole, and every one between the msgids asked for: 100 msgids
// spread over 200 messages made Redis send 3 MiB for each answer.
func TestReadCountsOfLargeMessagesLeaveTheirBodiesInRedis(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	body := []byte(strings.Repeat("x", 16<<10))
	msgs := make([]schema.Message, 200)
	for i := range msgs {
		msgs[i] = schema.Message{Gid: "g", Sender: "bob", ClientMsgID: fmt.Sprint("big-", i), SentAt: time.Now().UnixMilli(), Body: body}
	}
	ids, err := e.prod.SendMessages(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "persisted", 30*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g"); return h >= ids[len(ids)-1] })
	var ask []int64
	for i := 0; i < len(ids); i += 2 {
		ask = append(ask, ids[i])
	}
	alice := e.login(0, "alice")
	sent := func() int64 {
		t.Helper()
		v, err := testserver.RedisInfo(context.Background(), e.rc, "stats", "total_net_output_bytes")
		n, perr := strconv.ParseInt(v, 10, 64)
		if err != nil || perr != nil {
			t.Fatalf("INFO stats total_net_output_bytes = %q, %v", v, err)
		}
		return n
	}
	alice.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": ask}) // loads the read state
	// The least of several asks: Redis's count is of every client, and
	// the deployment's own work may add to one ask's, never take away.
	per := int64(math.MaxInt64)
	for range 5 {
		before := sent()
		f := alice.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": ask})
		if counts, _ := f["counts"].([]any); len(counts) != len(ask) {
			t.Fatalf("read_counts of %d messages: %v", len(ask), f)
		}
		per = min(per, sent()-before)
	}
	if per > 16<<10 {
		t.Errorf("read_counts of %d messages of 16 KiB made Redis send %d KiB an answer; want less than one body (16 KiB)", len(ask), per>>10)
	}
}
