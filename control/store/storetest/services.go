package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testServices(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedAccounts(t, s, "a")
	insertSandboxes(t, s, sandbox("a", "sb-sv", t0), sandbox("a", "sb-sv2", t0))
	put := func(sv store.Service) store.Service {
		t.Helper()
		var got store.Service
		if err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			got, err = tx.PutService(ctx, sv)
			return err
		}); err != nil {
			t.Fatalf("PutService(%+v): %v", sv, err)
		}
		return got
	}
	web := store.Service{
		SandboxID: "sb-sv", Name: "web", Command: "npm", Args: []string{"run", "dev"}, Cwd: "app",
		Env: map[string]string{"NODE_ENV": "development"}, Port: 5173, CreatedAt: t0, UpdatedAt: t0,
	}
	if got := put(web); !reflect.DeepEqual(got, web) {
		t.Fatalf("PutService returned %+v, want %+v", got, web)
	}
	db := put(store.Service{SandboxID: "sb-sv", Name: "db", Command: "redis-server --port 6400", CreatedAt: t0, UpdatedAt: t0})
	if len(db.Args) != 0 || len(db.Env) != 0 || db.Port != 0 {
		t.Errorf("service without args, env or port read back as %+v", db)
	}
	put(store.Service{SandboxID: "sb-sv2", Name: "web", Command: "other", CreatedAt: t0, UpdatedAt: t0})

	// Declaring again replaces everything but the creation time.
	later := t0.Add(24 * time.Hour)
	web2 := store.Service{SandboxID: "sb-sv", Name: "web", Command: "python3", Args: []string{"-m", "http.server"}, Port: 8000, CreatedAt: later, UpdatedAt: later}
	got := put(web2)
	if !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(later) || got.Command != "python3" || got.Port != 8000 || got.Cwd != "" || len(got.Env) != 0 {
		t.Errorf("re-declared service = %+v; want the new declaration with CreatedAt %s", got, t0)
	}
	list, err := s.Services(ctx, "sb-sv")
	if err != nil || len(list) != 2 || list[0].Name != "db" || list[1].Name != "web" {
		t.Fatalf("Services = %+v, %v; want db and web, by name", list, err)
	}
	if err := s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteService(ctx, "sb-sv", "db") }); err != nil {
		t.Fatal(err)
	}
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteService(ctx, "sb-sv", "db") })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting a deleted service: %v, want ErrNotFound", err)
	}
	if list, _ := s.Services(ctx, "sb-sv"); len(list) != 1 || list[0].Name != "web" {
		t.Errorf("after delete: %+v", list)
	}
}
