package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/control/store/storetest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestEventsCrossReplicas: a stream served by one control replica is
// signalled by an event another replica commits (LISTEN/NOTIFY), and a
// listener whose connection is killed reconnects and signals everyone, so
// nothing committed meanwhile is missed.
func TestEventsCrossReplicas(t *testing.T) {
	url := testdb.Postgres(t)
	ctx := t.Context()
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, url, storetest.Logger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	err := b.InTx(ctx, func(tx store.Tx) error {
		return tx.UpsertAccount(ctx, store.Account{ID: "acct", Name: "acct", SandboxesEnabled: true, ConcurrentLimit: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	ch, cancel := a.SubscribeEvents("sb-x")
	defer cancel()
	quiet := func() {
		for {
			select {
			case <-ch:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	insert := func() {
		t.Helper()
		err := b.InTx(ctx, func(tx store.Tx) error {
			return tx.InsertEvent(ctx, store.Event{SandboxID: "sb-x", AccountID: "acct", Type: "state", State: store.StateReady, At: time.Now()})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no signal %s", what)
		}
	}
	quiet() // the listener's first connect signals once
	insert()
	wait("for an event committed by the other replica")

	// Kill replica a's LISTEN connection from outside, as a network
	// failure or a Postgres restart would.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	quiet()
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d LISTEN connections (%v), want replica a's one", killed, err)
	}
	wait("after the listener reconnected")
	quiet()
	insert()
	wait("for an event after the reconnect")
}
