package store

import (
	"context"
	"testing"
	"time"
)

// FuzzHoldNode plants any holder, or none, on a node's lease and has any
// instance hold it. A lease of another instance is neither taken nor
// renewed, and that instance is named; a lease of none or of the instance
// itself becomes (stays) the instance's. held says whether a lease was
// there, whoever held it.
func FuzzHoldNode(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	const node = "gw-1"
	for _, c := range []struct {
		holder  string
		present bool
		inst    string
	}{
		{"", false, "i-1"},
		{"i-1", true, "i-1"},
		{"i-2", true, "i-1"},
		{"", true, "i-1"},
		{"", true, ""},
		{"x", false, ""},
		{"\x00\xff", true, "\x00"},
		{"1", true, "1.0"},
	} {
		f.Add(c.holder, c.present, c.inst)
	}
	f.Fuzz(func(t *testing.T, stored string, present bool, instance string) {
		m.FlushAll()
		if present {
			if err := m.Set(nodeKey(node), stored); err != nil {
				t.Fatal(err)
			}
		}
		holder, held, err := r.HoldNode(ctx, node, instance, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want := instance
		if present && stored != instance {
			want = stored
		}
		if holder != want || held != present {
			t.Fatalf("lease %q (there: %v) held by %q: %q, %v; want %q, %v", stored, present, instance, holder, held, want, present)
		}
		if got, err := m.Get(nodeKey(node)); err != nil || got != want {
			t.Fatalf("lease %q (there: %v) held by %q: the lease is now %q, %v; want %q", stored, present, instance, got, err, want)
		}
		if renewed := m.TTL(nodeKey(node)) > 0; renewed != (want == instance) {
			t.Fatalf("lease %q (there: %v) held by %q: renewed %v", stored, present, instance, renewed)
		}
	})
}
