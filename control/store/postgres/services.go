package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/control/store"
)

const serviceCols = `sandbox_id, name, command, args, cwd, env, port, created_at, updated_at`

func scanService(row pgx.Row) (store.Service, error) {
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
	rows, err := q.q.Query(ctx, `SELECT `+serviceCols+` FROM services WHERE sandbox_id = $1 ORDER BY name`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list services of %s: %w", sandboxID, err)
	}
	ss, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Service, error) { return scanService(r) })
	if err != nil {
		return nil, fmt.Errorf("list services of %s: %w", sandboxID, err)
	}
	return ss, nil
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
	if err != nil {
		return fmt.Errorf("delete service %s/%s: %w", sandboxID, name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete service %s/%s: %w", sandboxID, name, store.ErrNotFound)
	}
	return nil
}
