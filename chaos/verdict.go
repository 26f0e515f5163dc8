package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// violation is one broken invariant: which message, which member, and the
// faults around it.
type violation struct {
	Kind   string    `json:"kind"`
	Gid    string    `json:"gid,omitempty"`
	MsgID  int64     `json:"msgid"`
	Uid    string    `json:"uid,omitempty"`
	Device string    `json:"device,omitempty"`
	At     time.Time `json:"at"` // when the message was sent, or when the violation was seen
	Detail string    `json:"detail"`
	Fault  string    `json:"fault"`
}

func (v violation) String() string {
	return fmt.Sprintf("%s: %s [%s]", v.Kind, v.Detail, v.Fault)
}

// chMessages is the history as ClickHouse holds it.
type chMessages struct {
	byGid  map[string][]int64       // distinct msgids, ascending
	info   map[string]map[int64]row // gid -> msgid -> the row
	byCmid map[string][]int64       // "gid/sender/cmid" -> distinct msgids
	rows   int64                    // physical rows, replays not yet merged included
}

type row struct {
	sender, cmid string
	sentAt       int64
	copies       uint64
}

// queryMessages reads every message from ClickHouse, one line per (gid,
// msgid) however many unmerged copies a replay left.
func queryMessages(ctx context.Context, c *cluster) (*chMessages, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{c.chSrv.Addr}, Auth: clickhouse.Auth{Database: "chat", Username: "default"}})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rows, err := conn.Query(ctx, "SELECT gid, msgid, any(sender), any(client_msg_id), any(sent_at_ms), count() FROM messages GROUP BY gid, msgid ORDER BY gid, msgid")
	if err != nil {
		return nil, fmt.Errorf("query messages: %w", err)
	}
	defer rows.Close()
	out := &chMessages{byGid: map[string][]int64{}, info: map[string]map[int64]row{}, byCmid: map[string][]int64{}}
	for rows.Next() {
		var gid, sender, cmid string
		var msgid, copies uint64
		var sent int64
		if err := rows.Scan(&gid, &msgid, &sender, &cmid, &sent, &copies); err != nil {
			return nil, err
		}
		id := int64(msgid)
		out.byGid[gid] = append(out.byGid[gid], id)
		if out.info[gid] == nil {
			out.info[gid] = map[int64]row{}
		}
		out.info[gid][id] = row{sender: sender, cmid: cmid, sentAt: sent, copies: copies}
		k := gid + "/" + sender + "/" + cmid
		out.byCmid[k] = append(out.byCmid[k], id)
		out.rows += int64(copies)
	}
	return out, rows.Err()
}

