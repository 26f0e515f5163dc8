package consumers

import (
	"context"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/topics"
)

// checkRetained says so when records from start on were deleted before the
// consumer handled them: the topic's retention outran a consumer stopped,
// or failing, for longer than the topic keeps its records. The reader goes
// on from the first record there is; what the deleted ones held is missing
// from the consumer's store. For a consumer that starts at the end (the
// fan-out: pushes only) it is no loss, and said as news.
func (r *Runner[E]) checkRetained(ctx context.Context, log *slog.Logger, part int, start int64) {
	client, closeIdle := topics.NewClient(r.cfg.Brokers, r.cfg.Security, 10*time.Second)
	defer closeIdle()
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{r.cfg.Topic: {kafka.FirstOffsetOf(part)}},
	})
	if err != nil {
		log.Debug("cannot read the partition's first offset", "err", err)
		return
	}
	for _, po := range resp.Topics[r.cfg.Topic] {
		if po.Partition != part || po.Error != nil || po.FirstOffset <= start {
			continue
		}
		n := po.FirstOffset - start
		r.mu.Lock()
		r.stats.Deleted += n
		r.mu.Unlock()
		r.cfg.Metrics.Deleted(r.cfg.Group, n)
		if r.cfg.StartAtEnd {
			log.Info("records deleted by retention before they were handled; going on from the first there is", "from", start, "to", po.FirstOffset)
			return
		}
		log.Error("records deleted by the topic's retention before this consumer handled them: it was stopped or failing for longer than the topic keeps records, and what they held is missing from its store. "+
			"Going on from the first record there is. Keep the retention above the longest outage (CHAT_MESSAGE_RETENTION for chat.messages); see docs/operations.md, \"A consumer fell behind retention\"",
			"from", start, "to", po.FirstOffset, "records", n)
	}
}
