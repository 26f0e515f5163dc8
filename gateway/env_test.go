package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

const (
	testSecret = "test-secret-test-secret-test-secret!"
	adminToken = "admin-token"
)

// env is a whole system in one test: kfake, a real redis-server, every
// consumer, and gateways on httptest servers.
type env struct {
	t        *testing.T
	broker   *broker.Broker
	prod     *producers.Producer
	redisSrv *testserver.Redis
	rc       redis.UniversalClient
	redis    *store.Redis
	hist     *history.History
	base     consumers.Base
	gws      []*gw
	fanout   func() // stops the fan-out
	notifier *consumers.ReceiptNotifier
	notified *consumers.Runner[schema.Receipt] // the notifier's runner, the latest started
	parts    map[string]consumerPart
}

type consumerPart struct {
	mk   func() (func(context.Context) error, error)
	stop func()
}

type gw struct {
	g      *Gateway
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan struct{}
}

type envOpts struct {
	gateways       int
	tune           func(*Config)
	notifyInterval time.Duration                 // the receipt notifier's; 0: its default
	redisOpts      func(*redis.UniversalOptions) // adjusts the Redis client's options, if set
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{t: t, parts: map[string]consumerPart{}}
	b := testserver.NewBroker(t)
	var err error
	e.broker = b
	ctx := context.Background()
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if e.prod, err = producers.New(producers.Config{Brokers: []string{b.Addr()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.prod.Close() })
	e.redisSrv = testserver.NewRedis(t)
	ropts := &redis.UniversalOptions{Addrs: []string{e.redisSrv.Addr}}
	if o.redisOpts != nil {
		o.redisOpts(ropts)
	}
	e.rc = redis.NewUniversalClient(ropts)
	t.Cleanup(func() { e.rc.Close() })
	if e.redis, err = store.NewRedis(e.rc, store.RedisConfig{WindowSize: -1}); err != nil {
		t.Fatal(err)
	}
	if e.hist, err = history.New(history.Config{Redis: e.redis}); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.base = consumers.Base{Brokers: []string{b.Addr()}, DeadLetter: e.prod, Logger: quiet, Tune: func(r *consumers.RunnerTuning) {
		r.MinBackoff, r.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
		r.SessionTimeout, r.RebalanceTimeout = 6*time.Second, 2*time.Second
	}}
	e.runConsumer("persister", func() (func(context.Context) error, error) {
		r, err := (&consumers.Persister{Redis: e.redis}).Runner(e.base)
		return runOf(r, err)
	})
	e.runConsumer("acks", func() (func(context.Context) error, error) {
		r, err := (&consumers.AckProjector{Redis: e.redis}).Runner(e.base)
		return runOf(r, err)
	})
	e.runConsumer("members", func() (func(context.Context) error, error) {
		r, err := (&consumers.MemberProjector{Redis: e.redis}).Runner(e.base)
		return runOf(r, err)
	})
	e.runConsumer("receipts", func() (func(context.Context) error, error) {
		r, err := (&consumers.ReceiptProjector{Redis: e.redis}).Runner(e.base)
		return runOf(r, err)
	})
	notifier := &consumers.ReceiptNotifier{Redis: e.redis, Logger: quiet, Interval: o.notifyInterval}
	e.notifier = notifier
	e.runConsumer("notifier", func() (func(context.Context) error, error) {
		r, err := notifier.Runner(e.base)
		e.notified = r
		return runOf(r, err)
	})
	e.runConsumer("notifier-pushes", func() (func(context.Context) error, error) { return notifier.Run, nil })
	e.startFanout()
	for part := range 4 { // as a deployment is ready (/readyz) only once they have
		e.waitReplayedPart(part)
	}
	for i := 0; i < max(o.gateways, 1); i++ {
		e.addGateway(i, o.tune)
	}
	return e
}

func runOf[E any](r *consumers.Runner[E], err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return r.Run, nil
}

// runConsumer runs a part until the test ends; it returns its stop.
func (e *env) runConsumer(name string, mk func() (func(context.Context) error, error)) func() {
	run, err := mk()
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	e.parts[name] = consumerPart{mk: mk, stop: stop}
	return stop
}

// restartAll stops every consumer, runs wipe, and starts them again: with
// Redis wiped, the projections replay their topics from the start.
func (e *env) restartAll(wipe func()) {
	for _, p := range e.parts {
		p.stop()
	}
	wipe()
	for name, p := range e.parts {
		e.runConsumer(name, p.mk)
	}
}

// startFanout starts the fan-out and waits until it holds its partitions:
// a fan-out with no saved position starts at the end of chat.messages, so
// a message sent before that is not pushed.
func (e *env) startFanout() {
	var runner *consumers.Runner[schema.Message]
	e.fanout = e.runConsumer("fanout", func() (func(context.Context) error, error) {
		r, err := (&consumers.Fanout{Redis: e.redis, Logger: e.base.Logger}).Runner(e.base)
		runner = r
		return runOf(r, err)
	})
	waitFor(e.t, "the fan-out to hold its partitions", 20*time.Second, runner.CaughtUp)
}

// waitNotifierJoined waits until the receipt notifier holds its
// partitions: it starts at the end of chat.receipts, so a receipt written
// before that is never notified.
func (e *env) waitNotifierJoined() {
	e.t.Helper()
	waitFor(e.t, "the receipt notifier to hold its partitions", 20*time.Second, e.notified.CaughtUp)
}

func (e *env) addGateway(i int, tune func(*Config)) *gw {
	cfg := Config{Redis: e.redis, Producer: e.prod, History: e.hist, Secret: []byte(testSecret),
		AdminToken: adminToken, DevTokens: true, Node: fmt.Sprintf("gw%d", i), Logger: e.base.Logger}
	if tune != nil {
		tune(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	x := &gw{g: g, srv: httptest.NewServer(g.Handler()), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	go func() { defer close(x.done); g.Run(ctx) }()
	e.t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		g.Shutdown(sctx)
		x.srv.Close()
		cancel()
		<-x.done
	})
	e.gws = append(e.gws, x)
	waitFor(e.t, fmt.Sprintf("gateway %d to get its pushes", i), 10*time.Second, g.Ready) // it refuses WebSockets until then
	return x
}

// online waits until the presence of uids on gateway gwi is written, so
// that the fan-out pushes them the messages it handles next. (A client
// that syncs needs no such wait: its sync's check covers the messages
// handled before.)
func (e *env) online(gwi int, uids ...string) {
	e.t.Helper()
	node := e.gws[gwi].g.Node()
	waitFor(e.t, fmt.Sprintf("%v registered on %s", uids, node), 10*time.Second, func() bool {
		nodes, err := e.redis.OnlineNodes(context.Background(), uids)
		if err != nil {
			return false
		}
		for _, uid := range uids {
			if !slices.Contains(nodes[uid], node) {
				return false
			}
		}
		return true
	})
}

func (e *env) token(uid string) string {
	tok, err := IssueToken([]byte(testSecret), uid, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// http calls the HTTP API of gateway 0 and decodes the JSON answer.
func (e *env) http(method, path, bearer string, body any) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	h := http.Header{}
	if bearer != "" {
		h.Set("Authorization", "Bearer "+bearer)
	}
	return e.httpRaw(method, path, h, rd)
}

// httpRaw sends a request to the first gateway with the headers and body
// given as they are, and returns its status and JSON answer.
func (e *env) httpRaw(method, path string, h http.Header, body io.Reader) (int, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.gws[0].srv.URL+path, body)
	maps.Copy(req.Header, h)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// group creates gid with members through the admin API and waits until the
// member projector has applied it.
func (e *env) group(gid string, members ...string) {
	e.t.Helper()
	e.waitReplayed(gid)
	if st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": gid, "members": members}); st != 200 {
		e.t.Fatalf("create group: %d %v", st, out)
	}
	e.waitMembers(gid, members...)
}

// waitReplayed waits until the member projector has replayed gid's
// partition of chat.members, as a deployment is ready (/readyz) only once
// its projections have: until then administration of gid is unavailable.
func (e *env) waitReplayed(gid string) {
	e.t.Helper()
	e.waitReplayedPart(topics.Partition(gid, 4))
}

// waitReplayedPart waits until the member projector has replayed partition
// part of chat.members.
func (e *env) waitReplayedPart(part int) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprint("memberships of partition ", part, " replayed"), 20*time.Second, func() bool {
		return e.redis.CheckReplayed(context.Background(), consumers.GroupMemberProjector, topics.Members, part) == nil
	})
}

