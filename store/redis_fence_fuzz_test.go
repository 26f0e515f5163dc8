package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzOrigin feeds the reader of a partition's origin any stored value.
// "next" (a position set by hand) says so; an offset of 0 or more and a
// sent_at, joined by ":", read as their numbers, in a form written back
// as the same, and as the very bytes read when they were in it; anything
// else is refused with ErrCorruptValue, never taken as an origin. An
// origin SaveOrigin writes reads back as itself, but for a negative offset
// (no record has one), which reads as corrupt.
func FuzzOrigin(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	fence := Fence{Consumer: "chat.persister", Topic: "chat.messages", Partition: 3}
	for _, c := range []struct {
		value   string
		off, at int64
	}{
		{"120:1767225600000", 120, 1767225600000},
		{"0:-1", 0, -1},
		{"next", -1, 0},
		{"nexT", 9223372036854775807, -9223372036854775808},
		{"", 0, 0},
		{"5", 5, 0},
		{"5:", 5, 0},
		{":5", 5, 0},
		{"-1:5", 0, 0},
		{"-0:5", 0, 0},
		{"+5:+6", 0, 0},
		{"5:6:7", 0, 0},
		{"9223372036854775808:1", 0, 0},
	} {
		f.Add(c.value, c.off, c.at)
	}
	f.Fuzz(func(t *testing.T, value string, off, at int64) {
		m.FlushAll()
		if o, next, err := r.Origin(ctx, fence); o != nil || next || err != nil {
			t.Fatalf("Origin of a partition never saved = %+v, %v, %v; want none", o, next, err)
		}
		if err := r.SaveOffsets(ctx, fence.Consumer, fence.Topic, map[int]int64{fence.Partition: 40}); err != nil {
			t.Fatal(err)
		}
		if o, next, err := r.Origin(ctx, fence); o != nil || !next || err != nil {
			t.Fatalf("Origin after SaveOffsets = %+v, %v, %v; want next", o, next, err)
		}
		if err := r.SaveOrigin(ctx, fence, 40, Origin{Offset: off, SentAt: at}); err != nil {
			t.Fatal(err)
		}
		o, next, err := r.Origin(ctx, fence)
		switch {
		case off < 0:
			if !errors.Is(err, ErrCorruptValue) || o != nil || next {
				t.Fatalf("origin {%d %d} saved, read as %+v, %v, %v; want ErrCorruptValue", off, at, o, next, err)
			}
		case err != nil || next || o == nil || *o != (Origin{Offset: off, SentAt: at}):
			t.Fatalf("origin {%d %d} saved, read as %+v, %v, %v", off, at, o, next, err)
		}

		m.HSet(offsetsKey(fence.Consumer), originField(fence.Topic, fence.Partition), value)
		o, next, err = r.Origin(ctx, fence)
		if value == originNext {
			if o != nil || !next || err != nil {
				t.Fatalf("origin %q read as %+v, %v, %v; want next", value, o, next, err)
			}
			return
		}
		offS, atS, found := strings.Cut(value, ":")
		wantOff, okOff := decimal(offS)
		wantAt, okAt := decimal(atS)
		if !found || !okOff || !okAt || wantOff < 0 {
			if !errors.Is(err, ErrCorruptValue) || o != nil || next {
				t.Fatalf("origin %q read as %+v, %v, %v; want ErrCorruptValue", value, o, next, err)
			}
			return
		}
		if err != nil || next || o == nil || *o != (Origin{Offset: wantOff, SentAt: wantAt}) {
			t.Fatalf("origin %q read as %+v, %v, %v; want {%d %d}", value, o, next, err, wantOff, wantAt)
		}
		written := strconv.FormatInt(o.Offset, 10) + ":" + strconv.FormatInt(o.SentAt, 10)
		if err := r.SaveOrigin(ctx, fence, 40, *o); err != nil {
			t.Fatal(err)
		}
		if again, _, err := r.Origin(ctx, fence); err != nil || again == nil || *again != *o {
			t.Fatalf("origin %q read as %+v, written as %q, read back as %+v, %v", value, o, written, again, err)
		}
		canonical := offS == strconv.FormatInt(wantOff, 10) && atS == strconv.FormatInt(wantAt, 10)
		if canonical != (written == value) {
			t.Fatalf("origin %q read as %+v, written as %q", value, o, written)
		}
	})
}
