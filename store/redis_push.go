package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// The push route: the fan-out publishes, for each gateway node, the pushes
// for the users online there as one PushBatch on the node's channel
// chat:push:<node>; the node subscribes to its channel. Pub/sub keeps
// nothing: a push published while a node is not subscribed is lost, which
// loses no message (the client notices the gap by prev, or syncs, and pulls).

// ErrBadPush is the error of DecodePushBatch, wrapped with detail.
var ErrBadPush = errors.New("store: bad push batch")

// PushItem is one message for some users of one node.
type PushItem struct {
	// Msg is the JSON of one protocol.Message, rendered once, which gateways
	// gather into push frames; or a whole server frame (it starts with
	// {"op":), such as a receipts update, delivered as is.
	Msg  []byte
	Uids []string // recipients on this node
}

// PushBatch is what one node gets from one batch of the fan-out, in msgid
// order per group.
type PushBatch struct {
	Items []PushItem
	// Lost marks, on a subscription, a payload that did not decode (from a
	// newer fan-out, say): its pushes are lost. Never published.
	Lost bool
}

// Limits that DecodePushBatch enforces.
const (
	MaxPushItems  = 1 << 20 // items in one batch
	MaxPushUids   = 1 << 20 // uids in one item
	MaxPushMsgLen = 8 << 20 // bytes of one item's JSON: a MaxBodyLen body escaped, with room to spare
)

const pushVersion = 1

// EncodePushBatch encodes b: a version byte, then uvarint item count and,
// per item, uvarint length and bytes of Msg, uvarint uid count and, per uid,
// uvarint length and bytes.
func EncodePushBatch(b PushBatch) []byte {
	n := 1 + uvarintLen(uint64(len(b.Items)))
	for _, it := range b.Items {
		n += uvarintLen(uint64(len(it.Msg))) + len(it.Msg) + uvarintLen(uint64(len(it.Uids)))
		for _, uid := range it.Uids {
			n += uvarintLen(uint64(len(uid))) + len(uid)
		}
	}
	p := make([]byte, 0, n)
	p = append(p, pushVersion)
	p = binary.AppendUvarint(p, uint64(len(b.Items)))
	for _, it := range b.Items {
		p = binary.AppendUvarint(p, uint64(len(it.Msg)))
		p = append(p, it.Msg...)
		p = binary.AppendUvarint(p, uint64(len(it.Uids)))
		for _, uid := range it.Uids {
			p = binary.AppendUvarint(p, uint64(len(uid)))
			p = append(p, uid...)
		}
	}
	return p
}

// DecodePushBatch decodes what EncodePushBatch made. It checks every count
// and length against the limits and the bytes left before allocating, and
// that each Msg is a JSON object and each uid 1 to schema.MaxIDLen bytes;
// it accepts only the canonical encoding (shortest uvarints, no trailing
// bytes), so decoding then encoding gives back p. The Msg slices share p's
// memory. Every error wraps ErrBadPush.
func DecodePushBatch(p []byte) (PushBatch, error) {
	if len(p) == 0 {
		return PushBatch{}, fmt.Errorf("%w: empty", ErrBadPush)
	}
	if p[0] != pushVersion {
		return PushBatch{}, fmt.Errorf("%w: version %d, want %d", ErrBadPush, p[0], pushVersion)
	}
	d := pushDecoder{p: p, off: 1}
	// An item takes at least 4 bytes ("{}" and two lengths), a uid 2.
	n := d.count("items", MaxPushItems, 4)
	var b PushBatch
	if n > 0 {
		b.Items = make([]PushItem, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		it := &b.Items[i]
		it.Msg = d.bytes("message", 2, MaxPushMsgLen)
		if d.err == nil && (it.Msg[0] != '{' || !json.Valid(it.Msg)) {
			d.fail("item %d: message is not a JSON object", i)
		}
		k := d.count("uids", MaxPushUids, 2)
		if k > 0 {
			it.Uids = make([]string, k)
		}
		for j := 0; j < k && d.err == nil; j++ {
			it.Uids[j] = string(d.bytes("uid", 1, schema.MaxIDLen))
		}
	}
	if d.err == nil && d.off != len(p) {
		d.fail("%d trailing bytes", len(p)-d.off)
	}
	if d.err != nil {
		return PushBatch{}, d.err
	}
	return b, nil
}

// pushDecoder reads p from off; after the first error every read returns
// zero values and err keeps that error.
type pushDecoder struct {
	p   []byte
	off int
	err error
}

func (d *pushDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrBadPush, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *pushDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p[d.off:])
	if n <= 0 {
		d.fail("%s: truncated or overlong uvarint", what)
		return 0
	}
	if n != uvarintLen(v) {
		d.fail("%s: uvarint not in its shortest form", what)
		return 0
	}
	d.off += n
	return v
}

