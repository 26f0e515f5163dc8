package producers

import (
	"context"
	"testing"

	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/topics"
)

// What TLS and SASL cost the send path: sends of 200 bytes from 64
// goroutines, as the gateway's, to an embedded broker that is plaintext,
// takes TLS, or takes TLS and SCRAM-SHA-512 (a managed Kafka's SASL_SSL).
// The broker's TLS work shares the cores, as a co-located broker's would.
func BenchmarkSendMessageParallelOver(b *testing.B) {
	f := testserver.NewTLS(b)
	ca, err := (tlsclient.Files{CAFile: f.CAFile}).Client("CHAT_KAFKA")
	if err != nil {
		b.Fatal(err)
	}
	login, err := scram.Mechanism(scram.SHA512, "chatd", "secret")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  broker.Config
		sec  topics.Security
	}{
		{"plaintext", broker.Config{}, topics.Security{}},
		{"tls", broker.Config{TLS: f.Server}, topics.Security{TLS: ca}},
		{"tls+scram", broker.Config{TLS: f.Server, Users: []broker.User{{Mechanism: "SCRAM-SHA-512", Name: "chatd", Password: "secret"}}},
			topics.Security{TLS: ca, SASL: login}},
	} {
		b.Run(c.name, func(b *testing.B) {
			br, err := broker.Start(c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(br.Close)
			ctx := context.Background()
			if err := topics.Ensure(ctx, topics.Config{Brokers: []string{br.Addr()}, Security: c.sec, Partitions: 8}, nil); err != nil {
				b.Fatal(err)
			}
			p, err := New(Config{Brokers: []string{br.Addr()}, Security: c.sec})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close() })
			sendParallel(b, p)
		})
	}
}
