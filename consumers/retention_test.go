package consumers

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/topics"
)

// A persister stopped (or stuck on ClickHouse) for longer than
// chat.messages' retention comes back to a log whose start passed its saved
// position: the messages in between are in no store. It goes on, and says
// so loudly, with what to do, and counts them.
func TestAConsumerBehindRetentionSaysWhatWasDeleted(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	s := sent{}
	p.send(t, 1, 3, s) // msgids 0..2
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)
	stop() // saved position 3

	p.send(t, 1, 7, s) // 3..9, not persisted
	testserver.DeleteRecordsBefore(t, p.brokers(), topics.Messages, 0, 8)
	var logs testserver.LogBuffer
	p.base.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, _ := p.persister(t, nil)
	s["g0"] = slices.DeleteFunc(s["g0"], func(id int64) bool { return id >= 3 && id < 8 })
	p.waitPersisted(t, s, 30*time.Second)

	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "deleted by the topic's retention") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "from=3 to=8 records=5") || !strings.Contains(line, "CHAT_MESSAGE_RETENTION") {
		t.Errorf("5 accepted messages (3..7) deleted before the persister stored them; its log:\n%s\nwant an error naming them and what to do", logs.String())
	}
	if got := r.Stats().Deleted; got != 5 {
		t.Errorf("Stats().Deleted = %d; want 5", got)
	}
}
