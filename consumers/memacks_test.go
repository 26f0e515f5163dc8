package consumers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/groupchat/chatd/schema"
)

// memAcks is a Handler and OffsetStore in memory, with fault injection.
type memAcks struct {
	mu       sync.Mutex
	cursors  map[string]int64
	seen     map[int64]int // offset of chat.acks partition 0 (tests use one partition) -> times handled
	offsets  map[int]int64
	failNext int // Handle fails this many more times
	calls    int
	// wipeAfter wipes the state and the offsets right after this many
	// more successful batches (0: never), as Redis restarting empty would.
	wipeAfter int
	// marks[part] is what the partition had handled when it was marked
	// replayed (ReplayMarker), once a mark; a wipe takes the marks too.
	marks map[int][]int
	// server is the Fingerprint; a restart from a snapshot changes it.
	server   string
	restarts int
	// offsetReads counts the calls of Offsets: the runner's reads of the
	// saved positions at an assignment or replay, and its state checks.
	offsetReads int
}

func newMemAcks() *memAcks {
	return &memAcks{cursors: map[string]int64{}, seen: map[int64]int{}, offsets: map[int]int64{}, marks: map[int][]int{}, server: "mem-0"}
}

func (m *memAcks) Fingerprint(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.server, nil
}

// rdbSave copies the state, the positions and the marks, as an RDB snapshot
// does. The restart it returns brings them back under a new fingerprint,
// as Redis restarted from that snapshot does: what was handled and saved
// since is gone.
func (m *memAcks) rdbSave() (restart func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cursors, seen, offsets, marks := maps.Clone(m.cursors), maps.Clone(m.seen), maps.Clone(m.offsets), maps.Clone(m.marks)
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.cursors, m.seen, m.offsets, m.marks = maps.Clone(cursors), maps.Clone(seen), maps.Clone(offsets), maps.Clone(marks)
		m.restarts++
		m.server = fmt.Sprintf("mem-%d", m.restarts)
	}
}

func (m *memAcks) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.failNext > 0 {
		m.failNext--
		return errors.New("store down")
	}
	for _, r := range recs {
		k := r.Event.Gid + "/" + r.Event.Uid
		m.cursors[k] = max(m.cursors[k], r.Event.Upto)
		m.seen[int64(part)<<40|r.Offset]++
	}
	if m.wipeAfter > 0 {
		if m.wipeAfter--; m.wipeAfter == 0 {
			m.cursors, m.seen, m.offsets, m.marks = map[string]int64{}, map[int64]int{}, map[int]int64{}, map[int][]int{}
		}
	}
	return nil
}

func (m *memAcks) MarkReplayed(ctx context.Context, consumer, topic string, part int) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.offsets[part]; !ok {
		return false, nil
	}
	m.marks[part] = append(m.marks[part], m.handledIn(part))
	return true, nil
}

// handledIn counts the records of part handled; m.mu held.
func (m *memAcks) handledIn(part int) int {
	n := 0
	for k := range m.seen {
		if int(k>>40) == part {
			n++
		}
	}
	return n
}

// marked returns what each partition had handled when marked replayed.
func (m *memAcks) marked() map[int][]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.marks)
}

func (m *memAcks) Offsets(ctx context.Context, consumer, topic string) (map[int]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offsetReads++
	out := map[int]int64{}
	for p, o := range m.offsets {
		out[p] = o
	}
	return out, nil
}

func (m *memAcks) AdvanceOffset(ctx context.Context, consumer, topic string, part int, from, to int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.offsets[part]; ok && cur != from || !ok && from != -1 {
		return false, nil
	}
	m.offsets[part] = to
	return true, nil
}

func (m *memAcks) handled() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func (m *memAcks) savedTotal() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var total int64
	for _, o := range m.offsets {
		total += o
	}
	return total
}

// wipe forgets the state and the saved offsets, as a Redis restarted
// without persistence does under a running consumer.
func (m *memAcks) wipe() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursors, m.seen, m.offsets, m.marks = map[string]int64{}, map[int64]int{}, map[int]int64{}, map[int][]int{}
}

func (m *memAcks) snapshot() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.cursors)
}