// removeMember removes uid from gid through the admin API and waits until
// the member projector has the leave.
func (e *env) removeMember(gid, uid string) {
	e.t.Helper()
	if st, out := e.http("DELETE", "/v1/admin/groups/"+gid+"/members/"+uid, adminToken, nil); st != 200 {
		e.t.Fatalf("remove %s from %s: %d %v", uid, gid, st, out)
	}
	waitFor(e.t, uid+" left "+gid, 10*time.Second, func() bool {
		m, _ := e.redis.Membership(context.Background(), gid, uid, nil)
		return m.State == store.MemberLeft
	})
}

// waitProjected waits until consumer has saved, for gid's partition of
// topic, a position at that partition's end as it is now: every record
// written there so far has had its effect.
func (e *env) waitProjected(consumer, topic, gid string) {
	e.t.Helper()
	part := topics.Partition(gid, 4)
	end := e.listOffsets(map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(part)}}).Topics[topic][0].LastOffset
	waitFor(e.t, fmt.Sprint(consumer, " to pass offset ", end, " of ", topic, "/", part), 20*time.Second, func() bool {
		saved, err := e.redis.Offsets(context.Background(), consumer, topic)
		return err == nil && saved[part] >= end
	})
}

func (e *env) waitMembers(gid string, uids ...string) {
	e.t.Helper()
	waitFor(e.t, "membership of "+gid, 20*time.Second, func() bool {
		ms, err := e.redis.Members(context.Background(), gid)
		if err != nil {
			return false
		}
		for _, u := range uids {
			if ms[u].State != store.MemberJoined {
				return false
			}
		}
		return true
	})
}

