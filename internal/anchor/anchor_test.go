package anchor

import (
	"testing"
	"time"
)

// TestAnchor: the anchor keeps its monotonic reading (intervals from it are
// monotonic) and its wall value is the one its Unix nanoseconds give.
func TestAnchor(t *testing.T) {
	if s := Start(); s == s.Round(0) {
		t.Fatal("the anchor has no monotonic reading")
	}
	if Start().UnixNano() != StartUnixNano() {
		t.Fatalf("wall %d, StartUnixNano %d", Start().UnixNano(), StartUnixNano())
	}
	if d := time.Since(Start()); d < 0 {
		t.Fatalf("%v since the anchor", d)
	}
}