// readCursorsCH returns the read cursors of the analysts' table.
func readCursorsCH(ctx context.Context, c *cluster) (map[string]map[string]int64, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{c.chSrv.Addr}, Auth: clickhouse.Auth{Database: "chat", Username: "default"}})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rows, err := conn.Query(ctx, "SELECT gid, uid, max(upto) FROM read_cursors GROUP BY gid, uid")
	if err != nil {
		return nil, fmt.Errorf("query read_cursors: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]int64{}
	for rows.Next() {
		var gid, uid string
		var upto int64
		if err := rows.Scan(&gid, &uid, &upto); err != nil {
			return nil, err
		}
		if out[gid] == nil {
			out[gid] = map[string]int64{}
		}
		out[gid][uid] = upto
	}
	return out, rows.Err()
}

// verdict checks every invariant and fills the Result.
func (h *harness) verdict(ctx context.Context, truth *chMessages, heads map[string]int64, start time.Time) *Result {
	res := &Result{Seed: h.cfg.Seed, Started: start, Load: h.cfg.Duration, Faults: h.tl.counts(), Timeline: h.tl.all(), Dir: h.cfg.Dir}
	var vs []violation
	add := func(v violation) {
		if v.Fault == "" {
			v.Fault = h.tl.near(v.At)
		}
		vs = append(vs, v)
	}
	if truth == nil {
		truth = &chMessages{byGid: map[string][]int64{}, info: map[string]map[int64]row{}, byCmid: map[string][]int64{}}
	}
	res.ClickHouseRows, res.ClickHouseMessages = truth.rows, 0
	for _, ms := range truth.byGid {
		res.ClickHouseMessages += int64(len(ms))
	}

	// 1. Every accepted message is in ClickHouse exactly once.
	for _, s := range h.rec.allSends() {
		res.Sent++
		if s.MsgID < 0 {
			res.SendFailed++
			continue
		}
		res.Accepted++
		ids := truth.byCmid[s.Gid+"/"+s.Uid+"/"+s.Cmid]
		switch {
		case len(ids) == 0:
			res.Lost++
			add(violation{Kind: "lost", Gid: s.Gid, MsgID: s.MsgID, Uid: s.Uid, Device: s.Device, At: s.At,
				Detail: fmt.Sprintf("send %s of %s was accepted as msgid %d of %s and is not in ClickHouse", s.Cmid, s.Uid, s.MsgID, s.Gid)})
		case len(ids) > 1:
			add(violation{Kind: "clickhouse-duplicate", Gid: s.Gid, MsgID: s.MsgID, Uid: s.Uid, Device: s.Device, At: s.At,
				Detail: fmt.Sprintf("send %s of %s is in ClickHouse under %d msgids %v", s.Cmid, s.Uid, len(ids), ids)})
		case ids[0] != s.MsgID:
			res.Renumbered++
			if len(res.RenumberedExamples) < 10 {
				res.RenumberedExamples = append(res.RenumberedExamples, fmt.Sprintf("%s %s of %s: accepted as %d, stored as %d [%s]",
					s.Gid, s.Cmid, s.Uid, s.MsgID, ids[0], h.tl.near(s.At)))
			}
		}
	}
	for k, ids := range truth.byCmid {
		if len(ids) > 1 && !strings.HasSuffix(k, "/") {
			parts := strings.SplitN(k, "/", 3)
			if !slices.ContainsFunc(vs, func(v violation) bool {
				return v.Kind == "clickhouse-duplicate" && v.Gid == parts[0] && v.Uid == parts[1]
			}) {
				add(violation{Kind: "clickhouse-duplicate", Gid: parts[0], MsgID: ids[1], Uid: parts[1], At: time.UnixMilli(truth.info[parts[0]][ids[1]].sentAt),
					Detail: fmt.Sprintf("send %s of %s is in ClickHouse under msgids %v", parts[2], parts[1], ids)})
			}
		}
	}

	// 2. Every member has every message exactly once after dedup, in order.
	h.checkDeliveries(truth, res, add)

	// 3. Cursors.
	h.watch.mu.Lock()
	vs = append(vs, h.watch.found...)
	res.CursorPolls, res.CursorValues = h.watch.polls, h.watch.checked
	h.watch.mu.Unlock()
	finalAcks := h.watch.highest()
	for _, gid := range h.w.gids {
		for _, uid := range h.w.members[gid] {
			if head, join := heads[gid], h.w.joinPos[gid][uid]; head > join && finalAcks[gid][uid] < head {
				add(violation{Kind: "cursor-behind", Gid: gid, Uid: uid, MsgID: head, At: time.Now(),
					Detail: fmt.Sprintf("after every device of %s caught up and closed, its ack cursor in %s is %d, not the head %d", uid, gid, finalAcks[gid][uid], head)})
			}
		}
	}

	// 4. Read counts equal the truth from the clients' read logs.
	h.checkReads(ctx, truth, res, add)

	// 5. Poison records were dead-lettered by every consumer of their topic.
	h.checkPoison(ctx, res, add)

	res.Exits = h.c.unexpectedExits()
	h.refusedMu.Lock()
	res.Refused = h.refusedBy
	h.refusedMu.Unlock()
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At.Before(vs[j].At) })
	res.Violations = vs
	res.OK = len(vs) == 0
	return res
}

