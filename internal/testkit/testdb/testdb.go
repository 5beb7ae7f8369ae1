// Package testdb gives tests a fresh, throwaway database on the real
// Postgres server, so suites can run in parallel without sharing state.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server tests use unless SBX_TEST_DATABASE_URL is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the server URL tests create databases on.
func AdminURL() string {
	if u := os.Getenv("SBX_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Postgres creates an empty database sbx_test_<random> and returns its URL.
// The database is dropped (WITH (FORCE), so leftover connections do not
// block it) when the test ends. An unreachable server fails the test: a
// skipped store test would hide a broken setup.
func Postgres(t testing.TB) string {
	t.Helper()
	admin := AdminURL()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testdb: random name: %v", err)
	}
	name := "sbx_test_" + hex.EncodeToString(b[:])

	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("testdb: parse %s: %v", redact(admin), err)
	}
	if err := exec(admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testdb: Postgres at %s is required for this test (set SBX_TEST_DATABASE_URL to use another server): create database: %v",
			redact(admin), err)
	}
	t.Cleanup(func() {
		if err := exec(admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func exec(admin, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// redact hides a password in u for failure messages.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparseable url)"
	}
	return p.Redacted()
}
