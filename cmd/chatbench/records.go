package main

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/topics"
)

// records is what the run appended to the chat.* topics, read from the
// broker's end offsets before and after: the cost of a message in records,
// acks and receipts included, whatever the clients did to cause them.
type records struct {
	Known          bool    `json:"known"` // false: no broker address, or it did not answer
	Messages       int64   `json:"messages"`
	Acks           int64   `json:"acks"`
	Receipts       int64   `json:"receipts"`
	AcksPerMsg     float64 `json:"acks_per_message"`
	ReceiptsPerMsg float64 `json:"receipts_per_message"`
	Deliveries     int64   `json:"deliveries"` // OnMessage calls on the online members meanwhile
	AcksPerDel     float64 `json:"acks_per_delivery"`
	ReceiptsPerDel float64 `json:"receipts_per_delivery"`
	Error          string  `json:"error,omitempty"`
}

// perDelivery sets the per-delivery figures from n deliveries.
func (r *records) perDelivery(n int64) {
	r.Deliveries = n
	if r.Known && n > 0 {
		r.AcksPerDel = float64(r.Acks) / float64(n)
		r.ReceiptsPerDel = float64(r.Receipts) / float64(n)
	}
}

func (r records) String() string {
	if !r.Known {
		if r.Error != "" {
			return "unknown: " + r.Error
		}
		return "unknown (pass -kafka, or let chatbench start chatd with -chatd)"
	}
	return fmt.Sprintf("%d messages, %d ack records (%.3f per message, %.4f per delivery), %d receipt records (%.3f per message, %.4f per delivery)",
		r.Messages, r.Acks, r.AcksPerMsg, r.AcksPerDel, r.Receipts, r.ReceiptsPerMsg, r.ReceiptsPerDel)
}

// topicEnds is the sum over partitions of each chat.* topic's end offset.
type topicEnds struct {
	ends map[string]int64
	err  error
}

var countedTopics = []string{topics.Messages, topics.Acks, topics.Receipts}

// recordCounts reads the end offsets of the chat.* topics from broker
// ("" : unknown).
func recordCounts(ctx context.Context, broker string) topicEnds {
	if broker == "" {
		return topicEnds{}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, closeClient := topics.NewClient([]string{broker}, topics.Security{}, 30*time.Second)
	defer closeClient()
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: countedTopics})
	if err != nil {
		return topicEnds{err: fmt.Errorf("metadata from %s: %w", broker, err)}
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, t := range meta.Topics {
		if t.Error != nil {
			return topicEnds{err: fmt.Errorf("metadata of %s: %w", t.Name, t.Error)}
		}
		for _, p := range t.Partitions {
			req.Topics[t.Name] = append(req.Topics[t.Name], kafka.LastOffsetOf(p.ID))
		}
	}
	ans, err := c.ListOffsets(ctx, req)
	if err != nil {
		return topicEnds{err: fmt.Errorf("end offsets from %s: %w", broker, err)}
	}
	out := topicEnds{ends: map[string]int64{}}
	for topic, parts := range ans.Topics {
		for _, p := range parts {
			if p.Error != nil {
				return topicEnds{err: fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, p.Error)}
			}
			out.ends[topic] += p.LastOffset
		}
	}
	return out
}

// recordsPerMessage is what was appended between two readings.
func recordsPerMessage(before, after topicEnds) records {
	switch {
	case before.err != nil:
		return records{Error: before.err.Error()}
	case after.err != nil:
		return records{Error: after.err.Error()}
	case before.ends == nil || after.ends == nil:
		return records{}
	}
	r := records{Known: true,
		Messages: after.ends[topics.Messages] - before.ends[topics.Messages],
		Acks:     after.ends[topics.Acks] - before.ends[topics.Acks],
		Receipts: after.ends[topics.Receipts] - before.ends[topics.Receipts],
	}
	if r.Messages > 0 {
		r.AcksPerMsg = float64(r.Acks) / float64(r.Messages)
		r.ReceiptsPerMsg = float64(r.Receipts) / float64(r.Messages)
	}
	return r
}
