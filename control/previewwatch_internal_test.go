package control

import "testing"

// TestRevokedTokensPoll: with Redis, where revocations are published as
// they are written, the store is polled only as a safety net; without,
// the poll is the road and stays quick. Both fit in the look-back window.
func TestRevokedTokensPoll(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		published bool
		want      string
	}{{true, "30s"}, {false, "1s"}} {
		got := revokedTokensPoll(c.published)
		if got.String() != c.want || got >= revokedTokensWindow {
			t.Errorf("published=%v: poll every %s, want %s and under the %s window", c.published, got, c.want, revokedTokensWindow)
		}
	}
}
