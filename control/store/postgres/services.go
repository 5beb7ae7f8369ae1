package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

const serviceCols = `sandbox_id, name, command, args, cwd, env, port, created_at, updated_at`

func scanService(row backend.Row) (store.Service, error) {
	var s store.Service
	var args, env string
	if err := row.Scan(&s.SandboxID, &s.Name, &s.Command, &args, &s.Cwd, &env, &s.Port, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return store.Service{}, err
	}
	if err := json.Unmarshal([]byte(args), &s.Args); err != nil {
		return store.Service{}, fmt.Errorf("service %s args: %w", s.Name, err)
	}
	if err := json.Unmarshal([]byte(env), &s.Env); err != nil {
		return store.Service{}, fmt.Errorf("service %s env: %w", s.Name, err)
	}
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	return s, nil
}

func (q queries) Services(ctx context.Context, sandboxID string) ([]store.Service, error) {
	return list(ctx, q.q, "list services of "+sandboxID, scanService, `SELECT `+serviceCols+` FROM services WHERE sandbox_id = $1 ORDER BY name`, sandboxID)
}

func (t *tx) PutService(ctx context.Context, s store.Service) (store.Service, error) {
	args := []byte("[]")
	if s.Args != nil {
		args, _ = json.Marshal(s.Args)
	}
	env := []byte("{}")
	if s.Env != nil {
		env, _ = json.Marshal(s.Env)
	}
	got, err := scanService(t.q.QueryRow(ctx, `INSERT INTO services (`+serviceCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (sandbox_id, name) DO UPDATE SET command = excluded.command, args = excluded.args,
			cwd = excluded.cwd, env = excluded.env, port = excluded.port, updated_at = excluded.updated_at
		RETURNING `+serviceCols,
		s.SandboxID, s.Name, s.Command, string(args), s.Cwd, string(env), s.Port, orNow(s.CreatedAt), orNow(s.UpdatedAt)))
	if err != nil {
		return store.Service{}, fmt.Errorf("put service %s/%s: %w", s.SandboxID, s.Name, err)
	}
	return got, nil
}

func (t *tx) DeleteService(ctx context.Context, sandboxID, name string) error {
	tag, err := t.q.Exec(ctx, `DELETE FROM services WHERE sandbox_id = $1 AND name = $2`, sandboxID, name)
	return oneRow(tag, err, fmt.Sprintf("delete service %s/%s", sandboxID, name), store.ErrNotFound)
}
