package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
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
