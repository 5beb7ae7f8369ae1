package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

const (
	projA = "11111111-1111-4111-8111-111111111111" // acct-1's
	projB = "22222222-2222-4222-8222-222222222222" // acct-2's
)

func seedProjects(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertAccount(ctx, store.Account{ID: "acct-2", Name: "two", SandboxesEnabled: true, ConcurrentLimit: 5}); err != nil {
			return err
		}
		if err := tx.UpsertProject(ctx, store.Project{ID: projA, AccountID: "acct-1", Name: "app"}); err != nil {
			return err
		}
		return tx.UpsertProject(ctx, store.Project{ID: projB, AccountID: "acct-2", Name: "theirs"})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGrantValidation: a grant on another account's project, an unknown
// project, or an unknown scope is refused naming the entry, and nothing
// (sandbox, grant, audit row) is created.
func TestGrantValidation(t *testing.T) {
	h := newHarness(t, "postgres", lifecycle.Config{}, nil)
	seedProjects(t, h)
	ctx := context.Background()
	good := store.Grant{ProjectID: projA, Scopes: []string{"cache:read"}}
	cases := []struct {
		name      string
		grants    []store.Grant
		wantField string
	}{
		{"foreign project", []store.Grant{good, {ProjectID: projB, Scopes: []string{"cache:read"}}}, "grants[1].project_id"},
		{"unknown project", []store.Grant{{ProjectID: "33333333-3333-4333-8333-333333333333", Scopes: []string{"cache:read"}}}, "grants[0].project_id"},
		{"unknown scope", []store.Grant{{ProjectID: projA, Scopes: []string{"cache:read", "cache:delete"}}}, "grants[0].scopes[1]"},
		{"no scopes", []store.Grant{{ProjectID: projA}}, "grants[0].scopes"},
		{"duplicate scope", []store.Grant{{ProjectID: projA, Scopes: []string{"registry:read", "registry:read"}}}, "grants[0].scopes[1]"},
		{"no project", []store.Grant{{Scopes: []string{"cache:read"}}}, "grants[0].project_id"},
	}
	for _, c := range cases {
		_, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", Grants: c.grants})
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != c.wantField {
			t.Errorf("%s: Create error %v, want a FieldError on %s", c.name, err, c.wantField)
		}
	}
	list, err := h.st.Sandboxes(ctx, store.ListOptions{AccountID: h.acct.ID})
	if err != nil || len(list) != 0 {
		t.Fatalf("after refused creates: %d sandboxes (%v), want none", len(list), err)
	}
	audit, err := h.st.Audit(ctx, store.AuditFilter{AccountID: h.acct.ID})
	if err != nil || len(audit) != 0 {
		t.Fatalf("after refused creates: audit %+v (%v), want none", audit, err)
	}
}

// fileWatcher records, at the moment the inner provider finished
// provisioning, the grants file on disk and the sandbox's state in the
// store: the file must be there while the sandbox is still pending.
type fileWatcher struct {
	provider.Provider
	dataDir string
	st      store.Store

	mu        sync.Mutex
	file      []byte
	mode      os.FileMode
	stateThen store.State
}

func (f *fileWatcher) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	ep, err := f.Provider.Provision(ctx, spec)
	if err != nil {
		return ep, err
	}
	p := filepath.Join(f.dataDir, "sandboxes", spec.SandboxID, "home", lifecycle.GrantsPath)
	b, rerr := os.ReadFile(p)
	st, serr := os.Stat(p)
	sb, _ := f.st.Sandbox(ctx, spec.SandboxID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if rerr == nil && serr == nil {
		f.file, f.mode = b, st.Mode().Perm()
	}
	f.stateThen = sb.State
	return ep, nil
}

// TestGrantTokensLifecycle: tokens are written at the documented path
// (0600) before ready, introspect active with the grant's account,
// project, scopes and the sandbox deadline as expiry, follow a deadline
// extension, and die with the sandbox. The audit rows are exact.
func TestGrantTokensLifecycle(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var fw *fileWatcher
			h := newHarness(t, backend, lifecycle.Config{}, func(p provider.Provider) provider.Provider {
				fw = &fileWatcher{Provider: p}
				return fw
			})
			fw.dataDir, fw.st = h.provDir, h.st
			seedProjects(t, h)
			ctx := context.Background()
			minutes := 30
			sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{
				Profile: "tuist-linux-small", DeadlineMinutes: &minutes, Caller: "tok-caller",
				Grants: []store.Grant{
					{ProjectID: projA, Scopes: []string{"cache:write", "cache:read"}},
					{ProjectID: projA, Scopes: []string{"registry:read"}},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			h.waitState(t, sb.ID, store.StateReady, 10*time.Second)

			fw.mu.Lock()
			file, mode, stateThen := fw.file, fw.mode, fw.stateThen
			fw.mu.Unlock()
			if stateThen != store.StatePending || file == nil {
				t.Fatalf("when provisioning returned: state %q, file present %v; want pending with the file", stateThen, file != nil)
			}
			if mode != 0o600 {
				t.Fatalf("grants file mode %o, want 600", mode)
			}
			var doc lifecycle.GrantsFile
			if err := json.Unmarshal(file, &doc); err != nil {
				t.Fatalf("grants file: %v\n%s", err, file)
			}
			if doc.SandboxID != sb.ID || len(doc.Grants) != 2 {
				t.Fatalf("grants file %+v, want 2 grants of %s", doc, sb.ID)
			}
			wantScopes := [][]string{{"cache:read", "cache:write"}, {"registry:read"}}
			for i, g := range doc.Grants {
				in, err := h.m.Introspect(ctx, g.Token)
				if err != nil {
					t.Fatal(err)
				}
				want := lifecycle.Introspection{Active: true, GrantID: g.ID, SandboxID: sb.ID, AccountID: h.acct.ID,
					ProjectID: projA, Scopes: wantScopes[i], ExpiresAt: sb.DeadlineAt}
				if !equalJSON(in, want) {
					t.Fatalf("introspect grant %d: %+v, want %+v", i, in, want)
				}
			}
			// Only hashes are stored.
			grants, _ := h.st.GrantTokens(ctx, sb.ID)
			for _, g := range grants {
				if string(g.Hash) == doc.Grants[g.Position].Token || len(g.Hash) != 32 {
					t.Fatalf("grant %s stores %d bytes, want a 32-byte hash", g.ID, len(g.Hash))
				}
			}

			ext, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{DeadlineMinutes: ptr(90)})
			if err != nil {
				t.Fatal(err)
			}
			in, _ := h.m.Introspect(ctx, doc.Grants[0].Token)
			if !in.Active || !in.ExpiresAt.Equal(ext.DeadlineAt) || !ext.DeadlineAt.After(sb.DeadlineAt) {
				t.Fatalf("after extend: %+v, want active until %s", in, ext.DeadlineAt)
			}
			// Past the deadline (before the reaper acts) it is dead.
			h.clock.Advance(91 * time.Minute)
			if in, _ := h.m.Introspect(ctx, doc.Grants[0].Token); in.Active {
				t.Fatalf("after the deadline: %+v, want inactive", in)
			}
			h.clock.Advance(-91 * time.Minute)
			if in, _ := h.m.Introspect(ctx, doc.Grants[0].Token); !in.Active {
				t.Fatal("before the deadline again: inactive")
			}

			if _, err := h.m.Delete(ctx, h.acct, sb.ID); err != nil {
				t.Fatal(err)
			}
			for _, g := range doc.Grants {
				if in, _ := h.m.Introspect(ctx, g.Token); in.Active {
					t.Fatalf("after delete: grant %s still active", g.ID)
				}
			}

			audit, err := h.st.Audit(ctx, store.AuditFilter{AccountID: h.acct.ID, ProjectID: projA})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, a := range audit {
				msgs = append(msgs, a.Message)
			}
			want := []string{
				"sandbox " + sb.ID + " received scopes [registry:read] on project " + projA + " via caller tok-caller",
				"sandbox " + sb.ID + " received scopes [cache:read, cache:write] on project " + projA + " via caller tok-caller",
			}
			if !equalJSON(msgs, want) {
				t.Fatalf("audit:\n got  %q\n want %q", msgs, want)
			}
		})
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// failAfterSpec records each attempt's grants file and fails every
// provisioning attempt, as a failed image pull would.
type failAfterSpec struct {
	provider.Provider
	mu    sync.Mutex
	files [][]byte
}

func (f *failAfterSpec) Provision(_ context.Context, spec provider.Spec) (provider.Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, file := range spec.Files {
		f.files = append(f.files, file.Data)
	}
	return provider.Endpoint{}, errors.New("injected: image pull failed")
}

// TestGrantTokensDieWithFailure: every provisioning attempt writes the
// same token (derived, not redrawn, so a retry or a restore never leaves a
// stale copy inside the sandbox), active while the sandbox is pending and
// dead once it failed.
func TestGrantTokensDieWithFailure(t *testing.T) {
	var fp *failAfterSpec
	h := newHarness(t, "postgres", lifecycle.Config{ReapInterval: 200 * time.Millisecond, ProvisionTimeout: 3 * time.Second},
		func(p provider.Provider) provider.Provider { fp = &failAfterSpec{Provider: p}; return fp })
	seedProjects(t, h)
	ctx := context.Background()
	sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small",
		Grants: []store.Grant{{ProjectID: projA, Scopes: []string{"cache:read"}}}})
	if err != nil {
		t.Fatal(err)
	}
	attempts := func() [][]byte {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		return append([][]byte(nil), fp.files...)
	}
	if !waitfor.Try(t, 10*time.Second, func() bool { return len(attempts()) >= 2 }) {
		t.Fatalf("%d provisioning attempts carried a grants file, want 2", len(attempts()))
	}
	files := attempts()
	if !bytes.Equal(files[0], files[1]) {
		t.Fatalf("two attempts wrote different grants files:\n%s\n%s", files[0], files[1])
	}
	var doc lifecycle.GrantsFile
	if err := json.Unmarshal(files[0], &doc); err != nil {
		t.Fatal(err)
	}
	in, err := h.m.Introspect(ctx, doc.Grants[0].Token)
	cur, _ := h.st.Sandbox(ctx, sb.ID)
	if err != nil || (cur.State == store.StatePending && !in.Active) {
		t.Fatalf("while %s: %+v, %v; want active", cur.State, in, err)
	}
	h.waitState(t, sb.ID, store.StateFailed, 15*time.Second)
	if in, err := h.m.Introspect(ctx, doc.Grants[0].Token); err != nil || in.Active {
		t.Fatalf("after failure: %+v, %v; want inactive", in, err)
	}
}