// count reads a count of elements that take at least minLen bytes each.
func (d *pushDecoder) count(what string, limit, minLen int) int {
	v := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if v > uint64(limit) || v > uint64((len(d.p)-d.off)/minLen) {
		d.fail("%d %s: more than the limit (%d) or the bytes left allow", v, what, limit)
		return 0
	}
	return int(v)
}

// bytes reads a length in [lo, hi] and that many bytes.
func (d *pushDecoder) bytes(what string, lo, hi int) []byte {
	v := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if v < uint64(lo) || v > uint64(hi) || v > uint64(len(d.p)-d.off) {
		d.fail("%s of %d bytes: want %d to %d, and %d are left", what, v, lo, hi, len(d.p)-d.off)
		return nil
	}
	b := d.p[d.off : d.off+int(v) : d.off+int(v)]
	d.off += int(v)
	return b
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// NodePushes is a PushBatch addressed to one gateway node.
type NodePushes struct {
	Node  string
	Batch PushBatch
}

// PublishPushes publishes b on node's channel.
func (r *Redis) PublishPushes(ctx context.Context, node string, b PushBatch) error {
	_, err := r.PublishPushesAll(ctx, []NodePushes{{Node: node, Batch: b}})
	return err
}

// PublishPushesAll publishes every batch on its node's channel, in order,
// in one pipeline. It returns how many batches no subscriber heard (their
// node is down or between subscriptions).
func (r *Redis) PublishPushesAll(ctx context.Context, batches []NodePushes) (unheard int, err error) {
	for _, b := range batches {
		if err := schema.ValidID(b.Node); err != nil {
			return 0, fmt.Errorf("store: publish pushes: node: %w", err)
		}
	}
	if len(batches) == 0 {
		return 0, nil
	}
	pipe := r.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(batches))
	for i, b := range batches {
		cmds[i] = pipe.Publish(ctx, pushChannel(b.Node), EncodePushBatch(b.Batch))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("store: publish pushes: %w", err)
	}
	for _, c := range cmds {
		if c.Val() == 0 {
			unheard++
		}
	}
	return unheard, nil
}

// SubscribeConfig tunes a push subscription. The zero value is the default.
type SubscribeConfig struct {
	Buffer int          // batches decoded ahead of the reader; default 64
	Logger *slog.Logger // where undecodable payloads are reported; default slog.Default()
	Stats  *PushStats   // when set, counts what the subscription got
}

// PushStats counts what a push subscription got. Safe for concurrent use.
type PushStats struct {
	Batches      atomic.Int64 // decoded and handed on
	Bad          atomic.Int64 // undecodable payloads, dropped
	Resubscribed atomic.Int64 // breaks after which the subscription was re-established
}

// SubscribePushes is SubscribePushesWith with the default config.
func (r *Redis) SubscribePushes(ctx context.Context, node string) (<-chan PushBatch, error) {
	return r.SubscribePushesWith(ctx, node, SubscribeConfig{})
}

