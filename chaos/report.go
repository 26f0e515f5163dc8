package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Result is what a run did and found.
type Result struct {
	OK       bool           `json:"ok"`
	Seed     uint64         `json:"seed"`
	Started  time.Time      `json:"started"`
	Load     time.Duration  `json:"load_ns"`
	Dir      string         `json:"dir"`
	Faults   map[string]int `json:"faults"` // by kind
	Timeline []event        `json:"timeline"`

	Sent       int64 `json:"sent"`        // send calls
	Accepted   int64 `json:"accepted"`    // answered with a msgid
	SendFailed int64 `json:"send_failed"` // gave up (outcome unknown to the client)

	Refused map[string]int `json:"refused,omitempty"` // sends refused for good, by error code

	ClickHouseMessages int64 `json:"clickhouse_messages"` // distinct (gid, msgid)
	ClickHouseRows     int64 `json:"clickhouse_rows"`     // physical rows, unmerged replays included

	Expected        int64 `json:"expected"`         // (member, message of its group) pairs
	DeliveredUnique int64 `json:"delivered_unique"` // of those, held by the member after dedup
	Delivered       int64 `json:"delivered"`        // OnMessage calls, every device and incarnation
	SDKDuplicates   int64 `json:"sdk_duplicates"`   // dropped by the SDK's dedup within a Client
	Redelivered     int64 `json:"redelivered"`      // handed again to a later incarnation (not acked before it died)
	Gaps            int64 `json:"gaps"`             // pushes whose prev did not match: pulled
	Pulls           int64 `json:"pulls"`
	Resends         int64 `json:"resends"`

	Lost          int64 `json:"lost"`           // accepted and not in ClickHouse
	MemberMissing int64 `json:"member_missing"` // (member, message) pairs never delivered

	Renumbered         int64    `json:"renumbered"` // accepted under one msgid, stored under another (same send)
	RenumberedExamples []string `json:"renumbered_examples,omitempty"`
	Phantoms           int64    `json:"phantoms"` // msgids delivered that ClickHouse does not hold
	PhantomExamples    []string `json:"phantom_examples,omitempty"`

	CursorPolls       int64 `json:"cursor_polls"`
	CursorValues      int64 `json:"cursor_values"`
	ReadsConfirmed    int64 `json:"read_cursors_checked"`
	ReadCountsChecked int64 `json:"read_counts_checked"`
	Poisoned          int   `json:"poisoned"`
	DeadLetters       int64 `json:"dead_letters"`

	Exits       []string    `json:"unexpected_exits,omitempty"`
	SetupErrors []string    `json:"setup_errors,omitempty"`
	Violations  []violation `json:"violations,omitempty"`
}

// DuplicatesBeforeDedup is every delivery a client dropped or would drop by
// msgid: the SDK's own, and redeliveries to a later incarnation.
func (r *Result) DuplicatesBeforeDedup() int64 { return r.SDKDuplicates + r.Redelivered }

// FaultSummary is "kill-9 ×7, redis-wipe ×1, ...", sorted by kind.
func (r *Result) FaultSummary() string {
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s ×%d", k, r.Faults[k])
	}
	return strings.Join(parts, ", ")
}

// TableRow is the run's line of RELIABILITY.md's table.
func (r *Result) TableRow() string {
	verdict := "pass"
	if !r.OK {
		verdict = fmt.Sprintf("FAIL (%d violations)", len(r.Violations)+len(r.SetupErrors))
	}
	return fmt.Sprintf("| %s | %v | %s | %d | %d | %d of %d | %d | %d | %d | %s |",
		r.Started.UTC().Format("2006-01-02 15:04"), r.Load, r.FaultSummary(), r.Sent, r.Accepted,
		r.DeliveredUnique, r.Expected, r.DuplicatesBeforeDedup(), r.Lost+r.MemberMissing, r.Renumbered, verdict)
}

// TableHeader goes above TableRow.
const TableHeader = "| run (UTC) | load | faults injected | sent | accepted | delivered (member × message, after dedup) | duplicates before dedup | lost | renumbered | verdict |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

// Report writes a readable account: the figures, then every violation
// with its message, member and fault.
func (r *Result) Report(w io.Writer) {
	fmt.Fprintf(w, "chaos run, seed %d, load %v, data in %s\n", r.Seed, r.Load, r.Dir)
	fmt.Fprintf(w, "faults: %s\n", r.FaultSummary())
	fmt.Fprintf(w, "sends %d, accepted %d, given up %d; ClickHouse %d messages (%d rows before merges)\n",
		r.Sent, r.Accepted, r.SendFailed, r.ClickHouseMessages, r.ClickHouseRows)
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "sends refused by the server: %v\n", r.Refused)
	}
	fmt.Fprintf(w, "deliveries %d; member×message %d of %d after dedup; duplicates before dedup %d (SDK %d, redelivered to a later incarnation %d); gaps %d, pulls %d, resends %d\n",
		r.Delivered, r.DeliveredUnique, r.Expected, r.DuplicatesBeforeDedup(), r.SDKDuplicates, r.Redelivered, r.Gaps, r.Pulls, r.Resends)
	fmt.Fprintf(w, "cursor polls %d (%d values checked); read counts checked %d, read cursors %d; poison records %d, dead letters %d\n",
		r.CursorPolls, r.CursorValues, r.ReadCountsChecked, r.ReadsConfirmed, r.Poisoned, r.DeadLetters)
	fmt.Fprintf(w, "lost %d, member-missing %d, renumbered %d, phantoms %d\n", r.Lost, r.MemberMissing, r.Renumbered, r.Phantoms)
	for _, e := range r.RenumberedExamples {
		fmt.Fprintf(w, "  renumbered: %s\n", e)
	}
	for _, e := range r.PhantomExamples {
		fmt.Fprintf(w, "  phantom: %s\n", e)
	}
	if len(r.Exits) > 0 {
		byProc := map[string]int{}
		for _, e := range r.Exits {
			name, _, _ := strings.Cut(e, ":")
			byProc[name]++
		}
		fmt.Fprintf(w, "processes that exited by themselves (restarted by their supervisor): %v; first: %s\n", byProc, r.Exits[0])
	}
	for _, e := range r.SetupErrors {
		fmt.Fprintf(w, "SETUP: %s\n", e)
	}
	const most = 40
	for i, v := range r.Violations {
		if i == most {
			fmt.Fprintf(w, "... and %d more violations (all in the JSON)\n", len(r.Violations)-most)
			break
		}
		fmt.Fprintf(w, "VIOLATION %s\n", v)
	}
	if r.OK {
		fmt.Fprintln(w, "verdict: every invariant held")
	} else {
		fmt.Fprintln(w, "verdict: FAILED")
	}
	fmt.Fprintln(w, TableHeader)
	fmt.Fprintln(w, r.TableRow())
}

// WriteJSON writes the whole result, timeline included, to path.
func (r *Result) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
