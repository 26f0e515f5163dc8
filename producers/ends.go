package producers

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/topics"
)

// MessageEnds returns, for every partition of chat.messages, the offset the
// next record will take (its log end): every message sent before the call
// has a msgid below its partition's end.
func (p *Producer) MessageEnds(ctx context.Context) (map[int]int64, error) {
	n, err := p.partitions(ctx, topics.Messages)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafka.OffsetRequest, n)
	for i := range n {
		reqs[i] = kafka.LastOffsetOf(i)
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topics.Messages: reqs}}
	var resp *kafka.ListOffsetsResponse
	err = p.again(func() (err error) { resp, err = p.client.ListOffsets(ctx, req); return err })
	if err != nil {
		return nil, fmt.Errorf("producers: ends of %s: %w", topics.Messages, err)
	}
	ends := make(map[int]int64, n)
	for _, po := range resp.Topics[topics.Messages] {
		if po.Error != nil {
			return nil, fmt.Errorf("producers: end of %s/%d: %w", topics.Messages, po.Partition, po.Error)
		}
		ends[po.Partition] = po.LastOffset
		p.brokerHead(po.Partition, po.LastOffset-1)
	}
	if len(ends) != n {
		return nil, fmt.Errorf("producers: ends of %s: %d of %d partitions answered", topics.Messages, len(ends), n)
	}
	return ends, nil
}
