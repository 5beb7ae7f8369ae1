// Package storetest is the conformance suite every store.Store backend
// runs, so Postgres in production and SQLite in `sbx dev` behave alike.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// Run runs the suite. open must return a fresh, empty store and arrange
// for it to be closed when t ends (Close may then already have been
// called once); subtests call it once each and run in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name     string
		accounts []string // seeded (see seedAccounts) before fn runs
		fn       func(t *testing.T, ctx context.Context, s store.Store)
	}{
		{"Accounts", nil, testAccounts},
		{"Projects", []string{"a", "b"}, testProjects},
		{"Tokens", []string{"a"}, testTokens},
		{"Profiles", nil, testProfiles},
		{"SandboxRoundTrip", []string{"a"}, testSandboxRoundTrip},
		{"IdempotencyKey", []string{"a", "b"}, testIdempotencyKey},
		{"Pagination", []string{"a", "b"}, testPagination},
		{"StatesAndCountLive", []string{"a", "b"}, testStatesAndCountLive},
		{"LiveCounter", []string{"a", "b"}, testLiveCounter},
		{"ExpiredSandboxes", []string{"a"}, testExpiredSandboxes},
		{"Sessions", []string{"a"}, testSessions},
		{"Usage", []string{"a", "b"}, testUsage},
		{"UsageMatchesLedger", []string{"a"}, testUsageMatchesLedger},
		{"Events", []string{"a"}, testEvents},
		{"SSHCredentials", []string{"a"}, testSSHCredentials},
		{"PreviewPorts", []string{"a"}, testPreviewPorts},
		{"PortNames", []string{"a"}, testPortNames},
		{"Shares", []string{"a"}, testShares},
		{"Services", []string{"a"}, testServices},
		{"Webhooks", []string{"a", "b"}, testWebhooks},
		{"Connections", []string{"a", "b"}, testConnections},
		{"GrantTokens", []string{"a", "b"}, testGrantTokens},
		{"Audit", []string{"a", "b"}, testAudit},
		{"Consumer", []string{"a"}, testConsumer},
		{"AccountsAndLiveCounts", []string{"b", "a"}, testAccountsAndLiveCounts},
		{"SubscribeEvents", []string{"a"}, testSubscribeEvents},
		{"RevokeToken", []string{"a"}, testRevokeToken},
		{"Idle", []string{"a", "b"}, testIdle},
		{"NamesAndLabels", []string{"a", "b"}, testNamesAndLabels},
		{"StuckSandboxes", []string{"a"}, testStuckSandboxes},
		{"Snapshots", []string{"a", "b"}, testSnapshots},
		{"Secrets", []string{"a", "b"}, testSecrets},
		{"SandboxNetwork", []string{"a"}, testSandboxNetwork},
		{"EgressLog", []string{"a"}, testEgressLog},
		{"EgressLogPrune", []string{"a"}, testEgressLogPrune},
		{"Credentials", []string{"a", "b"}, testCredentials},
		{"Rollback", nil, testRollback},
		{"ConcurrentLimit", nil, testConcurrentLimit},
		{"ConcurrentLimitLockLast", nil, testConcurrentLimitLockLast},
		{"Jobs", nil, testJobs},
		{"CloseStopsJobs", nil, testCloseStopsJobs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if len(tc.accounts) > 0 {
				seedAccounts(t, s, tc.accounts...)
			}
			tc.fn(t, t.Context(), s)
		})
	}
}

// t0 has microsecond precision, the finest both backends keep.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)

func ptr[T any](v T) *T { return &v }

// inTx runs fn in a transaction and fails the test on error.
func inTx(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.InTx(t.Context(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// all runs several writes in one transaction, stopping at the first error.
func all(ctx context.Context, tx store.Tx, steps ...func(context.Context, store.Tx) error) error {
	for _, step := range steps {
		if err := step(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

func account(id string, limit int) store.Account {
	return store.Account{ID: id, Name: "name-" + id, SandboxesEnabled: true, ConcurrentLimit: limit, CreatedAt: t0}
}

// seedAccounts creates accounts with a concurrency limit of 10.
func seedAccounts(t *testing.T, s store.Store, ids ...string) {
	t.Helper()
	inTx(t, s, func(tx store.Tx) error {
		for _, id := range ids {
			if err := tx.UpsertAccount(t.Context(), account(id, 10)); err != nil {
				return err
			}
		}
		return nil
	})
}

func sandbox(accountID, id string, created time.Time) store.Sandbox {
	return store.Sandbox{
		ID: id, AccountID: accountID, Profile: "small", Platform: "linux",
		State: store.StatePending, CreatedAt: created, DeadlineAt: created.Add(time.Hour),
	}
}

func insertSandboxes(t *testing.T, s store.Store, sbs ...store.Sandbox) {
	t.Helper()
	inTx(t, s, func(tx store.Tx) error {
		for _, sb := range sbs {
			if err := tx.InsertSandbox(t.Context(), sb); err != nil {
				return err
			}
		}
		return nil
	})
}

func wantEqual[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// wantRead returns what fails the test if a read failed and wants its
// result equal to want: wantRead(t, "account", want)(s.Account(ctx, id)).
func wantRead[T any](t *testing.T, what string, want T) func(got T, err error) {
	return func(got T, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wantEqual(t, what, got, want)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got error %v, want %v", what, err, want)
	}
}

func ids(sbs []store.Sandbox) []string {
	out := make([]string, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func sbID(i int) string { return fmt.Sprintf("sb-%02d", i) }
