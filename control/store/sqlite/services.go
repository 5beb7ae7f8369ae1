package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

const serviceCols = `sandbox_id, name, command, args, cwd, env, port, created_at, updated_at`

func scanService(row scanner) (store.Service, error) {
	var s store.Service
	var args, env string
	var created, updated int64
	if err := row.Scan(&s.SandboxID, &s.Name, &s.Command, &args, &s.Cwd, &env, &s.Port, &created, &updated); err != nil {
		return store.Service{}, err
	}
	if err := json.Unmarshal([]byte(args), &s.Args); err != nil {
		return store.Service{}, fmt.Errorf("service %s args: %w", s.Name, err)
	}
	if err := json.Unmarshal([]byte(env), &s.Env); err != nil {
		return store.Service{}, fmt.Errorf("service %s env: %w", s.Name, err)
	}
	s.CreatedAt, s.UpdatedAt = fromMicros(created), fromMicros(updated)
	return s, nil
}

func (q queries) Services(ctx context.Context, sandboxID string) ([]store.Service, error) {
	return list(ctx, q.q, "list services of "+sandboxID, scanService, `SELECT `+serviceCols+` FROM services WHERE sandbox_id = ? ORDER BY name`, sandboxID)
}

func (t *tx) PutService(ctx context.Context, s store.Service) (store.Service, error) {
	args, _ := json.Marshal(nonNilArgs(s.Args))
	env, _ := json.Marshal(nonNilEnv(s.Env))
	now := orNow(s.UpdatedAt)
	got, err := scanService(t.q.QueryRowContext(ctx, `INSERT INTO services (`+serviceCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (sandbox_id, name) DO UPDATE SET command = excluded.command, args = excluded.args,
			cwd = excluded.cwd, env = excluded.env, port = excluded.port, updated_at = excluded.updated_at
		RETURNING `+serviceCols,
		s.SandboxID, s.Name, s.Command, string(args), s.Cwd, string(env), s.Port, orNow(s.CreatedAt), now))
	if err != nil {
		return store.Service{}, fmt.Errorf("put service %s/%s: %w", s.SandboxID, s.Name, err)
	}
	return got, nil
}

func (t *tx) DeleteService(ctx context.Context, sandboxID, name string) error {
	res, err := t.q.ExecContext(ctx, `DELETE FROM services WHERE sandbox_id = ? AND name = ?`, sandboxID, name)
	return oneRow(res, err, fmt.Sprintf("delete service %s/%s", sandboxID, name), store.ErrNotFound)
}

func nonNilArgs(a []string) []string {
	if a == nil {
		return []string{}
	}
	return a
}

func nonNilEnv(e map[string]string) map[string]string {
	if e == nil {
		return map[string]string{}
	}
	return e
}
