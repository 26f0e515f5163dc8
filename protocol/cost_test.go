package protocol

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The web page keeps its own copy of what a sync and a who_read answer,
// and a cursors frame, cost (JavaScript cannot import these constants): a page that charged
// less than the gateway would have its frames, sends among them, refused
// as rate_limited.
func TestTheWebPageChargesAnswersAsTheGatewayDoes(t *testing.T) {
	b, err := os.ReadFile("../web/static/pace.js")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"SYNC_PER": SyncPer, "WHO_READ_PER": WhoReadPer, "CURSORS_PER": CursorsPer} {
		if line := fmt.Sprintf("export const %s = %d;", name, want); !strings.Contains(string(b), line) {
			t.Errorf("web/static/pace.js does not say %q, as protocol's cost.go has it", line)
		}
	}
}
