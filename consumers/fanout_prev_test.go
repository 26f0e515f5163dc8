package consumers

import (
	"fmt"
	"testing"
)

// TestPrevTableForgetsTheQuietestGroupsAndSaysSinceWhen: past twice its
// size the table keeps the groups whose last message is newest, and a
// group it does not know had nothing since the offset it reports.
func TestPrevTableForgetsTheQuietestGroupsAndSaysSinceWhen(t *testing.T) {
	tab := newPrevTable(3)
	tab.begin(100)
	if got := tab.unseenSince(); got != 100 {
		t.Fatalf("unseenSince at the start = %d, want 100 (the first record read)", got)
	}
	// Groups g0..g6, one message each at offsets 100..106.
	for i := range 7 {
		tab.begin(int64(100 + i))
		tab.commit(map[string]int64{fmt.Sprint("g", i): int64(100 + i)}, int64(100+i))
	}
	for i := range 7 {
		id, ok := tab.lookup(fmt.Sprint("g", i))
		if want := i >= 4; ok != want || ok && id != int64(100+i) {
			t.Errorf("g%d: %d, %v; want known: %v (the three newest of seven)", i, id, ok, want)
		}
	}
	// g0..g3 were forgotten with their last messages at 100..103.
	if got := tab.unseenSince(); got != 104 {
		t.Errorf("unseenSince after forgetting g0..g3 = %d, want 104", got)
	}
	// A group met again after it was forgotten is known again.
	tab.begin(107)
	tab.commit(map[string]int64{"g0": 107}, 107)
	if id, ok := tab.lookup("g0"); !ok || id != 107 {
		t.Errorf("g0 after its new message: %d, %v", id, ok)
	}
	// Skipped records: nothing before the next batch was seen.
	tab.begin(200)
	if got := tab.unseenSince(); got != 200 {
		t.Errorf("unseenSince after a jump to 200 = %d, want 200", got)
	}
	// A batch that follows on does not move it.
	tab.commit(map[string]int64{"g9": 200}, 201)
	tab.begin(202)
	if got := tab.unseenSince(); got != 200 {
		t.Errorf("unseenSince after a contiguous batch = %d, want 200", got)
	}
}
