package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// The HTTP API does what the WebSocket operations do, for bots and curl.
func TestHTTPAPIFlow(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("team", "alice", "bob")
	alice, bob := e.token("alice"), e.token("bob")
	st, acc := e.http("POST", "/v1/groups/team/messages", alice, map[string]any{"cmid": "c-1", "body": "hello bob"})
	if st != 200 || acc["op"] != "accepted" {
		t.Fatalf("send: %d %v", st, acc)
	}
	id := acc["msgid"].(float64)
	if st, again := e.http("POST", "/v1/groups/team/messages", alice, map[string]any{"cmid": "c-1", "body": "hello bob"}); st != 200 || again["msgid"] != id {
		t.Fatalf("resend with the same cmid: %d %v, want msgid %v", st, again, id)
	}
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "team"); return float64(h) == id })
	st, sync := e.http("GET", "/v1/sync", bob, nil)
	g := sync["groups"].([]any)[0].(map[string]any)
	if st != 200 || g["unread"].(float64) != 1 {
		t.Fatalf("sync: %d %v", st, sync)
	}
	st, page := e.http("GET", "/v1/groups/team/messages?after=-1&limit=10", bob, nil)
	if st != 200 || len(page["msgs"].([]any)) != 1 || page["more"] != false {
		t.Fatalf("pull: %d %v", st, page)
	}
	if st, out := e.http("POST", "/v1/groups/team/read", bob, map[string]any{"upto": id}); st != 200 || out["op"] != "ok" {
		t.Fatalf("read: %d %v", st, out)
	}
	waitFor(t, "read applied", 10*time.Second, func() bool {
		cur, _ := e.redis.ReadCursors(context.Background(), "team")
		return float64(cur["bob"]) == id
	})
	st, counts := e.http("GET", fmt.Sprintf("/v1/groups/team/read_counts?msgids=%v", id), alice, nil)
	if c := counts["counts"].([]any); st != 200 || len(c) != 1 || c[0].(map[string]any)["read"].(float64) != 1 {
		t.Fatalf("read counts: %d %v", st, counts)
	}
	st, who := e.http("GET", fmt.Sprintf("/v1/groups/team/messages/%v/readers", id), alice, nil)
	if st != 200 || fmt.Sprint(who["read"]) != "[bob]" {
		t.Fatalf("readers: %d %v", st, who)
	}
	for _, c := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"POST", "/v1/groups/team/ack", map[string]any{"upto": id + 1000}, 400},
		{"POST", "/v1/groups/team/messages", map[string]any{"body": "no cmid"}, 400},
		{"GET", "/v1/groups/team/messages?limit=abc", nil, 400},
		{"GET", "/v1/groups/other/messages", nil, 403},
	} {
		if st, out := e.http(c.method, c.path, bob, c.body); st != c.status || out["message"] == "" {
			t.Errorf("%s %s: %d %v, want %d with a message", c.method, c.path, st, out, c.status)
		}
	}
}

// A malformed request of the HTTP API is answered with a message that names
// the field at fault, as a malformed WebSocket frame is.
func TestHTTPErrorsNameTheField(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	alice := e.token("alice")
	for _, c := range []struct{ path, field string }{
		{"/v1/groups/g1/read_counts?msgids=abc", "msgids"},
		{"/v1/groups/g1/read_counts?msgids=1,2,", "msgids"},
		{"/v1/groups/g1/messages?after=abc", "after"},
		{"/v1/groups/g1/messages/abc/readers", "msgid"},
	} {
		st, out := e.http("GET", c.path, alice, nil)
		msg, _ := out["message"].(string)
		if st != 400 || !strings.Contains(msg, c.field) {
			t.Errorf("GET %s: %d %q, want 400 naming %s", c.path, st, msg, c.field)
		}
	}
	// A POST without a body, or with null, lacks upto: say so.
	for name, body := range map[string]any{"no body": nil, "null": json.RawMessage("null")} {
		st, out := e.http("POST", "/v1/groups/g1/ack", alice, body)
		msg, _ := out["message"].(string)
		if st != 400 || !strings.Contains(msg, "upto") {
			t.Errorf("POST /v1/groups/g1/ack with %s: %d %q, want 400 naming upto", name, st, msg)
		}
	}
}

