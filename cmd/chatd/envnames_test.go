package main

import (
	"os/exec"
	"strings"
	"testing"
)

// A CHAT_* variable chatd does not read was ignored without a word: with
// CHAT_CLICKHOUSE_ADDR (no S) chatd dev ran without ClickHouse, with
// CHAT_HTTP_ADRR on the default port, and the operator learnt it from
// what went missing. chatd refuses it, naming the variable meant.
func TestAMisspelledVariableIsRefusedNamingTheOneMeant(t *testing.T) {
	for _, c := range []struct {
		kv   string
		want []string
	}{
		{"CHAT_CLICKHOUSE_ADDR=127.0.0.1:9000", []string{"CHAT_CLICKHOUSE_ADDR is set, but chatd reads no such variable", "did you mean CHAT_CLICKHOUSE_ADDRS?"}},
		{"CHAT_HTTP_ADRR=:8080", []string{"did you mean CHAT_HTTP_ADDR?"}},
		{"CHAT_FROBNICATE=1", []string{"CHAT_FROBNICATE is set, but chatd reads no such variable: unset it", "chatd help"}},
	} {
		err := checkVarNames([]string{"PATH=/bin", "CHAT_PARTITIONS=4", c.kv})
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one saying %q", c.kv, err, w)
			}
		}
	}
	// chatbroker's variable may be set beside chatd's on one host.
	if err := checkVarNames(append(envNames(), "CHAT_BROKER_NO_SYNC")); err != nil {
		t.Errorf("chatd's and chatbroker's own variables: %v", err)
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
