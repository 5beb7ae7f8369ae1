package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/metrictest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// BenchmarkWakeLatency measures, in the sbx dev stack (control, broker and
// local provider in one process, SQLite or Postgres, in-memory activity,
// embedded server), the time from `ssh <id> cat note.txt` starting against a
// suspended sandbox to the first byte of output, split into the
// provider's restore time and the rest, next to the same command against
// a ready sandbox as the baseline. Run with -benchtime=5x.
func BenchmarkWakeLatency(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			dbURL := ""
			if backend == "postgres" {
				dbURL = testdb.Postgres(b)
			}
			benchWake(b, dbURL)
		})
	}
}

func benchWake(b *testing.B, dbURL string) {
	ctx := context.Background()
	dir := b.TempDir()
	d, err := startDevStack(ctx, devConfig{
		DataDir: filepath.Join(dir, "data"), APIAddr: "127.0.0.1:0", SSHAddr: "127.0.0.1:0", PreviewAddr: "127.0.0.1:0",
		DatabaseURL: dbURL, PreviewDomain: "preview.localhost", SSHDrain: time.Second,
		// The benchmark suspends explicitly; the detector stays out of it.
		IdleTimeout: time.Hour, ReapInterval: time.Minute,
	}, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.shutdown() })
	svc, tok, reg := d.svc, d.token, d.svc.Registry
	_, port, _ := net.SplitHostPort(d.edge.SSHAddr().String())

	api := func(method, path, body string, out any) {
		req, _ := http.NewRequest(method, svc.URL()+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		if out != nil {
			_ = json.Unmarshal(raw, out)
		}
	}
	var sb struct{ ID string }
	api("POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small"}`, &sb)
	waitState := func(want store.State) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			cur, err := svc.Store.Sandbox(ctx, sb.ID)
			if err != nil {
				b.Fatal(err)
			}
			if cur.State == want {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("sandbox is %s, want %s", cur.State, want)
			}
		}
	}
	waitState(store.StateReady)
	api("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/note.txt", "hello\n", nil)
	var cred struct {
		PrivateKeyPEM string `json:"private_key_pem"`
	}
	api("POST", "/api/v1/sandboxes/"+sb.ID+"/ssh_tokens", `{"ttl_minutes":60}`, &cred)
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(cred.PrivateKeyPEM), 0o600); err != nil {
		b.Fatal(err)
	}
	args := []string{"-F", "/dev/null", "-i", keyFile, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + filepath.Join(dir, "known_hosts"), "-o", "StrictHostKeyChecking=accept-new",
		"-p", port, sb.ID + "@127.0.0.1", "cat note.txt"}
	// firstByte runs ssh and returns when its first stdout byte arrives.
	firstByte := func() time.Duration {
		start := time.Now()
		cmd := exec.Command("ssh", args...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(out)
		if _, err := r.ReadByte(); err != nil {
			b.Fatalf("ssh produced no output: %v; stderr %s", err, stderr.String())
		}
		d := time.Since(start)
		_, _ = io.Copy(io.Discard, r)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("ssh: %v; stderr %s", err, stderr.String())
		}
		return d
	}
	firstByte() // warm: host key accepted, caches filled

	var baseline, total time.Duration
	restoreBefore := metrictest.Series(b, reg, "sbx_restore_seconds").GetHistogram().GetSampleSum()
	for b.Loop() {
		b.StopTimer()
		baseline += firstByte()
		if err := svc.Life.Suspend(ctx, sb.ID, "benchmark"); err != nil {
			b.Fatal(err)
		}
		waitState(store.StateSuspended)
		b.StartTimer()
		total += firstByte()
	}
	n := float64(b.N)
	restore := (metrictest.Series(b, reg, "sbx_restore_seconds").GetHistogram().GetSampleSum() - restoreBefore) * 1000 / n
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(total), "wake_first_byte_ms")
	b.ReportMetric(restore, "restore_ms")
	b.ReportMetric(ms(total)-restore, "edge_and_control_ms")
	b.ReportMetric(ms(baseline), "ready_first_byte_ms")
	b.ReportMetric(ms(total)-restore-ms(baseline), "wake_overhead_ms")
	b.ReportMetric(0, "ns/op")
}