// SubscribePushesWith delivers the batches published for node, until ctx
// ends; then the channel closes. It returns once the subscription is in
// place (an error if Redis cannot be reached).
//
// An undecodable payload (garbage, or a fan-out of a newer version during
// an upgrade) is logged, counted and delivered as a batch marked Lost, for
// the node to tell its clients to sync. When the subscription broke
// (a Redis restart, a network error) and was re-established, an empty
// PushBatch is delivered: pushes published meanwhile are lost, and the
// node may tell its clients to sync.
//
// The reader should keep up: batches wait in the channel's buffer, then
// hold up the subscription; go-redis drops messages it cannot hand on for a
// minute, and Redis cuts a subscriber whose output buffer grows too far
// (which the subscription survives, as a break).
func (r *Redis) SubscribePushesWith(ctx context.Context, node string, cfg SubscribeConfig) (<-chan PushBatch, error) {
	if err := schema.ValidID(node); err != nil {
		return nil, fmt.Errorf("store: subscribe to pushes: node: %w", err)
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = subscribeBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stats == nil {
		cfg.Stats = new(PushStats)
	}
	sub, err := r.subscribe(ctx, pushChannel(node))
	if err != nil {
		return nil, fmt.Errorf("store: subscribe to pushes of %s: %w", node, err)
	}
	log := cfg.Logger.With("channel", pushChannel(node))
	out := make(chan PushBatch, cfg.Buffer)
	go func() {
		defer close(out)
		defer sub.close()
		for ev := range sub.events(ctx) {
			var b PushBatch
			if ev.resubscribed {
				cfg.Stats.Resubscribed.Add(1)
				log.Warn("push subscription re-established after a break; pushes may have been lost")
			} else {
				var err error
				if b, err = DecodePushBatch([]byte(ev.payload)); err != nil {
					n := cfg.Stats.Bad.Add(1)
					log.Warn("undecodable push payload dropped", "bytes", len(ev.payload), "dropped_so_far", n, "err", err)
					b = PushBatch{Lost: true}
				} else {
					cfg.Stats.Batches.Add(1)
				}
			}
			if !send(ctx, out, b) {
				return
			}
		}
	}()
	return out, nil
}

// subscribeBuffer is the default buffer of a subscription's channels.
const subscribeBuffer = 64

// subscription is one go-redis pub/sub subscription to one channel.
//
// go-redis reconnects and resubscribes by itself after a break: a read
// error (a Redis restart), or a health-check ping that fails (a dead
// network). Subscribe waits for the confirmation of the first
// subscription, so every confirmation the channel later yields marks such
// a break.
type subscription struct {
	ps *redis.PubSub
	ch <-chan any
}

// subEvent is a message's payload, or the news of a re-established
// subscription.
type subEvent struct {
	payload      string
	resubscribed bool
}

// subscribeTimeout bounds the wait for Redis to confirm a subscription
// (go-redis reads it with the ctx's deadline, not its cancellation).
const subscribeTimeout = 10 * time.Second

// subscribe subscribes to channel and returns once Redis confirmed it.
func (r *Redis) subscribe(ctx context.Context, channel string) (*subscription, error) {
	ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	ps := r.client.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	return &subscription{ps: ps, ch: ps.ChannelWithSubscriptions(
		redis.WithChannelSize(subscribeBuffer),
		redis.WithChannelHealthCheckInterval(3*time.Second),
	)}, nil
}

// events yields until ctx ends.
func (s *subscription) events(ctx context.Context) iter.Seq[subEvent] {
	return func(yield func(subEvent) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-s.ch:
				if !ok {
					return
				}
				var ev subEvent
				switch m := m.(type) {
				case *redis.Message:
					ev.payload = m.Payload
				case *redis.Subscription:
					if m.Kind != "subscribe" {
						continue
					}
					ev.resubscribed = true
				default:
					continue
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}

// close ends the subscription and lets go-redis's reader goroutine finish.
func (s *subscription) close() {
	_ = s.ps.Close()
	go func() {
		for range s.ch {
		}
	}()
}

// send hands v to out unless ctx ends first.
func send[T any](ctx context.Context, out chan<- T, v T) bool {
	select {
	case out <- v:
		return true
	case <-ctx.Done():
		return false
	}
}
