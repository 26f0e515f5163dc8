package main

import (
	"os/exec"
	"strings"
	"testing"
)

// A CHAT_* variable chatd does not read was ignored without a word: with
// CHAT_CLICKHOUSE_ADDR (no S) chatd dev ran without ClickHouse, with
// CHAT_HTTP_ADRR on the default port, and the operator learnt it from
// what went missing. chatd refuses one close to a variable it reads,
// naming that one; one close to none (a newer release's, set for every
// role during an upgrade) is warned of and chatd starts.
func TestAMisspelledVariableIsRefusedNamingTheOneMeant(t *testing.T) {
	for _, c := range []struct {
		kv      string
		want    []string
		refused bool
	}{
		{"CHAT_CLICKHOUSE_ADDR=127.0.0.1:9000", []string{"CHAT_CLICKHOUSE_ADDR is set, but chatd reads no such variable", "did you mean CHAT_CLICKHOUSE_ADDRS?"}, true},
		{"CHAT_HTTP_ADRR=:8080", []string{"did you mean CHAT_HTTP_ADDR?"}, true},
		{"CHAT_FROBNICATE=1", []string{"CHAT_FROBNICATE is set, but this chatd reads no such variable", "newer release", "chatd help"}, false},
	} {
		warnings, err := checkVarNames([]string{"PATH=/bin", "CHAT_PARTITIONS=4", c.kv})
		said := strings.Join(warnings, "\n")
		if err != nil {
			said = err.Error()
		}
		if (err != nil) != c.refused {
			t.Errorf("%s: error %v, warnings %q; want refused %v", c.kv, err, warnings, c.refused)
		}
		for _, w := range c.want {
			if !strings.Contains(said, w) {
				t.Errorf("%s: said %q, want it to say %q", c.kv, said, w)
			}
		}
	}
	// chatbroker's variable may be set beside chatd's on one host.
	if warnings, err := checkVarNames(append(envNames(), "CHAT_BROKER_NO_SYNC")); err != nil || len(warnings) > 0 {
		t.Errorf("chatd's and chatbroker's own variables: %v %q", err, warnings)
	}

	// What the binary says, before it starts anything.
	bin := buildChatd(t)
	cmd := exec.Command(bin, "dev")
	cmd.Env = []string{"CHAT_CLICKHOUSE_ADDR=127.0.0.1:9000", "CHAT_DATA_DIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "did you mean CHAT_CLICKHOUSE_ADDRS?") {
		t.Errorf("chatd dev with CHAT_CLICKHOUSE_ADDR: %v\n%s\nwant a refusal naming CHAT_CLICKHOUSE_ADDRS", err, out)
	}
	// chatd help still lists the variables.
	cmd = exec.Command(bin, "help")
	cmd.Env = []string{"CHAT_CLICKHOUSE_ADDR=127.0.0.1:9000"}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "CHAT_CLICKHOUSE_ADDRS") {
		t.Errorf("chatd help with CHAT_CLICKHOUSE_ADDR set: %v\n%s", err, out)
	}
}