// topicEnds sums the end offsets of the topics clients write to.
func (e *env) topicEnds() int64 {
	return e.topicEndsOf(topics.Messages, topics.Acks, topics.Receipts, topics.Members)
}

// topicEndsOf sums the end offsets of the named topics.
func (e *env) topicEndsOf(names ...string) int64 {
	e.t.Helper()
	req := map[string][]kafka.OffsetRequest{}
	for _, tp := range names {
		for p := 0; p < 4; p++ {
			req[tp] = append(req[tp], kafka.LastOffsetOf(p))
		}
	}
	resp := e.listOffsets(req)
	var sum int64
	for _, ps := range resp.Topics {
		for _, p := range ps {
			sum += p.LastOffset
		}
	}
	return sum
}

// listOffsets asks the test's broker for offsets over connections of its
// own, closed after: a pool of the shared transport would outlive the test
// and keep dialing a broker that is gone.
func (e *env) listOffsets(req map[string][]kafka.OffsetRequest) *kafka.ListOffsetsResponse {
	e.t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(e.broker.Addr()), Transport: tr}
	resp, err := client.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// lastMemberEvent is the newest record of uid in gid in chat.members.
func (e *env) lastMemberEvent(gid, uid string) schema.Member {
	e.t.Helper()
	part := topics.Partition(gid, 4)
	resp := e.listOffsets(map[string][]kafka.OffsetRequest{topics.Members: {kafka.LastOffsetOf(part)}})
	end := resp.Topics[topics.Members][0].LastOffset
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.broker.Addr()}, Topic: topics.Members, Partition: part,
		MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last schema.Member
	for off := int64(0); off < end; {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			e.t.Fatalf("reading %s/%d: %v", topics.Members, part, err)
		}
		off = m.Offset + 1
		if ev, err := schema.DecodeMember(m.Value); err == nil && ev.Gid == gid && ev.Uid == uid {
			last = ev
		}
	}
	return last
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// raw is a protocol-level WebSocket client for tests of the server's edges.
type raw struct {
	t  *testing.T
	ws *websocket.Conn
}

func (e *env) dial(gwi int, query string) *raw {
	e.t.Helper()
	url := "ws" + strings.TrimPrefix(e.gws[gwi].srv.URL, "http") + "/v1/ws" + query
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	ws.SetReadLimit(1 << 20)
	e.t.Cleanup(func() { ws.CloseNow() })
	return &raw{t: e.t, ws: ws}
}

// login dials with a token for uid and reads the authed frame.
// wipeMemberships stops the member projector and wipes Redis, then claims
// every partition of chat.members as the projector does when it notices
// the wipe: the memberships are being rebuilt until it runs again.
func (e *env) wipeMemberships() {
	e.t.Helper()
	e.parts["members"].stop()
	if err := e.rc.FlushAll(context.Background()).Err(); err != nil {
		e.t.Fatal(err)
	}
	for part := range 4 {
		if ok, err := e.redis.AdvanceOffset(context.Background(), consumers.GroupMemberProjector, topics.Members, part, -1, kafka.FirstOffset); !ok || err != nil {
			e.t.Fatalf("claiming partition %d: %v, %v", part, ok, err)
		}
	}
}

func (e *env) login(gwi int, uid string) *raw {
	r := e.dial(gwi, "?token="+e.token(uid))
	if f := r.read(); f["op"] != protocol.OpAuthed || f["uid"] != uid {
		e.t.Fatalf("login as %s: got %v", uid, f)
	}
	return r
}

func (r *raw) send(v any) {
	r.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		b, _ = json.Marshal(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.ws.Write(ctx, websocket.MessageText, b); err != nil {
		r.t.Fatal(err)
	}
}

// read returns the next frame, failing the test after 10 s.
func (r *raw) read() map[string]any {
	r.t.Helper()
	f, err := r.tryRead(10 * time.Second)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return f
}

// answer returns the next frame that is not a push (pushes of the user's
// groups may come first).
func (r *raw) answer() map[string]any {
	r.t.Helper()
	for {
		if f := r.read(); f["op"] != protocol.OpPush {
			return f
		}
	}
}

func (r *raw) tryRead(d time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, b, err := r.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("frame %q is not JSON: %w", b, err)
	}
	return f, nil
}

// call sends a request with an id and returns the answer with that id,
// skipping pushes.
func (r *raw) call(req map[string]any) map[string]any {
	r.t.Helper()
	id := fmt.Sprint(time.Now().UnixNano())
	req["id"] = id
	r.send(req)
	for {
		f := r.read()
		if f["id"] == id {
			return f
		}
	}
}
