package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// Partitions added to a chat.* topic behind the tooling's back move groups
// to other partitions: the membership read from the new partition is empty
// and a second join would move a member's start forward (the messages in
// between lost to them), and the head read there is another group's. The
// member commands refuse, saying why, rather than write there.
func TestMemberCommandsRefuseAChangedPartitionCount(t *testing.T) {
	e := newEnv(t, 2)
	gid := ""
	for i := 0; gid == ""; i++ {
		if g := fmt.Sprint("team", i); topics.Partition(g, 2) != topics.Partition(g, 3) {
			gid = g
		}
	}
	e.mustCtl("groups", "create", gid, "alice")
	grow := func(topic string) {
		t.Helper()
		c := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(e.brokers...)}
		res, err := c.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
			Topics: []kafka.TopicPartitionsConfig{{Name: topic, Count: 3}}})
		if err != nil || res.Errors[topic] != nil {
			t.Fatalf("add a partition to %s: %v %v", topic, err, res)
		}
		// Every chatctl command is a new process in real use; in process,
		// kafka-go's default transport keeps metadata for a few seconds.
		e.waitFor("the new partition count of "+topic, func() bool {
			md, err := c.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
			return err == nil && len(md.Topics) == 1 && len(md.Topics[0].Partitions) == 3
		})
	}
	refused := func(topic string, args ...string) {
		t.Helper()
		out, err := e.ctl(args...)
		if err == nil || !strings.Contains(err.Error(), topic+" has 3 partitions") || !strings.Contains(err.Error(), "CHAT_PARTITIONS") {
			t.Errorf("chatctl %s with 3 partitions of %s where there were 2: %v\n%s", strings.Join(args, " "), topic, err, out)
		}
	}
	// The position of a change is read from chat.messages.
	grow(topics.Messages)
	refused(topics.Messages, "members", "add", gid, "bob")
	grow(topics.Members)
	refused(topics.Members, "members", "add", gid, "alice")
	refused(topics.Members, "members", "remove", gid, "alice")
	refused(topics.Members, "groups", "show", gid)
	tail := e.mustCtl("tail", topics.Members)
	if n := strings.Count(tail, `"op":"join"`); n != 1 || strings.Contains(tail, `"op":"leave"`) {
		t.Fatalf("%s after the refusals: %d joins (want alice's one) and no leave:\n%s", topics.Members, n, tail)
	}
}