// checkDeliveries compares every member's deliveries (the union of its
// devices' logs) with the history, and every device's log with itself.
func (h *harness) checkDeliveries(truth *chMessages, res *Result, add func(violation)) {
	got := map[string]map[string]map[int64]bool{} // uid -> gid -> msgid
	single := map[string]bool{}                   // users with one device
	for _, d := range h.devices {
		_, seen := single[d.uid]
		single[d.uid] = !seen
	}
	for _, d := range h.devices {
		d.mu.Lock()
		log := slices.Clone(d.log)
		st := d.stats
		d.mu.Unlock()
		res.Delivered += int64(len(log))
		res.SDKDuplicates += st.Duplicates
		res.Gaps += st.Gaps
		res.Pulls += st.Pulls
		res.Resends += st.Resends
		if got[d.uid] == nil {
			got[d.uid] = map[string]map[int64]bool{}
		}
		type key struct {
			gid string
			inc int
		}
		lastInc := map[key]int64{}          // per incarnation: order, exactly once
		firstSeen := map[string]int64{}     // per device after dedup: order
		seen := map[string]map[int64]bool{} // per device
		for _, m := range log {
			k := key{m.Gid, m.Inc}
			bad := false
			if last, ok := lastInc[k]; ok && m.MsgID <= last {
				bad = true
				kind := "out-of-order"
				if m.MsgID == last || seen[m.Gid][m.MsgID] {
					kind = "duplicate-after-dedup"
				}
				add(violation{Kind: kind, Gid: m.Gid, MsgID: m.MsgID, Uid: d.uid, Device: d.name, At: time.UnixMilli(m.SentAt),
					Detail: fmt.Sprintf("%s (incarnation %d) was handed %d of %s after %d", d.name, m.Inc, m.MsgID, m.Gid, last)})
			}
			lastInc[k] = max(lastInc[k], m.MsgID)
			if seen[m.Gid] == nil {
				seen[m.Gid] = map[int64]bool{}
			}
			if seen[m.Gid][m.MsgID] {
				res.Redelivered++ // a later incarnation got it again: dropped by the app's dedup
				continue
			}
			seen[m.Gid][m.MsgID] = true
			// One device alone holds the member's cursor, so each of its
			// incarnations starts where the last one acked: after dedup its
			// log is in order. (A second device moves the shared cursor,
			// and a device may start past what it got itself.)
			if prev, ok := firstSeen[m.Gid]; ok && m.MsgID < prev && single[d.uid] && !bad {
				add(violation{Kind: "out-of-order", Gid: m.Gid, MsgID: m.MsgID, Uid: d.uid, Device: d.name, At: time.UnixMilli(m.SentAt),
					Detail: fmt.Sprintf("%s got %d of %s for the first time after %d (after dedup)", d.name, m.MsgID, m.Gid, prev)})
			}
			firstSeen[m.Gid] = max(firstSeen[m.Gid], m.MsgID)
			if got[d.uid][m.Gid] == nil {
				got[d.uid][m.Gid] = map[int64]bool{}
			}
			got[d.uid][m.Gid][m.MsgID] = true
		}
	}
	for _, gid := range h.w.gids {
		for _, uid := range h.w.members[gid] {
			join := h.w.joinPos[gid][uid]
			for _, id := range truth.byGid[gid] {
				if id <= join {
					continue
				}
				res.Expected++
				if got[uid][gid][id] {
					res.DeliveredUnique++
					continue
				}
				r := truth.info[gid][id]
				res.MemberMissing++
				add(violation{Kind: "member-missing", Gid: gid, MsgID: id, Uid: uid, At: time.UnixMilli(r.sentAt),
					Detail: fmt.Sprintf("%s never got %d of %s (send %s of %s) on any device", uid, id, gid, r.cmid, r.sender)})
			}
			for id := range got[uid][gid] {
				if _, ok := truth.info[gid][id]; !ok {
					res.Phantoms++
					if len(res.PhantomExamples) < 10 {
						res.PhantomExamples = append(res.PhantomExamples, fmt.Sprintf("%s got %d of %s, which ClickHouse does not hold", uid, id, gid))
					}
				}
			}
		}
	}
}

