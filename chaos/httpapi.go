package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/groupchat/chatd/gateway"
)

var httpClient = &http.Client{Timeout: 10 * time.Second}

// httpCall sends a request to one of the gateways (the next one when a
// gateway does not answer) and decodes a 200 answer into out.
func httpCall(ctx context.Context, gateways []string, method, path, bearer, body string, out any) error {
	first := rand.IntN(len(gateways))
	var last error
	for i := range gateways {
		base := gateways[(first+i)%len(gateways)]
		var rd io.Reader
		if body != "" {
			rd = bytes.NewReader([]byte(body))
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := httpClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
			if resp.StatusCode == http.StatusServiceUnavailable {
				continue
			}
			return last
		}
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	}
	return last
}

// token signs a client token for uid with the deployment's secret.
func token(uid string) string {
	t, err := gateway.IssueToken([]byte(jwtSecret), uid, 2*time.Hour)
	if err != nil {
		panic(err) // uids are made by newWorld and always valid
	}
	return t
}
