package consumers

import (
	"fmt"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// Misfiled says why a record of a chat.* topic does not belong where it
// lies, or returns nil when it does. chatd writes an event under its own
// key (chat.messages: the gid; the other topics: gid/uid) to the
// partition of the key's gid; a record that is not, a producer outside
// chatd wrote, and read where it lies it would belong to another group
// (a message would take a msgid of another group's numbering) or another
// member. The runners send such a record to the dead-letter topic; every
// other reader of the topics (the fan-out's member table, chatctl's
// rebuild and backfill) skips it, so that all of them agree.
// partitions is the topic's partition count.
func Misfiled[E any](e *E, key []byte, part, partitions int) error {
	if !keyed(e, key) {
		return fmt.Errorf("its key %q is not the one its event is written under (chat.messages: the gid; the other chat.* topics: gid/uid): a producer outside chatd wrote it; its partition, and the msgid of a message, belong to another group", key)
	}
	return misplaced(key, part, partitions)
}

// misplaced says why a record keyed key does not belong in partition part
// of a chat.* topic of partitions partitions, or returns nil when it does:
// a group's records all go to the partition of its gid (murmur2 of the
// gid alone, for gid/uid keys too), which a producer with another
// partitioner (librdkafka's default, kcat's) misses.
func misplaced(key []byte, part, partitions int) error {
	want := topics.PartitionOfKey(key, partitions)
	if want == part {
		return nil
	}
	return fmt.Errorf("it lies in partition %d, but chatd places its key %q in partition %d of %d (murmur2 of the gid): a producer outside chatd wrote it with another partitioner; read here, a message would take a msgid of another group's numbering. Write such records to the partition this names (kcat: -p %d)",
		part, key, want, partitions, want)
}

// keyed reports whether key is the record key chatd writes e under
// (producers: schema.MessageKey, schema.MemberKey).
func keyed[E any](e *E, key []byte) bool {
	switch v := any(e).(type) {
	case *schema.Message:
		return schema.IsKeyOf(key, v.Gid, "")
	case *schema.Ack:
		return schema.IsKeyOf(key, v.Gid, v.Uid)
	case *schema.Receipt:
		return schema.IsKeyOf(key, v.Gid, v.Uid)
	case *schema.Member:
		return schema.IsKeyOf(key, v.Gid, v.Uid)
	}
	return true
}
