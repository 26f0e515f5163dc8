package consumers

import "github.com/groupchat/chatd/store"

// recipients returns every uid who sees some message of out, once.
func recipients(out []outgoing) []string {
	if len(out) == 0 {
		return nil
	}
	n := len(out[0].group)
	uids := make([]string, 0, n)
	if oneGroup(out) {
		// The members of a group are distinct: who is listed is kept by
		// place, not in a map of every member (a group of 10,000 made
		// one of 10,000 uids for each message, 5 of them online or 5,000).
		seen := make([]bool, n)
		for _, o := range out {
			for i, mo := range o.group {
				if !seen[i] && mo.m.Sees(o.msgid) {
					seen[i] = true
					uids = append(uids, mo.uid)
				}
			}
		}
		return uids
	}
	seen := make(map[string]bool, n)
	for _, o := range out {
		for _, mo := range o.group {
			if !seen[mo.uid] && mo.m.Sees(o.msgid) {
				seen[mo.uid] = true
				uids = append(uids, mo.uid)
			}
		}
	}
	return uids
}

// oneGroup reports whether the messages of out are of one group: they
// share its snapshot of memberships.
func oneGroup(out []outgoing) bool {
	g := out[0].group
	for _, o := range out[1:] {
		if len(o.group) != len(g) || len(g) > 0 && &o.group[0] != &g[0] {
			return false
		}
	}
	return true
}

// route groups the messages by node, in order: for each node one batch
// (more past maxPushPayload) whose items name the node's recipients. It
// returns the batches and the (message, online recipient) pairs.
func route(out []outgoing, nodes map[string][]string) ([]store.NodePushes, int64) {
	type nodeBatch struct {
		batch store.PushBatch
		last  int // index in out of the last item's message, -1 none
		size  int
	}
	byNode := map[string]*nodeBatch{}
	var done []store.NodePushes
	var pushes int64
	for i, o := range out {
		for _, mo := range o.group {
			ns := nodes[mo.uid]
			if len(ns) == 0 || !mo.m.Sees(o.msgid) {
				continue
			}
			pushes++
			for _, node := range ns {
				nb := byNode[node]
				if nb == nil {
					nb = &nodeBatch{last: -1}
					byNode[node] = nb
				}
				if nb.last != i {
					if nb.size > 0 && nb.size+len(o.json) > maxPushPayload {
						done = append(done, store.NodePushes{Node: node, Batch: nb.batch})
						nb.batch, nb.size = store.PushBatch{}, 0
					}
					nb.batch.Items = append(nb.batch.Items, store.PushItem{Msg: o.json})
					nb.last = i
					nb.size += len(o.json) + 8
				}
				it := &nb.batch.Items[len(nb.batch.Items)-1]
				it.Uids = append(it.Uids, mo.uid)
				nb.size += len(mo.uid) + 1
			}
		}
	}
	for node, nb := range byNode {
		done = append(done, store.NodePushes{Node: node, Batch: nb.batch})
	}
	return done, pushes
}
