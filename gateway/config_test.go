package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/store"
)

// A timing the gateway's loops cannot run with (their tickers would panic,
// or every write would time out at once) is refused by New, naming it.
func TestConfigRefusesTimingsItCannotRunWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"WriteTimeout", func(c *Config) { c.WriteTimeout = -time.Second }},
		{"PingInterval", func(c *Config) { c.PingInterval = -time.Second }},
		{"PingInterval", func(c *Config) { c.PingInterval = 5 * time.Nanosecond }},
		{"AuthTimeout", func(c *Config) { c.AuthTimeout = -time.Second }},
		{"PresenceTTL", func(c *Config) { c.PresenceTTL = -time.Second }},
		{"PresenceTTL", func(c *Config) { c.PresenceTTL = 2 * time.Nanosecond }},
		{"NodeLease", func(c *Config) { c.NodeLease = -time.Second }},
		{"NodeLease", func(c *Config) { c.NodeLease = 500 * time.Microsecond }},
	} {
		cfg := Config{Redis: new(store.Redis), Producer: new(producers.Producer), History: new(history.History), Secret: []byte(testSecret)}
		tc.set(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: New = %v; want an error naming %s", tc.name, err, tc.name)
		}
	}
}