// A group has at most protocol.MaxMembers members, the most a who-read
// answer lists: the gateway refuses an add past it, and so does chatctl,
// which wrote any number of joins (a client then refused the group's
// who-read answers). Nothing is written when the add would pass it.
func TestMembersAddKeepsTheGroupsLimitOfMembers(t *testing.T) {
	e := newEnv(t, 1)
	const gid = "big"
	joins := make([]schema.Member, protocol.MaxMembers-1)
	for i := range joins {
		joins[i] = schema.Member{Gid: gid, Uid: fmt.Sprint("u", i), Op: schema.OpJoin, Pos: -1, At: 1}
	}
	if err := e.prod.SendMembers(context.Background(), joins...); err != nil {
		t.Fatal(err)
	}
	// One more fits; u0 is a member already and counts once.
	e.mustCtl("members", "add", gid, "last", "u0")
	for _, args := range [][]string{
		{"members", "add", gid, "over"},
		{"members", "add", gid, "u1", "over"},
		{"groups", "create", gid, "over", "over2"},
	} {
		out, err := e.ctl(args...)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("limit of %d", protocol.MaxMembers)) || !strings.Contains(err.Error(), "members remove") {
			t.Errorf("chatctl %s in a full group: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	tail := e.mustCtl("tail", topics.Members)
	if strings.Contains(tail, `"uid":"over`) {
		t.Fatalf("%s has a join past the limit", topics.Members)
	}
	// A member who left makes room.
	e.mustCtl("members", "remove", gid, "u5")
	e.mustCtl("members", "add", gid, "over")
}

// An add through chatctl counts the joins a gateway (or another chatctl)
// has reserved and not written or projected yet, and two chatctl adds at
// once count each other's: together they cannot pass the limit, where each
// counted only what chat.members held when it read it.
func TestMembersAddCountsJoinsBeingWrittenElsewhere(t *testing.T) {
	e := newEnv(t, 1)
	const gid = "big"
	joins := make([]schema.Member, protocol.MaxMembers-3)
	for i := range joins {
		joins[i] = schema.Member{Gid: gid, Uid: fmt.Sprint("u", i), Op: schema.OpJoin, Pos: -1, At: 1}
	}
	if err := e.prod.SendMembers(context.Background(), joins...); err != nil {
		t.Fatal(err)
	}
	// A gateway's add has reserved its place: two are left.
	if _, err := e.rds.ReserveJoins(context.Background(), gid, []string{"gw"}, protocol.MaxMembers, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if out, err := e.ctl("members", "add", gid, "gw"); err != nil || !strings.Contains(out, "being added") {
		t.Errorf("chatctl add of the member a gateway is adding: %v\n%s; want it left to the gateway", err, out)
	}
	errs := make(chan error, 3)
	for _, uid := range []string{"x", "y", "z"} {
		go func() { _, err := e.ctl("members", "add", gid, uid); errs <- err }()
	}
	var refused int
	for range 3 {
		if err := <-errs; err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("limit of %d", protocol.MaxMembers)) {
				t.Errorf("an add refused for another reason: %v", err)
			}
			refused++
		}
	}
	tail := e.mustCtl("tail", topics.Members)
	if n := strings.Count(tail, `"op":"join"`); refused != 1 || n != protocol.MaxMembers-1 {
		t.Fatalf("three chatctl adds at once for two places: %d refused, %d joins in %s; want 1 refused and %d joins (the gateway's not written yet)",
			refused, n, topics.Members, protocol.MaxMembers-1)
	}
	// A removal makes room; the joins chatctl wrote and reads back, their
	// places still reserved, count once.
	e.mustCtl("members", "remove", gid, "u0")
	e.mustCtl("members", "add", gid, "w")
}

// A member command run as ctl runs it, with the joins it reserves held
// for hold rather than joinHold.
func (e *env) ctlHold(hold time.Duration, name string, args ...string) (string, error) {
	var out bytes.Buffer
	c := newCommand(name, func(k string) string { return e.vars[k] }, &out, &out)
	c.joinHold = hold
	rest, err := c.parse(args)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = commands[name].run(ctx, c, nil, rest)
	return out.String(), err
}

// chatctl's add (here of a group's first member) holds the places it reserved for as long as its joins
// take to write (a broker slow to answer, a group created with thousands
// of members written one by one), renewing them: taken for the hold from
// the reservation, a place would be lost before its join is written, and
// another add could take it and pass the group's limit.
func TestMembersAddHoldsItsPlacesWhileItsJoinsAreWritten(t *testing.T) {
	const hold = 300 * time.Millisecond
	e := newEnv(t, 1)
	// The broker takes the next writes to chat.members in, and answers
	// none until released.
	free := testserver.HoldProduces(t, e.broker, topics.Members)
	done := make(chan error, 1)
	go func() {
		out, err := e.ctlHold(hold, "groups create", "g1", "bob")
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		done <- err
	}()
	ctx := context.Background()
	e.waitFor("bob's place reserved", func() bool {
		ok, _ := e.rds.Joining(ctx, "g1", "bob")
		return ok
	})
	time.Sleep(4 * hold) // the write of bob's join outlasts the hold: time must pass
	if ok, err := e.rds.Joining(ctx, "g1", "bob"); !ok || err != nil {
		t.Errorf("bob's join still being written after %v, its hold %v: Joining = %v, %v; want its place held", 4*hold, hold, ok, err)
	}
	free()
	if err := <-done; err != nil {
		t.Fatalf("chatctl groups create g1 bob: %v", err)
	}
	if ok, err := e.rds.Joining(ctx, "g1", "bob"); !ok || err != nil {
		t.Errorf("bob's join written: Joining = %v, %v; want its place held for the member projector", ok, err)
	}
}

// chatctl's removal, as a gateway's, writes a leaving first (the fan-out
// pushes the member nothing past it), refuses the member's new sends and
// waits for those in flight before it reads the group's head for the
// leave: the message of a send claimed before the removal lies at or
// before the leave.
func TestMembersRemoveWaitsForTheMembersSendsInFlight(t *testing.T) {
	e := newEnv(t, 1)
	const gid = "g"
	ctx := context.Background()
	join := schema.Member{Gid: gid, Uid: "alice", Op: schema.OpJoin, Pos: -1, At: 1}
	if err := e.prod.SendMembers(ctx, join); err != nil {
		t.Fatal(err)
	}
	if err := e.rds.ApplyMembers(ctx, []schema.Member{join}); err != nil { // as the member projector would
		t.Fatal(err)
	}
	// A gateway has claimed a send of alice's and is producing it.
	cl, err := e.rds.BeginSend(ctx, gid, "alice", "c1", time.Minute, nil)
	if err != nil || cl.State != store.SendClaimed {
		t.Fatalf("BeginSend = %+v, %v", cl, err)
	}
	removed := make(chan error, 1)
	go func() { _, err := e.ctl("members", "remove", gid, "alice"); removed <- err }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(e.mustCtl("tail", topics.Members), `"op":"leaving"`); {
		if time.Now().After(deadline) {
			t.Fatal("the removal wrote no leaving record in 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cl, err := e.rds.BeginSend(ctx, gid, "alice", "c2", time.Minute, nil); err != nil || cl.State != store.SendRemoving {
		t.Errorf("a send during the removal: %+v, %v; want refused", cl, err)
	}
	select {
	case err := <-removed:
		t.Fatalf("the removal finished while the member's send was in flight (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	msgid, err := e.prod.SendMessage(ctx, &schema.Message{Gid: gid, Sender: "alice", ClientMsgID: "c1", SentAt: 1, Body: []byte("last words")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rds.FinishSend(ctx, gid, "alice", "c1", cl.Attempt, msgid, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	tail := e.mustCtl("tail", topics.Members)
	if want := fmt.Sprintf(`"op":"leave","pos":%d`, msgid); !strings.Contains(tail, want) {
		t.Fatalf("%s after the removal:\n%s\nwant a leave at the message sent before it (%s)", topics.Members, tail, want)
	}
}

// An add to a group that never had a member is refused, naming the command
// that creates one, as a gateway answers it not_found: a typo in the gid
// made a group. A group whose members all left takes members again.
func TestMembersAddToAGroupNeverCreatedIsRefused(t *testing.T) {
	e := newEnv(t, 1)
	out, err := e.ctl("members", "add", "nosuch2", "zz")
	if err == nil || !strings.Contains(err.Error(), "group nosuch2 does not exist") || !strings.Contains(err.Error(), "chatctl groups create nosuch2 zz") {
		t.Errorf("members add to a group never created: %v\n%s; want it refused, naming chatctl groups create", err, out)
	}
	if tail := e.mustCtl("tail", topics.Members); tail != "" {
		t.Errorf("a refused add wrote to %s:\n%s", topics.Members, tail)
	}
	e.mustCtl("groups", "create", "gone", "alice")
	e.mustCtl("members", "remove", "gone", "alice")
	e.mustCtl("members", "add", "gone", "bob")
}

// A removal of users who are not members fails, naming them, as a
// gateway answers it not_found; those named who are members leave all
// the same, and a member named twice leaves once without failing.
func TestMembersRemoveOfNonMembersFails(t *testing.T) {
	e := newEnv(t, 1)
	e.mustCtl("groups", "create", "team", "alice", "bob")
	out, err := e.ctl("members", "remove", "team", "zed", "alice", "yan", "zed")
	if err == nil || err.Error() != "zed, yan: not members of team" {
		t.Errorf("members remove of two non-members and alice: %v, want the error \"zed, yan: not members of team\"\n%s", err, out)
	}
	if !strings.Contains(out, "alice: left team") {
		t.Errorf("members remove of two non-members and alice: alice did not leave:\n%s", out)
	}
	e.mustCtl("members", "remove", "team", "bob", "bob")
}

// groups show of a gid with no member event said only "group nosuch has
// no member events in chat.members", and of a gid that cannot be one ("a
// b", a space) the same, after reading the topic. It says the group does
// not exist, with the command that creates it; a malformed gid is refused
// as the other member commands refuse it.
func TestGroupsShowOfAGroupThatIsNotSaysWhatToDo(t *testing.T) {
	e := newEnv(t, 1)
	_, err := e.ctl("groups", "show", "nosuch")
	if want := "group nosuch does not exist (chat.members holds no member event of it): check the gid, or create it with `chatctl groups create nosuch UID...`"; err == nil || err.Error() != want {
		t.Errorf("groups show nosuch: %v; want %q", err, want)
	}
	_, err = e.ctl("groups", "show", "a b")
	if err == nil || !strings.Contains(err.Error(), `"a b": schema: invalid id`) || !strings.Contains(err.Error(), "use letters, digits and _.:@-") {
		t.Errorf(`groups show "a b": %v; want the gid refused as an id`, err)
	}
}
