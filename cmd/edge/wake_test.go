package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestEdgeWakesThroughControl: in the split deployment an SSH connection
// to a suspended sandbox lands on cmd/edge, which asks control's internal
// API to wake it (POST /internal/v1/sandboxes/wake), tells the user, waits
// and relays.
func TestEdgeWakesThroughControl(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := s.readySandbox(t)
	key := s.key(t, id)
	if err := s.svc.Life.Suspend(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var sb struct{ Status string }
		s.call(t, "GET", "/api/v1/sandboxes/"+id, nil, &sb)
		if sb.Status == "suspended" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s, want suspended", id, sb.Status)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := s.ssh(ctx, key, id, "echo awake")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stdout.String() != "awake\n" {
		t.Fatalf("ssh: %v stdout %q stderr %q", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "sbx: waking sandbox "+id) {
		t.Fatalf("stderr %q does not say the sandbox is waking", stderr.String())
	}
	var sb struct{ Status string }
	s.call(t, "GET", "/api/v1/sandboxes/"+id, nil, &sb)
	if sb.Status != "ready" {
		t.Fatalf("after the wake the sandbox is %s, want ready", sb.Status)
	}
}