// checkReads compares the read counts the gateway answers, and the read
// cursors in ClickHouse, with the truth from the clients' read logs.
func (h *harness) checkReads(ctx context.Context, truth *chMessages, res *Result, add func(violation)) {
	for _, gid := range h.w.gids {
		for _, uid := range h.w.members[gid] {
			if r := h.rec.readOf(gid, uid); r.attempted > r.confirmed {
				add(violation{Kind: "read-unconfirmed", Gid: gid, Uid: uid, MsgID: r.attempted, At: time.Now(),
					Detail: fmt.Sprintf("%s's read of %s up to %d was never confirmed (confirmed %d); the truth is unknown", uid, gid, r.attempted, r.confirmed)})
			}
		}
	}
	for _, gid := range h.w.gids {
		ids := truth.byGid[gid]
		asker := h.w.members[gid][0]
		for i := 0; i < len(ids); i += protocol.MaxMsgIDs {
			chunk := ids[i:min(i+protocol.MaxMsgIDs, len(ids))]
			q := make([]string, len(chunk))
			for k, id := range chunk {
				q[k] = fmt.Sprint(id)
			}
			var ans protocol.Counts
			if err := httpCall(ctx, h.c.gateways, "GET", "/v1/groups/"+gid+"/read_counts?msgids="+strings.Join(q, ","), token(asker), "", &ans); err != nil {
				add(violation{Kind: "read-counts-unavailable", Gid: gid, MsgID: chunk[0], At: time.Now(), Detail: err.Error()})
				break
			}
			for _, rc := range ans.Counts {
				sender := truth.info[gid][rc.MsgID].sender
				wantRead, wantAud := 0, 0
				for _, uid := range h.w.members[gid] {
					if uid == sender || rc.MsgID <= h.w.joinPos[gid][uid] {
						continue
					}
					wantAud++
					if h.rec.readOf(gid, uid).confirmed >= rc.MsgID {
						wantRead++
					}
				}
				res.ReadCountsChecked++
				if rc.Read != wantRead || rc.Audience != wantAud {
					add(violation{Kind: "read-count", Gid: gid, MsgID: rc.MsgID, Uid: sender, At: time.UnixMilli(truth.info[gid][rc.MsgID].sentAt),
						Detail: fmt.Sprintf("read count of %d in %s is %d of %d, the clients' reads say %d of %d", rc.MsgID, gid, rc.Read, rc.Audience, wantRead, wantAud)})
				}
			}
		}
	}
	chReads, err := readCursorsCH(ctx, h.c)
	if err != nil {
		add(violation{Kind: "read-cursors-unavailable", At: time.Now(), Detail: err.Error()})
		return
	}
	for _, gid := range h.w.gids {
		for _, uid := range h.w.members[gid] {
			want := h.rec.readOf(gid, uid).confirmed
			got, ok := chReads[gid][uid]
			if want < 0 && !ok {
				continue
			}
			res.ReadsConfirmed++
			if got != want {
				add(violation{Kind: "read-cursor-clickhouse", Gid: gid, Uid: uid, MsgID: want, At: time.Now(),
					Detail: fmt.Sprintf("read_cursors in ClickHouse has %s in %s at %d (present %v), the clients' reads say %d", uid, gid, got, ok, want)})
			}
		}
	}
}

// consumersOf names the consumer groups that must dead-letter a poison
// record of each topic.
var consumersOf = map[string][]string{
	topics.Messages: {consumers.GroupPersister, consumers.GroupFanout},
	topics.Acks:     {consumers.GroupAckProjector},
	topics.Receipts: {consumers.GroupReceiptProjector, consumers.GroupReceiptNotifier},
	topics.Members:  {consumers.GroupMemberProjector},
}

// checkPoison reads chat.deadletter and finds every poison record there,
// once for each consumer of its topic.
func (h *harness) checkPoison(ctx context.Context, res *Result, add func(violation)) {
	h.poisonMu.Lock()
	poisoned := slices.Clone(h.poisoned)
	h.poisonMu.Unlock()
	res.Poisoned = len(poisoned)
	ends, err := h.c.endOffsets(ctx, topics.DeadLetter)
	if err != nil {
		add(violation{Kind: "deadletter-unreadable", At: time.Now(), Detail: err.Error()})
		return
	}
	found := map[string]bool{} // topic/partition/offset/consumer
	for p, end := range ends {
		if end == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{h.c.kafka}, Topic: topics.DeadLetter, Partition: p, MaxWait: 200 * time.Millisecond})
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for n := int64(0); n < end; n++ {
			m, err := r.ReadMessage(rctx)
			if err != nil {
				add(violation{Kind: "deadletter-unreadable", At: time.Now(), Detail: fmt.Sprintf("partition %d at %d of %d: %v", p, n, end, err)})
				break
			}
			hd := map[string]string{}
			for _, x := range m.Headers {
				hd[x.Key] = string(x.Value)
			}
			found[hd["source.topic"]+"/"+hd["source.partition"]+"/"+hd["source.offset"]+"/"+hd["consumer"]] = true
			res.DeadLetters++
		}
		cancel()
		r.Close()
	}
	for _, pr := range poisoned {
		for _, group := range consumersOf[pr.Topic] {
			if !found[fmt.Sprintf("%s/%d/%d/%s", pr.Topic, pr.Partition, pr.Offset, group)] {
				add(violation{Kind: "poison-not-dead-lettered", Gid: "", MsgID: pr.Offset, At: time.Now(),
					Detail: fmt.Sprintf("the poison record at %s partition %d offset %d is not in %s from %s", pr.Topic, pr.Partition, pr.Offset, topics.DeadLetter, group)})
			}
		}
	}
}
