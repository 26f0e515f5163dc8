package store

import "strconv"

// The Redis key layout. Every key of one group carries the hash tag {gid},
// so all of a group's keys live in one slot and every multi-key command or
// script on them works on Redis Cluster. A user's index carries {u:uid}.
// Ids are schema.ValidID strings: no braces, no "/", so the layout below is
// unambiguous.
//
//	key                                    type    content
//	chat:{<gid>}:win                       ZSET    score msgid, member = 8-byte big-endian msgid ++ schema.AppendMessage;
//	                                               the recent window of the group's messages (unique per msgid)
//	chat:{<gid>}:floor                     STRING  highest msgid ever trimmed from win; absent: nothing trimmed,
//	                                               win holds the group's whole history
//	chat:{<gid>}:head                      STRING  highest msgid persisted; only rises
//	chat:{<gid>}:winsize                   ZSET    member "max", score the bytes of the largest member added to win
//	                                               since the record began; member "since", score -(msgid): one above
//	                                               the head when it began (see redis_window_size.go)
//	chat:{<gid>}:cmid:<sender>/<cmid>      STRING  "<msgid>:<sent_at_ms>[:<prev_msgid>]", expiring: the message
//	                                               that claimed this client_msg_id, and the claim it replaced
//	chat:{<gid>}:ack                       ZSET    member uid, score last_ack msgid (written with ZADD GT)
//	chat:{<gid>}:read                      ZSET    member uid, score last_read msgid (written with ZADD GT)
//	chat:{<gid>}:joining                   ZSET    member uid, score expiry (unix ms): a place reserved for a join
//	                                               of uid being written, until projected (ReserveJoins); the key
//	                                               expires with its last entry
//	chat:{<gid>}:leaving:<uid>             STRING  "<joinPos>:<leftPos>", expiring: a leave of uid was written (MarkLeaving)
//	chat:{<gid>}:leaves                    HASH    uid -> "<joinPos>:<expiry unix ms>": the same leaves, for the count of
//	                                               ReserveJoins; the key expires with its last entry; field #kept
//	                                               (no uid) -> the leaves the last walk of them kept (MarkLeaving)
//	chat:{<gid>}:members                   HASH    uid -> membership: "j:<joinPos>" or "l:<joinPos>:<leftPos>"
//	chat:{<gid>}:members-at                HASH    uid -> offset in chat.members of the member's last event applied
//	                                               (ApplyMembersAt): a replay skips what is at or below it
//	chat:{u:<uid>}:groups                  HASH    gid -> the same membership value: the user's groups; field #joined
//	                                               (no gid) -> how many of them the user is a member of now
//	                                               (redis_user_groups.go)
//	chat:{u:<uid>}:joining                 ZSET    member gid, score expiry (unix ms): a place among the user's groups
//	                                               reserved for a join being written (ReserveGroups), until
//	                                               projected; the key expires with its last entry
//	chat:{u:<uid>}:left                    HASH    gid -> "<joinPos>:<leftPos>:<until unix ms>": until when a sync lists
//	                                               the group left (0: no longer), noted by the syncs (NoteLeft)
//	chat:offsets:<consumer>                HASH    "<topic>/<partition>" -> next offset to read;
//	                                               "<topic>/<partition>/replayed" -> "1" (MarkReplayed);
//	                                               "<topic>/<partition>/origin" -> "<offset>:<sent_at_ms>" (SaveOrigin), or "next";
//	                                               "<topic>/<partition>/handled" -> "<end>:<skipFrom>:<skipTo>": what was handled before the position was set by hand (Handled)
//	chat:{u:<uid>}:nodes                   ZSET    member gateway node id, score expiry (unix ms): where the
//	                                               user is online (one entry per node, several devices)
//	chat:node:<node>                       STRING  the gateway instance that holds the node's name, expiring
//	                                               (a lease: one running gateway per name)
//	chat:history                           STRING  "clickhouse" once a role with ClickHouse has run: the
//	                                               window is trimmed, older history is in ClickHouse
//	chat:deployment                        STRING  the id of the deployment this Redis serves (package deployment):
//	                                               a role whose Kafka records another refuses to start
//
// Pub/sub channels (not keys: on a cluster PUBLISH reaches every node):
//
//	chat:push:<node>                       the pushes for one gateway node (EncodePushBatch)
//	chat:presence                          uids that came online, separated by " "; fan-outs evict
//	                                       their cached presence of them
//
// The claim key separates sender and client_msg_id with "/" rather than ":"
// because ":" is valid inside ids ("a:b"+"c" and "a"+"b:c" must differ).

func groupPrefix(gid string) string { return "chat:{" + gid + "}:" }

func windowKey(gid string) string  { return groupPrefix(gid) + "win" }
func floorKey(gid string) string   { return groupPrefix(gid) + "floor" }
func headKey(gid string) string    { return groupPrefix(gid) + "head" }
func sizeKey(gid string) string    { return groupPrefix(gid) + "winsize" }
func ackKey(gid string) string     { return groupPrefix(gid) + "ack" }
func readKey(gid string) string    { return groupPrefix(gid) + "read" }
func membersKey(gid string) string { return groupPrefix(gid) + "members" }

func memberOffsetsKey(gid string) string { return groupPrefix(gid) + "members-at" }

func claimKey(gid, sender, clientMsgID string) string {
	return groupPrefix(gid) + "cmid:" + sender + "/" + clientMsgID
}

func joiningKey(gid string) string { return groupPrefix(gid) + "joining" }

func leavingKey(gid, uid string) string { return groupPrefix(gid) + "leaving:" + uid }

func leavesKey(gid string) string { return groupPrefix(gid) + "leaves" }

func userGroupsKey(uid string) string { return "chat:{u:" + uid + "}:groups" }

func presenceKey(uid string) string { return "chat:{u:" + uid + "}:nodes" }

func nodeKey(node string) string { return "chat:node:" + node }

func pushChannel(node string) string { return "chat:push:" + node }

const presenceChannel = "chat:presence"

func offsetsKey(consumer string) string { return "chat:offsets:" + consumer }

func offsetField(topic string, partition int) string {
	return topic + "/" + strconv.Itoa(partition)
}

// replayedField is the field of a partition's replay mark (MarkReplayed),
// beside its position; Offsets skips it (its partition is no number).
func replayedField(topic string, partition int) string {
	return offsetField(topic, partition) + "/replayed"
}

// handledField is the field of the end of what a consumer had handled of a
// partition when its position was last set back (SaveOffsets, Handled).
func handledField(topic string, partition int) string {
	return offsetField(topic, partition) + "/handled"
}

// originField is the field of a partition's origin (SaveOrigin), beside
// its position.
func originField(topic string, partition int) string {
	return offsetField(topic, partition) + "/origin"
}
