package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/sbxedge/sbx/control/store/internal/jobqueue"
	"github.com/sbxedge/sbx/control/store/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrate applies pending migrations in one IMMEDIATE transaction: the
// write lock it takes at BEGIN keeps a second process from applying them
// too, and a failed step leaves the schema untouched.
func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	ms, err := sqlmigrate.Load(migrationFS, "migrations")
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin migrations: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	rows, err := tx.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("read schema_migrations: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	var done []string
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, CAST(unixepoch('subsec') * 1000000 AS INTEGER))",
			m.Version, m.Name); err != nil {
			return fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		done = append(done, m.Name)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit migrations: %w", err)
	}
	for _, name := range done {
		logger.Info("applied migration", "migration", name)
	}

	return jobqueue.Migrate(ctx, riversqlite.New(db), logger)
}
