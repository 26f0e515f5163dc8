package consumers

import "slices"

// DefaultPrevGroups is how many groups' last msgid a fan-out partition
// keeps (see prevTable); Fanout.PrevGroups changes it.
const DefaultPrevGroups = 50_000

// prevTable is what one partition's fan-out knows of its groups' last
// msgids in the assignment: the groups it met since it began reading at
// seenFrom, the newest keep of them at least. When it holds twice keep,
// it forgets the groups that went quiet longest; the offset they all lie
// below is evictedBelow. So a group it does not know had no record in
// [max(seenFrom, evictedBelow), now): what the persister stored before
// that offset is all there is of it (store.PersistedPrevs).
type prevTable struct {
	keep         int
	last         map[string]int64
	seenFrom     int64 // the first record read since the assignment began, or since records were skipped
	next         int64 // the offset after the last record handled; -1 before the first
	evictedBelow int64 // every forgotten group's last msgid is below it
}

// newPrevTable keeps at least keep groups, DefaultPrevGroups when keep is 0.
func newPrevTable(keep int) *prevTable {
	if keep <= 0 {
		keep = DefaultPrevGroups
	}
	return &prevTable{keep: keep, last: map[string]int64{}, next: -1}
}

// begin is called with a batch's first offset before it is handled.
func (t *prevTable) begin(first int64) {
	if first != t.next {
		// The assignment's first batch, or records skipped: only what
		// comes from here on has been seen.
		t.seenFrom = first
	}
}

// lookup returns gid's last msgid, if the table knows it.
func (t *prevTable) lookup(gid string) (int64, bool) {
	id, ok := t.last[gid]
	return id, ok
}

// unseenSince is the offset since which a group the table does not know
// had no record.
func (t *prevTable) unseenSince() int64 { return max(t.seenFrom, t.evictedBelow) }

// commit records a handled batch: the groups' last msgids and the offset
// of its last record.
func (t *prevTable) commit(last map[string]int64, lastOffset int64) {
	for gid, id := range last {
		t.last[gid] = id
	}
	t.next = lastOffset + 1
	if len(t.last) > 2*t.keep {
		t.evict()
	}
}

// evict forgets every group but the keep whose last msgid is newest.
func (t *prevTable) evict() {
	ids := make([]int64, 0, len(t.last))
	for _, id := range t.last {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	cut := ids[len(ids)-t.keep]
	for gid, id := range t.last {
		if id < cut {
			delete(t.last, gid)
		}
	}
	t.evictedBelow = max(t.evictedBelow, cut)
}
