package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
)

type tailOpts struct {
	from      string
	n         int
	follow    bool
	partition int
}

func tailFlags(c *command) any {
	o := &tailOpts{}
	c.fs.StringVar(&o.from, "from", "beginning", "beginning, end (only new records; implies -follow) or an offset")
	c.fs.IntVar(&o.n, "n", 0, "stop after this many records (0: no limit)")
	c.fs.BoolVar(&o.follow, "follow", false, "keep printing new records until interrupted")
	c.fs.IntVar(&o.partition, "partition", -1, "only this partition (-1: all)")
	return o
}

// tail prints the records of a topic as JSON lines (see docs/operations.md
// for the format). Records of one partition come in offset order; the
// partitions interleave.
func tail(ctx context.Context, c *command, opts any, args []string) error {
	o := opts.(*tailOpts)
	if len(args) != 1 {
		return errors.New("usage: chatctl tail TOPIC [-from beginning|end|OFFSET] [-n N] [-follow] [-partition P]")
	}
	if o.n < 0 {
		return fmt.Errorf("-n %d: want how many records to print, 0 for no limit", o.n)
	}
	if o.partition < -1 {
		return fmt.Errorf("-partition %d: want a partition (0, 1, ...), or -1 for all", o.partition)
	}
	topic := args[0]
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	spans, _, err := a.spans(ctx, topic, nil)
	if err != nil {
		return err
	}
	follow := o.follow || o.from == "end"
	var picked []span
	for _, s := range spans {
		if o.partition >= 0 && s.part != o.partition {
			continue
		}
		switch o.from {
		case "beginning":
		case "end":
			s.from = s.to
		default:
			off, err := strconv.ParseInt(o.from, 10, 64)
			if err != nil || off < 0 {
				return fmt.Errorf("-from %q: want beginning, end or an offset >= 0", o.from)
			}
			s.from = min(max(off, s.from), s.to)
		}
		if follow {
			s.to = math.MaxInt64
		}
		picked = append(picked, s)
	}
	if len(picked) == 0 {
		return fmt.Errorf("-partition %d: %s has partitions 0 to %d; pick one of them, or leave -partition out for all", o.partition, topic, len(spans)-1)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &lineWriter{w: c.stdout, limit: o.n, done: cancel}
	err = scan(ctx, scanConfig{brokers: brokers, sec: c.s.kafkaSecurity, topic: topic, batch: 1000, parallel: len(picked), follow: follow}, picked,
		func(_ context.Context, _ int, msgs []kafka.Message) error {
			for i := range msgs {
				if !w.write(recordJSON(&msgs[i])) {
					return nil
				}
			}
			return nil
		})
	if w.full() || (follow && errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// lineWriter writes whole lines from several goroutines and stops after
// limit lines.
type lineWriter struct {
	mu    sync.Mutex
	w     io.Writer
	limit int
	n     int
	done  func()
}

func (l *lineWriter) write(line []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit > 0 && l.n >= l.limit {
		return false
	}
	l.w.Write(append(line, '\n'))
	l.n++
	if l.limit > 0 && l.n >= l.limit {
		l.done()
		return false
	}
	return true
}

func (l *lineWriter) full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit > 0 && l.n >= l.limit
}

// record is one line of chatctl tail.
type record struct {
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Time      string            `json:"time"` // the record's timestamp, RFC 3339 UTC
	Key       string            `json:"key"`
	Kind      string            `json:"kind,omitempty"` // message, ack, receipt, member
	Event     any               `json:"event,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Error     string            `json:"error,omitempty"` // the value does not decode
	Value     []byte            `json:"value,omitempty"` // base64, only with error
}

type messageJSON struct {
	Gid         string `json:"gid"`
	MsgID       int64  `json:"msgid"`
	Sender      string `json:"sender"`
	ClientMsgID string `json:"client_msg_id,omitempty"`
	SentAt      int64  `json:"sent_at"`
	Body        string `json:"body,omitempty"`
	BodyBase64  []byte `json:"body_base64,omitempty"` // a body that is not UTF-8
}

type cursorJSON struct {
	Gid  string `json:"gid"`
	Uid  string `json:"uid"`
	Upto int64  `json:"upto"`
	At   int64  `json:"at"`
}

type memberJSON struct {
	Gid string `json:"gid"`
	Uid string `json:"uid"`
	Op  string `json:"op"`
	Pos int64  `json:"pos"`
	At  int64  `json:"at"`
	By  string `json:"by,omitempty"`
	// Joined is the join a leave ends, when the leave names it.
	Joined *int64 `json:"joined,omitempty"`
}

func recordJSON(m *kafka.Message) []byte {
	r := record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time.UTC().Format(time.RFC3339Nano), Key: string(m.Key)}
	if len(m.Headers) > 0 {
		r.Headers = map[string]string{}
		for _, h := range m.Headers {
			r.Headers[h.Key] = string(h.Value)
		}
	}
	kind, ev, err := decodeValue(m.Value, m.Offset)
	if err != nil {
		r.Error, r.Value = err.Error(), m.Value
	} else {
		r.Kind, r.Event = kind.String(), ev
	}
	b, _ := json.Marshal(r)
	return b
}

// decodeValue decodes a record value of any kind (byte 1 of the value).
// offset is the msgid of a message.
func decodeValue(v []byte, offset int64) (schema.Kind, any, error) {
	if len(v) < 2 {
		return 0, nil, fmt.Errorf("%w: %d bytes, too short", schema.ErrMalformed, len(v))
	}
	switch k := schema.Kind(v[1]); k {
	case schema.KindMessage:
		e, err := schema.DecodeMessage(v)
		if err != nil {
			return k, nil, err
		}
		mj := messageJSON{Gid: e.Gid, MsgID: offset, Sender: e.Sender, ClientMsgID: e.ClientMsgID, SentAt: e.SentAt}
		if utf8.Valid(e.Body) {
			mj.Body = string(e.Body)
		} else {
			mj.BodyBase64 = e.Body
		}
		return k, mj, nil
	case schema.KindAck:
		e, err := schema.DecodeAck(v)
		return k, cursorJSON{e.Gid, e.Uid, e.Upto, e.At}, err
	case schema.KindReceipt:
		e, err := schema.DecodeReceipt(v)
		return k, cursorJSON{e.Gid, e.Uid, e.Upto, e.At}, err
	case schema.KindMember:
		e, err := schema.DecodeMember(v)
		mj := memberJSON{Gid: e.Gid, Uid: e.Uid, Op: e.Op.String(), Pos: e.Pos, At: e.At, By: e.By}
		if e.HasJoined {
			mj.Joined = &e.Joined
		}
		return k, mj, err
	default:
		return k, nil, fmt.Errorf("%w: %v", schema.ErrWrongKind, k)
	}
}
