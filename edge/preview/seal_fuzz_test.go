package preview

import (
	"strings"
	"testing"
	"time"
)

// FuzzOpenSession feeds the session cookie opener what a browser (or an
// attacker) may send. It must never panic, and it may accept only what
// the key sealed as a session: the exact payload sealed, never another
// purpose's value, an expired one, or a tampered one. The seed corpus in
// testdata/fuzz/FuzzOpenSession holds malformed shapes; valid seals are
// added here since they depend on the key.
func FuzzOpenSession(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := sealer{key: []byte("fuzz-key-0123456789abcdef0123456"), now: func() time.Time { return now }}
	want := session{Label: "web-3000-abc", SandboxID: "sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa", AccountID: "acct-1", Subject: "u@example.com"}
	valid, err := s.seal(purposeSession, time.Hour, want)
	if err != nil {
		f.Fatal(err)
	}
	validPayload, _, _ := strings.Cut(valid, ".")
	ticketVal, _ := s.seal(purposeTicket, time.Hour, ticket{session: want, Path: "/", Nonce: "n"})
	expired, _ := s.seal(purposeSession, -time.Second, want)
	f.Add(valid)
	f.Add(ticketVal)
	f.Add(expired)
	f.Add(valid[:len(valid)-1])
	f.Add(strings.Replace(valid, ".", "..", 1))
	f.Add(validPayload + "." + strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, value string) {
		var got session
		if err := s.open(purposeSession, value, &got); err != nil {
			return
		}
		payload, _, _ := strings.Cut(value, ".")
		if payload != validPayload {
			t.Fatalf("opened a value the key never sealed as a session: %q -> %+v", value, got)
		}
		if got != want {
			t.Fatalf("opened %q to %+v, want %+v", value, got, want)
		}
	})
}