// TestMonthMinutesAndGauges: compute minutes of the month count against
// the soft cap and show in the gauges; exceeding the cap blocks nothing.
func TestMonthMinutesAndGauges(t *testing.T) {
	h := newHarness(t, "postgres", lifecycle.Config{}, nil)
	ctx := context.Background()
	h.acct.MonthlyMinutes = 60
	if err := h.st.InTx(ctx, func(tx store.Tx) error { return tx.UpsertAccount(ctx, h.acct) }); err != nil {
		t.Fatal(err)
	}
	sb := h.create(t, 600)
	ready := h.waitState(t, sb.ID, store.StateReady, 10*time.Second)
	h.clock.Advance(2 * time.Hour)
	now := h.clock.Now().UTC()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if ready.ReadyAt.After(start) {
		start = *ready.ReadyAt
	}
	want := now.Sub(start).Minutes()
	got, err := h.m.MonthMinutes(ctx, h.acct.ID)
	if err != nil || got < want-1 || got > want+1 {
		t.Fatalf("MonthMinutes = %.1f, %v; want about %.1f", got, err, want)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.m.NewGauges())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			vals[key] = m.GetGauge().GetValue()
		}
	}
	over := 0.0
	if want > 60 {
		over = 1
	}
	for key, v := range map[string]float64{
		"sbx_sandboxes,account=acct-1,platform=linux,state=ready": 1,
		"sbx_account_monthly_minutes_soft_cap,account=acct-1":     60,
		"sbx_account_over_soft_cap,account=acct-1":                over,
	} {
		if vals[key] != v {
			t.Errorf("%s = %v, want %v (all: %v)", key, vals[key], v, vals)
		}
	}
	// Over the cap, creates still pass.
	if want > 60 {
		h.create(t, 10)
	}
}