// A group of up to 10,000 members of ids up to 128 bytes is allowed: a body
// that large is taken, and one past the limit is refused as too large
// (saying what to do), not as malformed.
func TestALargeAdminBodyIsTakenAndATooLargeOneSaysSo(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.waitReplayed("big")
	uid := strings.Repeat("u", 127)
	members := make([]string, 8500) // one member named 8,500 times: joins once
	for i := range members {
		members[i] = uid
	}
	st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "big", "members": members})
	msg, _ := out["message"].(string)
	if st != 200 && (code(out) != string(protocol.CodeBodyTooLarge) || strings.Contains(msg, "must be JSON")) {
		t.Fatalf("a valid body of %d members (about 1.1 MB): %d %v, want it taken or refused as too large", len(members), st, out)
	}
	members = append(members, members...) // about 2.2 MB
	st, out = e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "big", "members": members})
	msg, _ = out["message"].(string)
	if st != 400 || code(out) != string(protocol.CodeBodyTooLarge) || !strings.Contains(msg, "/members") {
		t.Fatalf("a body of %d members (about 2.2 MB): %d %v, want body_too_large saying to add the rest with .../members", len(members), st, out)
	}
}

// The HTTP API takes its tokens from the Authorization header only: a
// token in the URL lands in every proxy's access log, and the admin token
// there would let anyone who reads the logs administer. The WebSocket
// upgrade still takes ?token=, which browsers need.
func TestTheHTTPAPITakesNoTokenInTheURL(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	st, out := e.http("POST", "/v1/admin/groups?token="+adminToken, "", map[string]any{"gid": "g2", "members": []string{"alice"}})
	if st != 403 || !strings.Contains(fmt.Sprint(out["message"]), "Authorization: Bearer") {
		t.Fatalf("admin call with the token in the URL: %d %v, want 403 naming the header", st, out)
	}
	if end := e.lastMemberEvent("g2", "alice"); end.Gid != "" {
		t.Fatalf("the refused admin call wrote %+v", end)
	}
	st, out = e.http("GET", "/v1/sync?token="+e.token("alice"), "", nil)
	if st != 401 || code(out) != string(protocol.CodeUnauthenticated) {
		t.Fatalf("user call with the token in the URL: %d %v, want 401 unauthenticated", st, out)
	}
	if st, out := e.http("GET", "/v1/sync", e.token("alice"), nil); st != 200 {
		t.Fatalf("user call with the header: %d %v", st, out)
	}
	e.login(0, "alice") // the WebSocket: ?token= in the URL
}

// An admin's retry of "add alice" that comes before the member projector
// has the first join writes no second one: a second join would move her
// start forward and hide from her what was sent in between. A removal
// ends that: a join after it is a new one.
func TestARetriedJoinBeforeItsProjectionIsWrittenOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "bob")
	e.parts["members"].stop() // the projection lags
	before := e.topicEndsOf(topics.Members)
	for range 2 {
		if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"}); st != 200 {
			t.Fatalf("add alice: %d %v", st, out)
		}
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 1 {
		t.Fatalf("adding alice twice before the projection wrote %d joins, want 1", n)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", "alice")
	e.removeMember("g1", "alice")
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"}); st != 200 || fmt.Sprint(out["added"]) != "[alice]" {
		t.Fatalf("add alice again after her removal: %d %v, want her added", st, out)
	}
	e.waitMembers("g1", "alice")
}

