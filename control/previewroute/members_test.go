package previewroute

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestMembers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "members.json")
	if err := os.WriteFile(path, []byte(`[
		{"account_id":"acct-a","issuer":"https://idp","subject":"alice"},
		{"account_id":"acct-b","email":"Bob@Example.com"}
	]`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadMembers(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   Identity
		acct string
		want bool
	}{
		{"subject", Identity{Issuer: "https://idp", Subject: "alice"}, "acct-a", true},
		{"subject, other account", Identity{Issuer: "https://idp", Subject: "alice"}, "acct-b", false},
		{"subject, other issuer", Identity{Issuer: "https://evil", Subject: "alice"}, "acct-a", false},
		{"verified email, any case", Identity{Issuer: "https://idp", Subject: "b", Email: "bob@example.COM", EmailVerified: true}, "acct-b", true},
		{"unverified email", Identity{Issuer: "https://idp", Subject: "b", Email: "bob@example.com"}, "acct-b", false},
		{"nobody", Identity{}, "acct-a", false},
	} {
		if got := m.Member(tc.id, tc.acct); got != tc.want {
			t.Errorf("%s: Member(%+v, %s) = %v, want %v", tc.name, tc.id, tc.acct, got, tc.want)
		}
	}
	if (*Members)(nil).Member(Identity{Issuer: "x", Subject: "y"}, "acct-a") {
		t.Error("nil Members admitted someone")
	}
	for _, bad := range []string{`[{"issuer":"i","subject":"s"}]`, `[{"account_id":"a","issuer":"i"}]`, `[{"account_id":"a","issuer":"i","subject":"s","email":"e"}]`, `{`} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadMembers(path); err == nil {
			t.Errorf("LoadMembers(%s): no error", bad)
		}
	}
}

func TestMembersFileReload(t *testing.T) {
	write, alice := membersFixture(t)
	f, err := OpenMembersFile(write(`[{"account_id":"acct-a","issuer":"https://idp","subject":"alice"}]`))
	if err != nil || !f.Member(alice, "acct-a") {
		t.Fatalf("OpenMembersFile: %v, alice a member: %v; want her in", err, f.Member(alice, "acct-a"))
	}
	for _, step := range []struct {
		name, content   string
		changed, member bool
		err             bool
	}{
		{"unchanged", `[{"account_id":"acct-a","issuer":"https://idp","subject":"alice"}]`, false, true, false},
		{"alice removed", `[]`, true, false, false},
		{"broken file keeps the last good one", `[{`, false, false, true},
		{"alice back", `[{"account_id":"acct-a","issuer":"https://idp","subject":"alice"}]`, true, true, false},
	} {
		write(step.content)
		changed, err := f.Reload()
		if changed != step.changed || (err != nil) != step.err || f.Member(alice, "acct-a") != step.member {
			t.Errorf("%s: Reload = %v, %v; member %v; want changed %v, error %v, member %v",
				step.name, changed, err, f.Member(alice, "acct-a"), step.changed, step.err, step.member)
		}
	}
	if (*MembersFile)(nil).Member(alice, "acct-a") {
		t.Error("nil MembersFile admitted someone")
	}
}

// TestMembersFileWatch runs Watch on a fake clock: a change is seen at
// the next tick (not before), a broken file keeps the members and calls
// nobody, and Watch returns when its context ends.
func TestMembersFileWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		write, alice := membersFixture(t)
		f, err := OpenMembersFile(write(`[{"account_id":"acct-a","issuer":"https://idp","subject":"alice"}]`))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var changes atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Watch(ctx, time.Second, slog.New(slog.DiscardHandler), func() { changes.Add(1) })
		}()

		write(`[]`)
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if changes.Load() != 0 || !f.Member(alice, "acct-a") {
			t.Fatalf("before the first tick: %d changes, alice member %v; want 0 and still a member", changes.Load(), f.Member(alice, "acct-a"))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if changes.Load() != 1 || f.Member(alice, "acct-a") {
			t.Fatalf("after the first tick: %d changes, alice member %v; want 1 and removed", changes.Load(), f.Member(alice, "acct-a"))
		}

		write(`[{`)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if changes.Load() != 1 {
			t.Fatalf("a broken file called changed: %d changes, want 1", changes.Load())
		}
		write(`[{"account_id":"acct-a","issuer":"https://idp","subject":"alice"}]`)
		time.Sleep(time.Second)
		synctest.Wait()
		if changes.Load() != 2 || !f.Member(alice, "acct-a") {
			t.Fatalf("after the fix: %d changes, alice member %v; want 2 and back", changes.Load(), f.Member(alice, "acct-a"))
		}

		cancel()
		<-done
	})
}

// membersFixture gives a writer of one members file (it returns the
// file's path) and the identity the tests add and remove.
func membersFixture(t *testing.T) (write func(string) string, alice Identity) {
	path := filepath.Join(t.TempDir(), "members.json")
	write = func(s string) string {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write, Identity{Issuer: "https://idp", Subject: "alice"}
}
