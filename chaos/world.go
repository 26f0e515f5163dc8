package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/groupchat/chatd/store"
)

// world is the run's users, groups and membership. Membership does not
// change during the run, so the truth of who must get what is fixed.
type world struct {
	users    []string
	gids     []string
	members  map[string][]string         // gid -> uids, sorted
	groupsOf map[string][]string         // uid -> gids, sorted
	joinPos  map[string]map[string]int64 // gid -> uid -> the position the member joined at
}

// newWorld makes users u00.. and groups g0.., each group of groupSize
// members, every user in at least one group.
func newWorld(rng *rand.Rand, users, groups, groupSize int) *world {
	w := &world{members: map[string][]string{}, groupsOf: map[string][]string{}, joinPos: map[string]map[string]int64{}}
	for i := range users {
		w.users = append(w.users, fmt.Sprintf("u%02d", i))
	}
	for g := range groups {
		gid := fmt.Sprintf("g%d", g)
		w.gids = append(w.gids, gid)
		set := map[string]bool{}
		// Round robin first, so that every user is somewhere; then random.
		for k := 0; len(set) < groupSize; k++ {
			if k < groupSize/2 {
				set[w.users[(g*(groupSize/2)+k)%users]] = true
			} else {
				set[w.users[rng.IntN(users)]] = true
			}
		}
		for u := range set {
			w.members[gid] = append(w.members[gid], u)
			w.groupsOf[u] = append(w.groupsOf[u], gid)
		}
		sort.Strings(w.members[gid])
	}
	for _, u := range w.users {
		sort.Strings(w.groupsOf[u])
	}
	return w
}

// create makes the groups through the admin API and waits until the member
// projector has applied them; it records where each member joined.
func (w *world) create(ctx context.Context, c *cluster) error {
	for _, gid := range w.gids {
		body := fmt.Sprintf(`{"gid":%q,"members":["%s"]}`, gid, strings.Join(w.members[gid], `","`))
		if err := httpCall(ctx, c.gateways, http.MethodPost, "/v1/admin/groups", adminToken, body, nil); err != nil {
			return fmt.Errorf("create group %s: %w", gid, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, gid := range w.gids {
		w.joinPos[gid] = map[string]int64{}
		for {
			ms, err := c.redis.Members(ctx, gid)
			if err == nil && len(ms) == len(w.members[gid]) {
				for uid, m := range ms {
					if m.State != store.MemberJoined {
						return fmt.Errorf("%s in %s: state %v after create", uid, gid, m.State)
					}
					w.joinPos[gid][uid] = m.JoinedAt
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("membership of %s not applied within 30 s (%v, %v)", gid, ms, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// recorder holds what the clients saw and did: their deliveries (per
// device, in the device's logs), the union of what each member received,
// sends and reads. Safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	received map[string]map[string]map[int64]bool // uid -> gid -> msgids any device of the member received
	sends    []sendRec
	reads    map[string]map[string]*readRec // gid -> uid
}

type sendRec struct {
	Gid    string    `json:"gid"`
	Uid    string    `json:"uid"`
	Device string    `json:"device"`
	Cmid   string    `json:"cmid"`
	At     time.Time `json:"at"`
	MsgID  int64     `json:"msgid"` // -1: not accepted (the outcome is unknown)
	Err    string    `json:"err,omitempty"`
}

// readRec is a member's read cursor as the clients made it: confirmed by
// the server, and the highest asked for (a request without an answer may
// have been applied).
type readRec struct {
	confirmed, attempted int64
}

func newRecorder(w *world) *recorder {
	r := &recorder{received: map[string]map[string]map[int64]bool{}, reads: map[string]map[string]*readRec{}}
	for _, u := range w.users {
		r.received[u] = map[string]map[int64]bool{}
		for _, g := range w.groupsOf[u] {
			r.received[u][g] = map[int64]bool{}
		}
	}
	for _, g := range w.gids {
		r.reads[g] = map[string]*readRec{}
		for _, u := range w.members[g] {
			r.reads[g][u] = &readRec{confirmed: -1, attempted: -1}
		}
	}
	return r
}

func (r *recorder) receive(uid, gid string, msgid int64) {
	r.mu.Lock()
	if m := r.received[uid][gid]; m != nil {
		m[msgid] = true
	}
	r.mu.Unlock()
}

func (r *recorder) hasReceived(uid, gid string, msgid int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.received[uid][gid][msgid]
}

func (r *recorder) sent(s sendRec) {
	r.mu.Lock()
	r.sends = append(r.sends, s)
	r.mu.Unlock()
}

func (r *recorder) allSends() []sendRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sends)
}

// readAttempt notes a read about to be sent; readDone its confirmation.
func (r *recorder) readAttempt(gid, uid string, upto int64) {
	r.mu.Lock()
	rr := r.reads[gid][uid]
	rr.attempted = max(rr.attempted, upto)
	r.mu.Unlock()
}

func (r *recorder) readDone(gid, uid string, upto int64) {
	r.mu.Lock()
	rr := r.reads[gid][uid]
	rr.confirmed = max(rr.confirmed, upto)
	r.mu.Unlock()
}

func (r *recorder) readOf(gid, uid string) readRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.reads[gid][uid]
}
