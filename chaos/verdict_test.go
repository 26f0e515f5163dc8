package chaos

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The delivery verdict catches a missing message, one out of order and one
// handed twice, and names the message, the member and the fault.
func TestVerdictNamesMessageMemberAndFault(t *testing.T) {
	base := time.Now().Add(-time.Minute)
	w := &world{
		users:    []string{"a", "b", "c", "d"},
		gids:     []string{"g"},
		members:  map[string][]string{"g": {"a", "b", "c", "d"}},
		groupsOf: map[string][]string{"a": {"g"}, "b": {"g"}, "c": {"g"}, "d": {"g"}},
		joinPos:  map[string]map[string]int64{"g": {"a": -1, "b": -1, "c": -1, "d": -1}},
	}
	h := &harness{w: w, tl: &timeline{}}
	h.tl.add(event{At: base.Add(time.Second), Kind: "kill-9", Target: "persister", Lasts: 2 * time.Second})
	truth := &chMessages{byGid: map[string][]int64{"g": {1, 2, 3}}, info: map[string]map[int64]row{"g": {
		1: {sender: "d", cmid: "c1", sentAt: base.UnixMilli()},
		2: {sender: "d", cmid: "c2", sentAt: base.Add(2 * time.Second).UnixMilli()},
		3: {sender: "d", cmid: "c3", sentAt: base.Add(4 * time.Second).UnixMilli()},
	}}}
	logOf := func(inc int, ids ...int64) []delivery {
		var out []delivery
		for _, id := range ids {
			out = append(out, delivery{Gid: "g", MsgID: id, SentAt: truth.info["g"][id].sentAt, Inc: inc})
		}
		return out
	}
	h.devices = []*device{
		{name: "a.0", uid: "a", log: logOf(1, 1, 3)},                            // never got 2
		{name: "b.0", uid: "b", log: logOf(1, 1, 3, 2)},                         // 2 after 3
		{name: "c.0", uid: "c", log: logOf(1, 1, 2, 2, 3)},                      // 2 twice in one Client
		{name: "d.0", uid: "d", log: append(logOf(1, 1, 2), logOf(2, 2, 3)...)}, // redelivered: fine
	}
	res := &Result{}
	var vs []violation
	h.checkDeliveries(truth, res, func(v violation) {
		if v.Fault == "" {
			v.Fault = h.tl.near(v.At)
		}
		vs = append(vs, v)
	})
	want := map[string]string{"member-missing": "a", "out-of-order": "b", "duplicate-after-dedup": "c"}
	if len(vs) != len(want) {
		t.Fatalf("violations %v, want one of each of %v", vs, want)
	}
	for _, v := range vs {
		if want[v.Kind] != v.Uid || v.Gid != "g" || v.MsgID != 2 {
			t.Errorf("violation %+v: want %s of member %s about message 2", v, v.Kind, want[v.Kind])
		}
		if !strings.Contains(v.Fault, "kill-9 persister") {
			t.Errorf("violation %s names fault %q, want the persister's kill", v.Kind, v.Fault)
		}
	}
	if res.MemberMissing != 1 || res.Redelivered != 2 || res.Expected != 12 || res.DeliveredUnique != 11 {
		t.Errorf("counts %+v", res)
	}
}

// Every fault kind is scheduled once per cycle, inside the load.
func TestScheduleHasEveryKindInsideTheLoad(t *testing.T) {
	for _, span := range []time.Duration{90 * time.Second, 15 * time.Minute} {
		plan := schedule(rand.New(rand.NewPCG(1, 2)), 10*time.Second, span)
		cycles := max(1, int((span-10*time.Second)/(100*time.Second)))
		n := map[string]int{}
		for _, f := range plan {
			n[f.kind]++
			if f.at < 10*time.Second || f.at >= span {
				t.Errorf("%s at %v, outside [10s, %v)", f.kind, f.at, span)
			}
		}
		for _, k := range faultKinds {
			if n[k] != cycles {
				t.Errorf("span %v: %s scheduled %d times, want %d", span, k, n[k], cycles)
			}
		}
	}
}
