package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A signed-in user creates a group and adds members on `chatd dev`; a
// gateway without DevTokens serves none of the dev routes.
func TestDevGroupsOnlyWhenDevTokens(t *testing.T) {
	e := newEnv(t, envOpts{})
	prod := e.addGateway(1, func(c *Config) { c.DevTokens = false })
	alice, bob, carol := e.token("alice"), e.token("bob"), e.token("carol")
	e.waitReplayed("team")

	st, out := e.http("POST", "/v1/dev/groups", alice, map[string]any{"gid": "team", "members": []string{"bob", "alice"}})
	if st != 200 || fmt.Sprint(out["added"]) != "[alice bob]" {
		t.Fatalf("alice creates team with bob: %d %v", st, out)
	}
	e.waitMembers("team", "alice", "bob")
	for _, c := range []struct {
		name, path, token string
		body              any
		status            int
	}{
		{"carol creates a group that exists", "/v1/dev/groups", carol, map[string]any{"gid": "team"}, 403},
		{"carol adds herself", "/v1/dev/groups/team/members", carol, map[string]any{"uid": "carol"}, 403},
		{"no token", "/v1/dev/groups", "", map[string]any{"gid": "x"}, 401},
		{"a forged token", "/v1/dev/groups", "not.a.jwt", map[string]any{"gid": "x"}, 401},
		{"a bad gid", "/v1/dev/groups", alice, map[string]any{"gid": "a/b"}, 400},
		{"a bad member", "/v1/dev/groups/team/members", bob, map[string]any{"uid": "{x}"}, 400},
		{"not JSON", "/v1/dev/groups", alice, "nope", 400},
	} {
		if st, out := e.http("POST", c.path, c.token, c.body); st != c.status || out["message"] == "" {
			t.Errorf("%s: %d %v, want %d with a message", c.name, st, out, c.status)
		}
	}
	if st, out := e.http("POST", "/v1/dev/groups/team/members", bob, map[string]any{"uid": "carol"}); st != 200 || fmt.Sprint(out["added"]) != "[carol]" {
		t.Fatalf("bob adds carol: %d %v", st, out)
	}
	e.waitMembers("team", "carol")

	for _, path := range []string{"/v1/dev/token", "/v1/dev/groups", "/v1/dev/groups/team/members"} {
		b, _ := json.Marshal(map[string]any{"uid": "mallory", "gid": "team"})
		req, _ := http.NewRequest("POST", prod.srv.URL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("POST %s on a gateway without dev tokens: %d, want 404", path, resp.StatusCode)
		}
	}
}

// What a body that lacks a field is answered with names the body to send
// for that route. An add of a member without "uid" on the dev route was
// answered `a member is missing; send e.g. {"gid":"team","members":[...]}`,
// the body of another route, which it refuses the same way again; a dev
// group without "gid" with "gid: schema: invalid id: length 0"; an admin
// group without members with no body at all.
func TestAGroupBodyMissingAFieldIsToldTheBodyToSend(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	e.waitReplayed("team")
	if st, out := e.http("POST", "/v1/dev/groups", alice, map[string]any{"gid": "team"}); st != 200 {
		t.Fatalf("alice creates team: %d %v", st, out)
	}
	e.waitMembers("team", "alice")
	for _, c := range []struct {
		name, path, token string
		body              any
		want              string
	}{
		{"a dev add without uid", "/v1/dev/groups/team/members", alice, map[string]any{"members": []string{"carol"}}, `"uid" is missing; send e.g. {"uid":"carol"}`},
		{"a dev group without gid", "/v1/dev/groups", alice, map[string]any{"members": []string{"bob"}}, `"gid" is missing; send e.g. {"gid":"team","members":["bob"]}`},
		{"an admin group without members", "/v1/admin/groups", adminToken, map[string]any{"gid": "t2"}, `a group needs 1 to 10000 members, got 0; send e.g. {"gid":"team","members":["alice","bob"]}`},
	} {
		if st, out := e.http("POST", c.path, c.token, c.body); st != 400 || out["message"] != c.want {
			t.Errorf("%s: %d %q; want 400 %q", c.name, st, out["message"], c.want)
		}
	}
}

// A GET of /v1/ws that asks no upgrade (curl, the address bar, a proxy
// that drops the Upgrade and Connection headers, nginx's default) got the
// library's text/plain "WebSocket protocol violation: Connection header
// "" does not contain Upgrade". It is told, in the API's JSON, what the
// path is and what the proxy must pass.
func TestAGetOfTheWebSocketPathWithoutUpgradeSaysWhatToDo(t *testing.T) {
	e := newEnv(t, envOpts{})
	st, out := e.httpRaw("GET", "/v1/ws?token=x", http.Header{}, nil)
	msg, _ := out["message"].(string)
	if st != http.StatusUpgradeRequired || out["code"] != "invalid" || !strings.Contains(msg, "/v1/ws is the WebSocket endpoint, and this request asks no upgrade") ||
		!strings.Contains(msg, "proxy_set_header Upgrade $http_upgrade") {
		t.Errorf("GET /v1/ws without an upgrade: %d %v; want 426 saying what the path is and what a proxy must pass", st, out)
	}
	// A proxy that keeps Upgrade but drops Connection (hop-by-hop).
	st, _ = e.httpRaw("GET", "/v1/ws", http.Header{"Upgrade": {"websocket"}}, nil)
	if st != http.StatusUpgradeRequired {
		t.Errorf("GET /v1/ws with Upgrade alone: %d; want 426", st)
	}
}
