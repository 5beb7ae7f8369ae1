package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// errDataDirInUse is returned when another sbx dev holds the data dir.
var errDataDirInUse = errors.New("data dir in use")

// lockDataDir takes the data dir's lock: an exclusive flock on
// <dir>/lock, which then holds this process's PID. Two sbx dev on one
// data dir would drive each other's sandboxes and database. The kernel
// drops a flock when its process dies, so the file a killed sbx dev
// leaves behind blocks nobody. release unlocks; the file stays.
func lockDataDir(dir string) (release func() error, err error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock data dir: %w", err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "sbx dev pid " + strconv.Itoa(pid)
			}
		}
		return nil, fmt.Errorf("%w: %s is used by %s; stop it, or give this one another --data-dir", errDataDirInUse, dir, holder)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write data dir lock: %w", err)
	}
	return f.Close, nil // closing the descriptor releases the flock
}

// devJobsInstance names the job client of the sbx dev that holds dir's
// lock (control.Config.JobsInstance). The lock makes it one live process
// at a time, and the name survives restarts, so a restart after a crash
// retries at once the jobs the dead run left running. The host and the
// directory's path keep two sbx dev sharing one Postgres apart.
func devJobsInstance(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("data dir path: %w", err)
	}
	host, _ := os.Hostname()
	if len(host) > 40 {
		host = host[:40]
	}
	sum := sha256.Sum256([]byte(abs))
	return fmt.Sprintf("sbx-dev-%s-%x", host, sum[:8]), nil
}
