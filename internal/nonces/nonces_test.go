package nonces_test

import (
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/nonces"
)

func TestMemoryRedeemsOnceUntilExpiry(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := nonces.NewMemory(func() time.Time { return now })
	redeem := func(nonce string) bool {
		t.Helper()
		ok, err := m.Redeem(t.Context(), nonce, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !redeem("a") {
		t.Fatal("first redeem of a refused")
	}
	if redeem("a") {
		t.Fatal("second redeem of a admitted")
	}
	if !redeem("b") {
		t.Fatal("first redeem of b refused")
	}
	now = now.Add(2 * time.Minute)
	if !redeem("a") {
		t.Fatal("a still refused after its ttl")
	}
}
