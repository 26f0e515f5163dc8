package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// who_read answers a frame of 70 bytes with the message's whole audience,
// up to 10,000 ids (1.23 MiB, 5-9 ms of work): at the frame rate a
// connection had the gateway list them 200 times a second. It costs one
// frame more per protocol.WhoReadPer members it lists, charged to the
// connection's frames or the HTTP user's requests, so that the ids either
// is sent are at most protocol.WhoReadPer per frame of its rate.
func TestWhoReadCostsAFrameMorePerWhoReadPerMembers(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.SendRate, c.SendBurst = 20, 10 }})
	members := []string{"alice"}
	for i := range 1500 {
		members = append(members, fmt.Sprintf("member-%04d", i))
	}
	e.group("big", members...)
	alice := e.login(0, "alice")
	id := sendHi(t, alice, "big", "c1")
	waitFor(t, "the message persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "big"); return h == id })
	rate, burst := (&conn{g: e.gws[0].g}).frameRate() // 100 a second, bursts of 40
	within := func(how string, asks, answered, limited, listed int, elapsed time.Duration) {
		t.Helper()
		// The last answer may come on credit: it is paid for after.
		if most := int((float64(burst)+rate*elapsed.Seconds()+1)*protocol.WhoReadPer) + len(members); limited == 0 || listed > most {
			t.Fatalf("%d who_read %s of a message seen by %d in %v: %d answered, listing %d ids, %d refused rate_limited; want at most %d ids (%d a frame of %.0f a second, bursts of %d)",
				asks, how, len(members)-1, elapsed.Round(time.Millisecond), answered, listed, limited, most, protocol.WhoReadPer, rate, burst)
		}
	}

	const asks = 100
	start := time.Now()
	for range asks {
		alice.send(map[string]any{"op": "who_read", "id": "w", "gid": "big", "msgid": id})
	}
	answered, limited, listed := 0, 0, 0
	for answered+limited < asks {
		switch f := alice.read(); {
		case f["op"] == protocol.OpReaders:
			answered++
			listed += len(f["read"].([]any)) + len(f["unread"].([]any))
		case code(f) == string(protocol.CodeRateLimited):
			limited++
		case f["op"] == protocol.OpPush || f["op"] == protocol.OpReceipts:
		default:
			t.Fatalf("who_read: %v", f)
		}
	}
	within("over a WebSocket", asks, answered, limited, listed, time.Since(start))

	tok := e.token("alice")
	answered, limited, listed = 0, 0, 0
	start = time.Now()
	for range asks / 2 {
		switch resp, f := e.get(fmt.Sprintf("/v1/groups/big/messages/%d/readers", id), tok); resp.StatusCode {
		case http.StatusOK:
			answered++
			listed += len(f["read"].([]any)) + len(f["unread"].([]any))
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Fatalf("who_read over HTTP: %d %v", resp.StatusCode, f)
		}
	}
	within("over HTTP", asks/2, answered, limited, listed, time.Since(start))
}
