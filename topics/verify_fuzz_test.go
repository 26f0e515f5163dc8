package topics

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
)

// brokerNumber reads a config value the broker describes as a whole
// number, by another road than strconv: the reference for Verify's.
func brokerNumber(s string) (int, bool) {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || !n.IsInt64() {
		return 0, false
	}
	return int(n.Int64()), true
}

// FuzzVerifyConfigs describes chat.messages to Verify with any
// min.insync.replicas, cleanup.policy and retention.ms the broker may
// report, and any replica count. Only a cleanup policy other than the
// spec's is fatal. Too few replicas is one warning, which names the
// replicas, min.insync.replicas as the broker gave it ("unknown" when it
// gave none), and the brokers an acknowledged record may be on: the
// replicas, or fewer when min.insync.replicas reads as fewer. With
// replicas enough, min.insync.replicas is one warning unless it reads as
// a number at or above what the spec asks. Any other value differing is
// one warning, and a topic as its spec says has none.
func FuzzVerifyConfigs(f *testing.F) {
	for _, c := range []struct {
		specRF, rf        uint8
		isr               string
		hasISR            bool
		policy, retention string
	}{
		{3, 3, "2", true, "delete", "604800000"},
		{3, 3, "1", true, "delete", "604800000"},
		{3, 3, "3", true, "delete", "604800000"},
		{3, 1, "1", true, "delete", "604800000"},
		{3, 1, "", false, "delete", "604800000"},
		{3, 2, "5", true, "delete", "604800000"},
		{3, 3, "two", true, "delete", "604800000"},
		{3, 3, "+2", true, "delete", "604800000"},
		{3, 3, "02", true, "delete", "604800000"},
		{3, 3, "99999999999999999999", true, "delete", "604800000"},
		{3, 3, "2", true, "compact", "604800000"},
		{3, 3, "1", true, "compact", "1"},
		{3, 3, "2", true, "delete,compact", "-1"},
		{0, 1, "1", true, "delete", "604800000"},
		{2, 2, "1", true, "delete", "604800000"},
		{7, 0, "-3", true, "", ""},
	} {
		f.Add(c.specRF, c.rf, c.isr, c.hasISR, c.policy, c.retention)
	}
	f.Fuzz(func(t *testing.T, specRF, rf uint8, isr string, hasISR bool, policy, retention string) {
		spec := Specs(Config{Partitions: 4, ReplicationFactor: int(specRF) % (MaxReplicationFactor + 1)})[0]
		st := State{Name: spec.Name, Exists: true, Partitions: 4, ReplicationFactor: int(rf) % (MaxReplicationFactor + 1),
			Configs: map[string]string{"cleanup.policy": policy, "retention.ms": retention}}
		if hasISR {
			st.Configs[minInsync] = isr
		} else {
			isr = ""
		}

		type want struct {
			detail string // what the detail begins with
			fatal  bool
		}
		var wants []want
		enough := st.ReplicationFactor >= spec.ReplicationFactor
		if !enough {
			on := st.ReplicationFactor
			if n, ok := brokerNumber(isr); ok && n < on {
				on = n
			}
			shown := isr
			if isr == "" {
				shown = "unknown"
			}
			wants = append(wants, want{detail: fmt.Sprintf("has replication factor %d and min.insync.replicas %s, CHAT_REPLICATION_FACTOR (-replication-factor) asks for %d: "+
				"an acknowledged record may be on %d broker(s) only", st.ReplicationFactor, shown, spec.ReplicationFactor, on)})
		}
		// The configs in the order of their names.
		if policy != spec.CleanupPolicy() {
			wants = append(wants, want{detail: fmt.Sprintf("cleanup.policy is %q, the spec says %q", policy, spec.CleanupPolicy()), fatal: true})
		}
		if asked, ok := spec.Configs[minInsync]; ok && isr != asked && enough {
			if n, ok := brokerNumber(isr); !ok || n < MinInsyncReplicas(spec.ReplicationFactor) {
				wants = append(wants, want{detail: fmt.Sprintf("has replication factor %d and min.insync.replicas %q, CHAT_REPLICATION_FACTOR=%d asks for min.insync.replicas %d",
					st.ReplicationFactor, isr, spec.ReplicationFactor, MinInsyncReplicas(spec.ReplicationFactor))})
			}
		}
		if r := spec.Configs["retention.ms"]; retention != r {
			wants = append(wants, want{detail: fmt.Sprintf("retention.ms is %q, the spec says %q", retention, r)})
		}

		problems := Verify([]Spec{spec}, []State{st})
		if len(problems) != len(wants) {
			t.Fatalf("Verify of %+v against %+v: %d problems, want %d:\n%v", st, spec, len(problems), len(wants), problems)
		}
		for i, p := range problems {
			if p.Topic != spec.Name || p.Fatal != wants[i].fatal || !strings.HasPrefix(p.Detail, wants[i].detail) {
				t.Fatalf("Verify of %+v against %+v: problem %d is %+v; want one that begins %q (fatal %v)", st, spec, i, p, wants[i].detail, wants[i].fatal)
			}
		}
		if err := mismatch(problems); errors.Is(err, ErrMismatch) != (policy != spec.CleanupPolicy()) {
			t.Fatalf("Verify of %+v against %+v: %v", st, spec, err)
		}
	})
}