// An add to a group that never had a member answers not_found, as a
// removal from it does, and names the request that creates a group: a typo
// in the path made a group. A group just created is one, though the member
// projector has not applied its joins yet, and so is one whose members all
// left.
func TestAnAddToAGroupThatDoesNotExistIsNotFound(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.waitReplayed("nosuch2")
	ends := e.topicEndsOf(topics.Members)
	st, out := e.http("POST", "/v1/admin/groups/nosuch2/members", adminToken, map[string]any{"uid": "zz"})
	if st != 404 || code(out) != string(protocol.CodeNotFound) || !strings.Contains(fmt.Sprint(out["message"]), "POST /v1/admin/groups") {
		t.Errorf("add to a group never created: %d %v, want 404 not_found naming POST /v1/admin/groups", st, out)
	}
	if got := e.topicEndsOf(topics.Members); got != ends {
		t.Errorf("an add to a group never created wrote %d membership changes", got-ends)
	}

	e.group("gone", "alice")
	e.removeMember("gone", "alice")
	if st, out := e.http("POST", "/v1/admin/groups/gone/members", adminToken, map[string]any{"uid": "bob"}); st != 200 {
		t.Errorf("add to a group whose members all left: %d %v, want 200", st, out)
	}

	e.waitReplayed("fresh")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "fresh", "members": []string{"alice"}}); st != 200 {
		t.Fatalf("create fresh: %d %v", st, out)
	}
	if st, out := e.http("POST", "/v1/admin/groups/fresh/members", adminToken, map[string]any{"uid": "bob"}); st != 200 || fmt.Sprint(out["added"]) != "[bob]" {
		t.Errorf("add to a group created before the projection has it: %d %v, want bob added", st, out)
	}
}

// Adding a member who is one answers "added" as an empty list, not null:
// a client reads the answer's list without a case for its absence.
func TestAnAddOfAMemberAnswersAnEmptyList(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	for _, add := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/admin/groups", map[string]any{"gid": "g1", "members": []string{"alice", "bob"}}},
		{"/v1/admin/groups/g1/members", map[string]any{"uid": "bob"}},
	} {
		st, out := e.http("POST", add.path, adminToken, add.body)
		if added, ok := out["added"].([]any); st != 200 || !ok || len(added) != 0 {
			t.Errorf("POST %s of members already in g1: %d %v, want 200 and \"added\": []", add.path, st, out)
		}
	}
}

// A group takes at most MaxMembers members: a create or an add past it is
// refused with what to do, and writes nothing; room made by a removal is
// taken again.
func TestAGroupTakesAtMostMaxMembers(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxMembers = 3 }})
	if st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "big", "members": []string{"a", "b", "c", "d"}}); st != 400 || !strings.Contains(fmt.Sprint(out["message"]), "1 to 3 members") {
		t.Fatalf("create with 4 members: %d %v, want 400 naming the limit", st, out)
	}
	e.group("g1", "a", "b", "c")
	ends := e.topicEndsOf(topics.Members)
	st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "d"})
	if st != 400 || code(out) != string(protocol.CodeInvalid) || !strings.Contains(fmt.Sprint(out["message"]), "remove members first") {
		t.Fatalf("a 4th member: %d %v, want 400 invalid saying to remove members first", st, out)
	}
	if got := e.topicEndsOf(topics.Members); got != ends {
		t.Fatalf("a refused add wrote %d membership changes", got-ends)
	}
	// Adding one who is a member is still a no-op, not a refusal.
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "a"}); st != 200 {
		t.Fatalf("adding a member again at the limit: %d %v, want 200", st, out)
	}
	e.removeMember("g1", "c")
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "d"}); st != 200 {
		t.Fatalf("a 4th member after a removal: %d %v, want 200", st, out)
	}
}

// What the API does not take is answered in its JSON, saying what is
// wrong: an unknown route, a route asked with another method, a query
// parameter that is not a number (a query holds no JSON).
func TestHTTPMistakesAreAnsweredInJSON(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	alice := e.token("alice")
	for _, c := range []struct {
		method, path string
		status       int
		says         string
	}{
		{"GET", "/v1/nothing", 404, "no route GET /v1/nothing"},
		{"GET", "/v1/groups/g1/ack", 405, "/v1/groups/g1/ack takes POST, not GET"},
		{"DELETE", "/v1/groups/g1/messages", 405, "/v1/groups/g1/messages takes GET or POST, not DELETE"},
		{"GET", "/v1/groups/g1/messages?after=abc", 400, `after must be an integer, got "abc"`},
		{"GET", "/v1/groups/g1/messages/x/readers", 400, `msgid must be an integer, got "x"`},
	} {
		st, out := e.http(c.method, c.path, alice, nil)
		msg, _ := out["message"].(string)
		if st != c.status || out["code"] == nil || !strings.Contains(msg, c.says) {
			t.Errorf("%s %s: %d %v, want %d with a code and a message saying %q", c.method, c.path, st, out, c.status, c.says)
		}
	}
}

