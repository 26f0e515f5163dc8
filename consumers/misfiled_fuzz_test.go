package consumers

import (
	"bytes"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
)

// FuzzMisfiled holds the check of a record's key (outside bytes: any
// producer may write a chat.* topic) to its reference: a record belongs
// where it lies exactly when its key is the one chatd writes its event
// under (the gid for a message, gid/uid for the other events) and it lies
// in the partition Kafka's Java client picks for the gid alone (murmur2,
// kafka-go's Murmur2Balancer). Any key, event and partition count is
// answered without a panic. (Keys of a
// valid event hold no "/" but the one between gid and uid.)
func FuzzMisfiled(f *testing.F) {
	f.Add("g1", "alice", []byte("g1/alice"), uint8(0), uint8(4), uint8(0))
	f.Add("g1", "alice", []byte("g1"), uint8(3), uint8(4), uint8(1))
	f.Add("g1", "", []byte("g1/"), uint8(0), uint8(1), uint8(0))
	f.Add("g1", "x/y", []byte("g1/x/y"), uint8(2), uint8(8), uint8(2))
	f.Add("g", "u", []byte("/u"), uint8(0), uint8(1), uint8(3))
	f.Fuzz(func(t *testing.T, gid, uid string, key []byte, part, partitions, kind uint8) {
		// Only a decoded event reaches Misfiled: its ids are valid.
		if schema.ValidID(gid) != nil || kind%4 != 0 && schema.ValidID(uid) != nil {
			return
		}
		n := int(partitions)%64 + 1
		p := int(part) % (n + 1) // now and then a partition past the last
		want := []byte(gid)
		var err error
		switch kind % 4 {
		case 0:
			err = Misfiled(&schema.Message{Gid: gid, Sender: uid}, key, p, n)
		case 1:
			want = []byte(gid + "/" + uid)
			err = Misfiled(&schema.Ack{Gid: gid, Uid: uid}, key, p, n)
		case 2:
			want = []byte(gid + "/" + uid)
			err = Misfiled(&schema.Receipt{Gid: gid, Uid: uid}, key, p, n)
		case 3:
			want = []byte(gid + "/" + uid)
			err = Misfiled(&schema.Member{Gid: gid, Uid: uid}, key, p, n)
		}
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		keyGid := key
		if i := bytes.IndexByte(key, '/'); i >= 0 {
			keyGid = key[:i]
		}
		home := (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: keyGid}, parts...)
		if belongs := bytes.Equal(key, want) && p == home; belongs != (err == nil) {
			t.Fatalf("kind %d gid %q uid %q key %q in partition %d of %d (home %d): %v", kind%4, gid, uid, key, p, n, home, err)
		}
	})
}
