package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/control/store/sqlite"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// TestAdminRevokePublishes: `sbx admin token revoke --redis-url` tells
// the edges at once, on the channel they hear, naming the token's
// account; the secret is in no message.
func TestAdminRevokePublishes(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("no Redis at %s (the machine runs one; .ci/run starts it): %v", redisAddr, err)
	}
	sub := rdb.Subscribe(t.Context(), edgeapi.PreviewInvalidateChannel)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "sbx.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	acct := "acct-revoke-" + strings.ReplaceAll(t.Name(), "/", "-")
	run := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(sbxBinary(t), append([]string{"admin", "--data-dir", dir, "--redis-url", "redis://" + redisAddr}, args...)...)
		cmd.Env = append(os.Environ(), "SBX_DATABASE_URL=", "SBX_REDIS_URL=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("sbx admin %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
		}
		return strings.TrimSpace(stdout.String()), stderr.String()
	}
	run("account", "create", acct)
	secret, minted := run("token", "mint", "--account", acct)
	f := strings.Fields(minted) // "minted agent token tok-... for account ..."
	if len(f) < 4 {
		t.Fatalf("token mint said %q; want the token's ID", minted)
	}
	run("token", "revoke", f[3])

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	want := edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: acct}
	for {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("no invalidation for %s published: %v", acct, err)
		}
		inv, err := edgeapi.ParseInvalidation(m.Payload)
		if err != nil || inv.AccountID != acct {
			continue // another test's
		}
		if inv != want || strings.Contains(m.Payload, secret) {
			t.Fatalf("published %s, want %+v and no secret", m.Payload, want)
		}
		return
	}
}
