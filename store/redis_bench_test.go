package store

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// The benchmarks below shape their batches like the persister's and the ack
// projector's during a replay of 16 partitions: a batch of 10,000 records of
// one partition covers 1/16 of the groups. Each also reports the CPU time
// redis-server spent per record (from INFO cpu), since on a shared machine
// that is what the server takes from everything else.

// redisCPU returns redis-server's user+sys CPU time so far.
func redisCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	b.Helper()
	d, err := testserver.RedisCPU(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// reportRedis reports records/s and redis-server CPU per record.
func reportRedis(b *testing.B, c redis.UniversalClient, cpu0 time.Duration, records int, unit string) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), unit+"/s")
	b.ReportMetric(float64((redisCPU(b, c)-cpu0).Nanoseconds())/float64(records), "redis-ns/"+unit)
}

func benchRedisServer(b *testing.B, cfg RedisConfig) (*Redis, redis.UniversalClient) {
	srv := testserver.NewRedis(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { c.Close() })
	return newTestRedis(b, c, cfg), c
}

// persistBatches returns a generator of persister batches: size messages
// with 200-byte bodies and distinct client_msg_ids over groups groups, with
// msgids that keep rising.
func persistBatches(groups, size int) func() []schema.Message {
	body := make([]byte, 200)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	gids := make([]string, groups)
	for i := range gids {
		gids[i] = "group-" + strconv.Itoa(i)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	batch := make([]schema.Message, size)
	next := int64(0)
	now := time.Now().UnixMilli()
	return func() []schema.Message {
		for i := range batch {
			batch[i] = schema.Message{Gid: gids[rng.IntN(groups)], Sender: "u" + strconv.Itoa(rng.IntN(100)),
				ClientMsgID: "c" + strconv.FormatInt(next, 10), SentAt: now + next/1000, Body: body, MsgID: next}
			next++
		}
		return batch
	}
}

// BenchmarkRedisPersistBatch runs what the persister does with Redis for
// a batch: ClaimSends, then AppendWindow of the messages that are not
// duplicates, with the default window of 1,000.
func BenchmarkRedisPersistBatch(b *testing.B) {
	for _, shape := range []struct {
		name         string
		groups, size int
	}{{"62groups", 62, 10000}, {"1000groups", 1000, 10000}} {
		b.Run(shape.name, func(b *testing.B) {
			r, c := benchRedisServer(b, RedisConfig{})
			ctx := context.Background()
			next := persistBatches(shape.groups, shape.size)
			for range 10 { // fill the windows, so that trimming happens
				if err := r.AppendWindow(ctx, nil, next()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu0 := redisCPU(b, c)
			b.ResetTimer()
			for b.Loop() {
				batch := next()
				dup, err := r.ClaimSends(ctx, nil, batch)
				if err != nil {
					b.Fatal(err)
				}
				keep := batch[:0]
				for i := range batch {
					if !dup[i] {
						keep = append(keep, batch[i])
					}
				}
				if len(keep) != len(batch) {
					b.Fatalf("%d duplicates in a batch of distinct sends", len(batch)-len(keep))
				}
				if err := r.AppendWindow(ctx, nil, keep); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportRedis(b, c, cpu0, b.N*shape.size, "msgs")
		})
	}
}

// BenchmarkRedisClaimSendsShaped and BenchmarkRedisAppendWindowShaped
// split BenchmarkRedisPersistBatch/62groups in its two calls.
func BenchmarkRedisClaimSendsShaped(b *testing.B) {
	r, c := benchRedisServer(b, RedisConfig{})
	ctx := context.Background()
	next := persistBatches(62, 10000)
	b.ReportAllocs()
	cpu0 := redisCPU(b, c)
	for b.Loop() {
		if _, err := r.ClaimSends(ctx, nil, next()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRedis(b, c, cpu0, b.N*10000, "msgs")
}

func BenchmarkRedisAppendWindowShaped(b *testing.B) {
	r, c := benchRedisServer(b, RedisConfig{})
	ctx := context.Background()
	next := persistBatches(62, 10000)
	b.ReportAllocs()
	cpu0 := redisCPU(b, c)
	for b.Loop() {
		if err := r.AppendWindow(ctx, nil, next()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRedis(b, c, cpu0, b.N*10000, "msgs")
}

// BenchmarkRedisAckReplay folds batches of 10,000 acks of random members
// (100 per group) of 625 groups, random uptos: the ack projector's replay of
// one of 16 partitions of 10,000 groups.
// BenchmarkRedisAckReplay folds batches of 10,000 acks of 625 groups × 100
// members. rising: each member's acks rise from batch to batch, as a
// member's do in the log; random: any order, the worst case for finding
// the cursors a batch leaves behind (a second round trip for most groups).
func BenchmarkRedisAckReplay(b *testing.B) {
	for _, rising := range []bool{true, false} {
		name := "random"
		if rising {
			name = "rising"
		}
		b.Run(name, func(b *testing.B) { benchAckReplay(b, rising) })
	}
}

func benchAckReplay(b *testing.B, rising bool) {
	r, c := benchRedisServer(b, RedisConfig{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	gids, uids := make([]string, 625), make([]string, 100)
	for i := range gids {
		gids[i] = "g" + strconv.Itoa(i)
	}
	for i := range uids {
		uids[i] = "u" + strconv.Itoa(i)
	}
	batch := make([]schema.Ack, 10000)
	b.ReportAllocs()
	cpu0 := redisCPU(b, c)
	var round int64
	for b.Loop() {
		b.StopTimer()
		round++
		for i := range batch {
			upto := rng.Int64N(1 << 30)
			if rising {
				upto = round<<20 + int64(i)
			}
			batch[i] = schema.Ack{Gid: gids[rng.IntN(len(gids))], Uid: uids[rng.IntN(len(uids))], Upto: upto}
		}
		b.StartTimer()
		if _, err := r.AdvanceAcksBehind(ctx, batch); err != nil { // as the ack projector
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRedis(b, c, cpu0, b.N*len(batch), "acks")
}

// BenchmarkRedisBeginSend is a gateway's send claim, one round trip per
// send, without and with the member projector's replay mark read beside
// it (what every send, ack, read and pull of a member pays for the check).
func BenchmarkRedisBeginSend(b *testing.B) {
	for _, tc := range []struct {
		name  string
		built *Fence
	}{{"unchecked", nil}, {"checked", &Fence{Consumer: "chat.member-projector", Topic: "chat.members", Partition: 0}}} {
		b.Run(tc.name, func(b *testing.B) {
			r, c := benchRedisServer(b, RedisConfig{})
			ctx := context.Background()
			if err := r.ApplyMembers(ctx, []schema.Member{{Gid: "g", Uid: "u", Op: schema.OpJoin, Pos: -1}}); err != nil {
				b.Fatal(err)
			}
			if ok, err := r.AdvanceOffset(ctx, "chat.member-projector", "chat.members", 0, -1, 0); !ok || err != nil {
				b.Fatal(ok, err)
			}
			if _, err := r.MarkReplayed(ctx, "chat.member-projector", "chat.members", 0); err != nil {
				b.Fatal(err)
			}
			cpu0 := redisCPU(b, c)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if cl, err := r.BeginSend(ctx, "g", "u", "c"+strconv.Itoa(i), time.Minute, tc.built); err != nil || cl.State != SendClaimed {
					b.Fatal(cl, err)
				}
				i++
			}
			reportRedis(b, c, cpu0, b.N, "sends")
		})
	}
}

// BenchmarkRedisMemberCursors is a login's sync: one member's head,
// cursors and unread count in each of 50 groups of 200 messages.
func BenchmarkRedisMemberCursors(b *testing.B) {
	r, c := benchRedisServer(b, RedisConfig{})
	ctx := context.Background()
	gids := make([]string, 50)
	for i := range gids {
		gids[i] = "g" + strconv.Itoa(i)
		appendAll(b, r, batchOf(gids[i], span(0, 199)...)...)
		if err := r.AdvanceReads(ctx, []schema.Receipt{{Gid: gids[i], Uid: "u", Upto: int64(i)}}); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := redisCPU(b, c)
	b.ReportAllocs()
	for b.Loop() {
		cur, err := r.MemberCursors(ctx, "u", gids)
		if err != nil || cur["g1"].Unread != 198 {
			b.Fatal(cur["g1"], err)
		}
	}
	reportRedis(b, c, cpu0, b.N, "syncs")
}
