package main

import (
	"fmt"
	"slices"
	"strings"
)

// otherVars are CHAT_* variables that chatd does not read but another
// command of the project does, which a host or a deployment may set for
// every process: chatbroker's.
var otherVars = []string{"CHAT_BROKER_NO_SYNC"}

// checkVarNames refuses a CHAT_* variable of environ ("NAME=value") that
// chatd does not read but is close to one it does, naming that one: a
// typo (CHAT_CLICKHOUSE_ADDR for CHAT_CLICKHOUSE_ADDRS) was ignored
// without a word, and chatd ran on the default, without ClickHouse or on
// another port. One that is close to none is warned of only: it may be a
// setting of a newer release, set for every role before each is
// upgraded, which must not stop the roles not upgraded yet.
func checkVarNames(environ []string) (warnings []string, err error) {
	known := append(envNames(), otherVars...)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "CHAT_") || slices.Contains(known, name) {
			continue
		}
		if near := nearest(name, known); near != "" {
			return nil, fmt.Errorf("%s is set, but chatd reads no such variable: did you mean %s? Rename it (chatd help lists the variables)", name, near)
		}
		warnings = append(warnings, fmt.Sprintf("%s is set, but this chatd reads no such variable (one of a newer release?); it is ignored: unset it if it is not meant for a newer chatd (chatd help lists the variables)", name))
	}
	return warnings, nil
}

// nearest is the name of names closest to name, when at most two edits
// away: chatd's own names lie three apart (CHAT_KAFKA_CA_FILE and
// CHAT_KAFKA_KEY_FILE), so a new setting of a newer release may too.
func nearest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
