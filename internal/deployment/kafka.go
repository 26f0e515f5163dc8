package deployment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// Topic holds the deployment's Record: compacted, one partition, key
// recordKey. It is none of the co-partitioned chat.* topics of package
// topics: no consumer group reads it.
const Topic = "chat.deployment"

const recordKey = "redis"

// Read returns the newest record of Topic, or nil when there is none (the
// topic does not exist yet, or holds nothing). A value that does not
// decode is an error: a role must not take a Redis on a record it cannot
// read.
func Read(ctx context.Context, client *kafka.Client) (*Record, error) {
	var p kafka.PartitionOffsets
	err := untilKnown(ctx, func() error {
		offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
			Topic: {kafka.FirstOffsetOf(0), kafka.LastOffsetOf(0)}}})
		if err != nil {
			return err
		}
		ps := offs.Topics[Topic]
		if len(ps) != 1 {
			return fmt.Errorf("%w: the broker answered %d partitions", protocol.ErrNoPartition, len(ps))
		}
		if p = ps[0]; errors.Is(p.Error, kafka.UnknownTopicOrPartition) {
			return nil // no topic: no record
		}
		return p.Error // a leader being elected, or moved: asked again
	})
	if err != nil {
		return nil, fmt.Errorf("deployment: read %s: %w", Topic, err)
	}
	if p.Error != nil {
		return nil, nil
	}
	var last []byte
	for off := p.FirstOffset; off < p.LastOffset; {
		var res *kafka.FetchResponse
		err := untilKnown(ctx, func() error {
			var err error
			if res, err = client.Fetch(ctx, &kafka.FetchRequest{Topic: Topic, Offset: off, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond}); err == nil {
				err = res.Error
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("deployment: read %s at %d: %w", Topic, off, err)
		}
		next := off
		for {
			rec, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("deployment: read %s at %d: %w", Topic, next, err)
			}
			next = rec.Offset + 1
			if k, _ := readAll(rec.Key); string(k) != recordKey {
				continue
			}
			if last, err = readAll(rec.Value); err != nil {
				return nil, fmt.Errorf("deployment: read %s at %d: %w", Topic, rec.Offset, err)
			}
		}
		if next == off { // compaction removed what lay here: go on past it
			next = max(off+1, res.LogStartOffset)
		}
		off = next
	}
	if last == nil {
		return nil, nil
	}
	r, err := DecodeRecord(last)
	if err != nil {
		return nil, fmt.Errorf("%w (the newest record of %s; `chatctl redis adopt` writes a good one)", err, Topic)
	}
	return &r, nil
}

func readAll(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	return io.ReadAll(b)
}

// Write records r as the deployment's, making Topic when it does not exist
// with replicas replicas (0: the broker's default) and min.insync.replicas
// one fewer, as the chat.* topics.
func Write(ctx context.Context, client *kafka.Client, r Record, replicas int) error {
	if err := checkID(r.RedisID); err != nil {
		return err
	}
	if err := create(ctx, client, replicas); err != nil {
		return err
	}
	err := untilKnown(ctx, func() error {
		res, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: Topic, RequiredAcks: kafka.RequireAll,
			Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes([]byte(recordKey)), Value: kafka.NewBytes(r.Encode())})})
		if err == nil {
			err = res.Error
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("deployment: write %s: %w", Topic, err)
	}
	return nil
}

// knownWait bounds how long untilKnown waits: longer than the metadata
// lifetime of a kafka-go transport (6 s by default).
const knownWait = 15 * time.Second

// untilKnown runs f again while it fails for want of the topic: a topic
// just made has no leader for a moment, and a client that looked at the
// brokers before another role made it routes nothing to it until its
// metadata is renewed.
func untilKnown(ctx context.Context, f func() error) error {
	until := time.Now().Add(knownWait)
	for {
		err := f()
		if err == nil || !unknownTopic(err) || time.Now().After(until) {
			return err
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return err
		}
	}
}

func unknownTopic(err error) bool {
	return errors.Is(err, protocol.ErrNoTopic) || errors.Is(err, protocol.ErrNoPartition) ||
		errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.LeaderNotAvailable) ||
		errors.Is(err, kafka.NotLeaderForPartition)
}

func create(ctx context.Context, client *kafka.Client, replicas int) error {
	tc := kafka.TopicConfig{Topic: Topic, NumPartitions: 1, ReplicationFactor: -1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}}}
	if replicas > 0 {
		tc.ReplicationFactor = replicas
	}
	if replicas >= 2 {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: "min.insync.replicas", ConfigValue: strconv.Itoa(max(1, replicas-1))})
	}
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err != nil {
		return fmt.Errorf("deployment: create %s: %w", Topic, err)
	}
	if err := res.Errors[Topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("deployment: create %s: %w", Topic, err)
	}
	return nil
}
