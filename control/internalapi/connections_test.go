package internalapi

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/connections"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// batchStore keeps what ReportConnections wrote; the rest of store.Tx is
// not reached.
type batchStore struct {
	store.Tx
	mu  sync.Mutex
	got []connlog.Batch
}

func (s *batchStore) InTx(_ context.Context, fn func(store.Tx) error) error { return fn(s) }

func (s *batchStore) ReportConnections(_ context.Context, b connlog.Batch, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, b)
	return nil
}

func TestReportConnections(t *testing.T) {
	st := &batchStore{}
	ts := newTestServer(t, Deps{Connections: connections.New(st, connections.Config{MaxLease: 45 * time.Second})})
	auth := "Bearer " + testSecret
	good := `{"reporter":"edge-1","lease_seconds":600,"records":[{"id":"c_1","sandbox_id":"sbx-1","kind":"ssh",` +
		`"client_kind":"vscode","channels":["shell"],"started_at":"2026-01-01T00:00:00Z","bytes_in":1,"bytes_out":2}]}`
	resp, body := do(t, ts, "POST", edgeapi.PathConnections, auth, good)
	if resp.StatusCode != 200 || string(body) != `{"recorded":1}`+"\n" {
		t.Fatalf("report: %d %s", resp.StatusCode, body)
	}
	if len(st.got) != 1 || st.got[0].Reporter != "edge-1" || st.got[0].Lease() != 45*time.Second || st.got[0].Records[0].ClientKind != "vscode" {
		t.Fatalf("stored %+v, want the batch with its lease capped at 45 s", st.got)
	}
	for name, body := range map[string]string{
		"no reporter":  `{"lease_seconds":5,"records":[]}`,
		"no lease":     `{"reporter":"e","records":[]}`,
		"unknown kind": `{"reporter":"e","lease_seconds":5,"records":[{"id":"c_1","sandbox_id":"s","kind":"ftp","started_at":"2026-01-01T00:00:00Z"}]}`,
		"no sandbox":   `{"reporter":"e","lease_seconds":5,"records":[{"id":"c_1","kind":"ssh","started_at":"2026-01-01T00:00:00Z"}]}`,
		"negative":     `{"reporter":"e","lease_seconds":5,"records":[{"id":"c_1","sandbox_id":"s","kind":"ssh","started_at":"2026-01-01T00:00:00Z","bytes_in":-1}]}`,
	} {
		resp, got := do(t, ts, "POST", edgeapi.PathConnections, auth, body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d %s, want 400", name, resp.StatusCode, got)
		}
	}
	resp, body = do(t, ts, "POST", edgeapi.PathConnections, "", good)
	wantProblem(t, resp, body, 401, edgeapi.CodeUnauthorized)
	if len(st.got) != 1 {
		t.Fatalf("refused batches reached the store: %+v", st.got)
	}
}
