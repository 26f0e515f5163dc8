package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one entry of the run's timeline: a fault (Kind set) or a note.
type event struct {
	At     time.Time     `json:"at"`
	Kind   string        `json:"kind,omitempty"` // the fault kind; empty for notes
	Target string        `json:"target,omitempty"`
	Detail string        `json:"detail,omitempty"`
	Lasts  time.Duration `json:"lasts,omitempty"` // how long the fault was in force (outages, restarts)
}

func (e event) String() string {
	s := e.At.Format("15:04:05.000") + " "
	if e.Kind != "" {
		s += e.Kind
		if e.Target != "" {
			s += " " + e.Target
		}
		if e.Lasts > 0 {
			s += fmt.Sprintf(" for %v", e.Lasts.Round(time.Millisecond))
		}
		if e.Detail != "" {
			s += ": " + e.Detail
		}
		return s
	}
	return s + e.Detail
}

// timeline records faults and notes in order; safe for concurrent use.
type timeline struct {
	mu     sync.Mutex
	events []event
	out    io.Writer // progress goes here too; nil: nowhere
}

func (t *timeline) add(e event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	t.mu.Lock()
	t.events = append(t.events, e)
	t.mu.Unlock()
	if t.out != nil {
		fmt.Fprintln(t.out, "chaos:", e)
	}
}

func (t *timeline) note(s string) { t.add(event{Detail: s}) }

func (t *timeline) fault(kind, target, detail string, lasts time.Duration) {
	t.add(event{Kind: kind, Target: target, Detail: detail, Lasts: lasts})
}

// all returns every event so far.
func (t *timeline) all() []event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]event(nil), t.events...)
}

// faults returns the fault events, in order.
func (t *timeline) faults() []event {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []event
	for _, e := range t.events {
		if e.Kind != "" {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// near describes the faults around instant at: those in force then, and the
// last one that began before it. It is how a verdict names "which fault".
func (t *timeline) near(at time.Time) string {
	var active []string
	var last *event
	fs := t.faults()
	for i := range fs {
		f := fs[i]
		if f.At.After(at) {
			break
		}
		last = &fs[i]
		if f.Lasts > 0 && at.Before(f.At.Add(f.Lasts)) {
			active = append(active, f.String())
		}
	}
	switch {
	case len(active) > 0:
		return "in force: " + strings.Join(active, "; ")
	case last != nil:
		return fmt.Sprintf("last fault before it (%v earlier): %s", at.Sub(last.At).Round(time.Millisecond), last)
	}
	return "no fault before it"
}

// counts returns how many faults of each kind were injected.
func (t *timeline) counts() map[string]int {
	out := map[string]int{}
	for _, f := range t.faults() {
		out[f.Kind]++
	}
	return out
}
