package client_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// A typical client: dial once, show the counts from the login sync, open
// the group the user looks at, send, and mark what was shown as read. The
// client reconnects, resyncs and pulls by itself; OnMessage sees every
// message once, in order per group.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{
		URL: "ws://localhost:8080/v1/ws",
		Token: func(ctx context.Context) (string, error) {
			return "<jwt from your login service>", nil // called on every (re)connect
		},
		OnMessage: func(m protocol.Message) {
			// One goroutine, msgid order per group, no duplicates.
			fmt.Printf("[%s #%d] %s: %s\n", m.Gid, m.MsgID, m.Sender, m.Body)
		},
		OnError: func(err error) { log.Print(err) }, // disconnects, refused acks, first connections the server asked to retry...
	})
	if err != nil { // a bad token, a server down; one that keeps asking to retry until ctx ends
		log.Fatal(err)
	}
	defer c.Close() // flushes the pending acks and reads

	for _, g := range c.Groups() { // login fetches counts only
		more := ""
		if !g.UnreadExact {
			more = "+"
		}
		fmt.Printf("%s: %d%s unread\n", g.Gid, g.Unread, more)
	}

	// Opening a group pulls what is missing of it.
	if err := c.Open(ctx, "g1"); err != nil {
		log.Fatal(err)
	}

	// Send resends with the same cmid until accepted: one message, however
	// often the network fails. The message comes back through OnMessage,
	// maybe after Send has returned.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msgid, err := c.Send(sctx, "g1", "hello")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("sent as #%d", msgid)

	// The user has seen what OnMessage showed: mark it read up to the
	// newest message received (batched like acks, and never past what
	// OnMessage was handed).
	if _, upto := c.Cursor("g1"); upto >= 0 {
		_ = c.MarkRead(ctx, "g1", upto)
	}
}

// A bot that answers every message of its groups: it tells its own
// messages by its uid, calls the client from OnMessage once Dial has
// returned (delivery may begin before), and gives each answer a cmid
// made from the message it answers, so that a message handed to it again
// after a restart (its ack not yet sent) is answered once: the server
// takes a cmid once within its dedup window (24 h by default, from the
// first send). A message "/quit" from its owner stops it: Close from
// OnMessage returns at once, and the message is acked once OnMessage
// returns, so the next run of the bot is not handed it again.
func Example_bot() {
	ctx := context.Background()
	var bot *client.Client
	var dialled sync.WaitGroup
	dialled.Add(1)
	c, err := client.Dial(ctx, client.Config{
		URL:   "ws://localhost:8080/v1/ws",
		Token: func(ctx context.Context) (string, error) { return "<the bot's jwt>", nil },
		OnMessage: func(m protocol.Message) {
			dialled.Wait() // bot is set from here on
			if bot == nil || m.Sender == bot.UID() {
				return
			}
			if m.Sender == "owner" && m.Body == "/quit" {
				_ = bot.Close() // returns at once; main's Close waits for it
				return
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := bot.SendWithID(sctx, m.Gid, fmt.Sprintf("re-%s-%d", m.Gid, m.MsgID), strings.ToUpper(m.Body)); err != nil {
				log.Print(err)
			}
		},
	})
	bot = c
	dialled.Done()
	if err != nil {
		log.Fatal(err)
	}
	<-c.Done() // serve until told to quit
	if err := c.Close(); err != nil {
		log.Print(err) // some acks were not sent: those messages come again
	}
}