// The numbers of a query are read as integers (strconv's: a sign, leading
// zeros), not pasted into JSON, where they would not parse and the answer
// would name no field.
func TestHTTPQueryNumbersAreTakenAsIntegers(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	alice := e.token("alice")
	for path, op := range map[string]string{
		"/v1/groups/g1/messages?after=%2B0&limit=007": protocol.OpPage,
		"/v1/groups/g1/read_counts?msgids=00,-0":      protocol.OpCounts,
	} {
		if st, out := e.http("GET", path, alice, nil); st != 200 || out["op"] != op {
			t.Errorf("GET %s: %d %v, want %s", path, st, out, op)
		}
	}
}

// A request body cut short by the client is answered as such, not as a
// body over the limit, which would have the client split a message that
// was never too large.
func TestAnHTTPBodyCutShortIsNotCalledTooLarge(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	host := strings.TrimPrefix(e.gws[0].srv.URL, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/groups/g1/messages HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"cmid\":", host, e.token("alice"))
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != 400 || out["code"] != string(protocol.CodeBadFrame) || !strings.Contains(out["message"], "whole") {
		t.Fatalf("a body cut short: %d %v, want bad_frame saying it did not arrive whole", resp.StatusCode, out)
	}
}

// The mistakes made most with the administration and token bodies are
// answered with what is wrong and an example of the right body, not with
// the JSON decoder's or the id checker's words; and the bearer scheme is
// taken in any case, as HTTP has it.
func TestBodyMistakesAreAnsweredWithWhatToSend(t *testing.T) {
	e := newEnv(t, envOpts{})
	raw := func(method, path, auth, contentType, body string) (int, map[string]any) {
		t.Helper()
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		if contentType != "" {
			h.Set("Content-Type", contentType)
		}
		return e.httpRaw(method, path, h, strings.NewReader(body))
	}
	admin := "Bearer " + adminToken
	for _, tc := range []struct {
		name, method, path, contentType, body string
		code, says                            string
	}{
		{"members as a string", "POST", "/v1/admin/groups", "", `{"gid":"team","members":"alice"}`, "bad_frame", `"members" must be a list of user ids, not a JSON string; send e.g. {"gid":"team"`},
		{"a form", "POST", "/v1/admin/groups", "application/x-www-form-urlencoded", `gid=team&members=alice`, "bad_frame", `the body is not a JSON object; send e.g. {"gid":"team"`},
		{"no gid", "POST", "/v1/admin/groups", "", `{"members":["alice"]}`, "invalid", `"gid" is missing; send e.g. {"gid":"team","members":["alice","bob"]}`},
		{"no uid to add", "POST", "/v1/admin/groups/team/members", "", `{}`, "invalid", `"uid" is missing; send e.g. {"uid":"carol"}`},
		{"an empty member", "POST", "/v1/admin/groups", "", `{"gid":"team","members":["alice",""]}`, "invalid", `a member is missing`},
		{"no uid for a token", "POST", "/v1/dev/token", "", `{}`, "invalid", `"uid" is missing; send e.g. {"uid":"alice"} (or ?uid=alice)`},
	} {
		auth := admin
		if strings.HasPrefix(tc.path, "/v1/dev/") {
			auth = ""
		}
		st, out := raw(tc.method, tc.path, auth, tc.contentType, tc.body)
		if msg, _ := out["message"].(string); st < 400 || out["code"] != tc.code || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %v; want %s saying %q", tc.name, st, out, tc.code, tc.says)
		}
	}
	tok, err := IssueToken([]byte(testSecret), "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st, out := raw("GET", "/v1/sync", "bearer "+tok, "", ""); st != 200 {
		t.Errorf("a sync with the scheme written \"bearer\": %d %v; want 200", st, out)
	}
}
