package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgServer is the fleet's Postgres: a private cluster (initdb into the
// fleet's folder, on a free port) that the fault test may restart, or,
// where no private cluster can be made, a fresh database on the
// machine's shared server, which is never restarted.
type pgServer struct {
	url     string
	private *proc // nil on the shared server
	admin   string
	dbName  string
}

// sharedPostgres is the machine's server the tests use.
const sharedPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// startPostgres makes the fleet's database; private asks for a cluster
// of its own. Why a private one could not be made is returned in note.
func startPostgres(ctx context.Context, dir string, private bool) (pg *pgServer, note string, err error) {
	name := fmt.Sprintf("sbx_fleet_%d", time.Now().UnixNano())
	if private {
		pg, err = privatePostgres(ctx, dir)
		if err == nil {
			return pg, "", nil
		}
		note = err.Error()
	} else {
		note = "not asked for"
	}
	pg = &pgServer{admin: sharedPostgres, dbName: name}
	if err := pg.createDB(ctx); err != nil {
		return nil, note, err
	}
	return pg, note, nil
}

// privatePostgres runs initdb and postgres from the machine's PostgreSQL
// as the postgres OS user (the server refuses root).
func privatePostgres(ctx context.Context, dir string) (*pgServer, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return nil, fmt.Errorf("no /usr/lib/postgresql/*/bin/initdb")
	}
	binDir := filepath.Dir(bins[len(bins)-1])
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("no postgres OS user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	data := filepath.Join(dir, "pg")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chown(data, uid, gid); err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	initdb.Dir = data
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &proc{name: "postgres", bin: filepath.Join(binDir, "postgres"), log: filepath.Join(dir, "postgres.log"),
		args: []string{"-D", data, "-p", strconv.Itoa(portOf(addr)), "-k", data, "-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off", "-c", "max_connections=300"},
		uid: uint32(uid), gid: uint32(gid)}
	if err := os.WriteFile(p.log, nil, 0o666); err != nil {
		return nil, err
	}
	_ = os.Chown(p.log, uid, gid)
	if err := p.start(); err != nil {
		return nil, err
	}
	pg := &pgServer{private: p, admin: fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr), dbName: "sbx_fleet"}
	if err := pg.waitUp(ctx, 30*time.Second); err != nil {
		p.kill(false)
		return nil, err
	}
	if err := pg.createDB(ctx); err != nil {
		p.kill(false)
		return nil, err
	}
	return pg, nil
}

func (pg *pgServer) createDB(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pg.admin)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pg.dbName); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	u := pg.admin[:len(pg.admin)-len("/postgres?sslmode=disable")]
	pg.url = u + "/" + pg.dbName + "?sslmode=disable"
	return nil
}

// waitUp waits until the server answers a query.
func (pg *pgServer) waitUp(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, pg.admin)
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not up after %v: %w", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restart is `pg_ctl restart -m fast`: SIGINT (fast shutdown, every
// session cut), then the server again on the same folder and port.
func (pg *pgServer) restart(ctx context.Context, down time.Duration) error {
	if pg.private == nil {
		return fmt.Errorf("the shared Postgres is never restarted")
	}
	_ = pg.private.signal(syscall.SIGINT)
	pg.private.waitExit(30 * time.Second)
	time.Sleep(down)
	if err := pg.private.start(); err != nil {
		return err
	}
	return pg.waitUp(ctx, 30*time.Second)
}

// close stops a private server, or drops the database on the shared one.
func (pg *pgServer) close() {
	if pg.private != nil {
		_ = pg.private.signal(syscall.SIGINT)
		pg.private.waitExit(30 * time.Second)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, pg.admin); err == nil {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pg.dbName+" WITH (FORCE)")
		conn.Close(context.Background())
	}
}

// waitExit waits for a process that was signalled to end; past limit it
// is killed.
func (p *proc) waitExit(limit time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// redisServer is the fleet's own redis-server on a free port, with no
// persistence: a restart brings it back empty.
type redisServer struct {
	*proc
	addr string
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not installed (apt-get install redis-server): %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r := &redisServer{addr: addr, proc: &proc{name: "redis", bin: bin, log: filepath.Join(dir, "redis.log"),
		args: []string{"--port", strconv.Itoa(portOf(addr)), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}}}
	return r, r.up(ctx)
}

func (r *redisServer) up(ctx context.Context) error {
	if err := r.start(); err != nil {
		return err
	}
	return r.waitTCP(ctx, r.addr, 10*time.Second)
}

func (r *redisServer) url() string { return "redis://" + r.addr + "/0" }
