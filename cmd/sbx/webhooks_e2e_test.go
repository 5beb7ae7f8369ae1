package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/webhook"
)

// TestWebhooksCLI: against `sbx dev --webhook-trust 127.0.0.1`, `sbx
// webhooks add` registers a receiver on 127.0.0.1 and prints its secret
// once; the receiver gets a sandbox's pending and ready, signed with it;
// `ls` shows no secret, `deliveries` the log, `rm` removes it. A receiver
// on a loopback address the flag does not trust is refused.
func TestWebhooksCLI(t *testing.T) {
	var mu sync.Mutex
	var secret string
	var types []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		h := r.Header
		if err := webhook.Verify(secret, h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature"), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("delivery does not verify: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var msg struct{ Type string }
		_ = json.Unmarshal(body, &msg)
		types = append(types, msg.Type)
	}))
	t.Cleanup(rcv.Close)

	p := startDev(t, t.TempDir(), "", "--webhook-trust", "127.0.0.1")
	out := p.cli("webhooks", "add", rcv.URL+"/hook", "--events", "sandbox.pending,sandbox.ready")
	m := regexp.MustCompile(`id:\s+(wh_\S+)\nsecret:\s+(whsec_\S+)\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sbx webhooks add printed %q, want the id and the secret", out)
	}
	mu.Lock()
	secret = m[2]
	mu.Unlock()

	if ls := p.cli("webhooks", "ls"); !strings.Contains(ls, m[1]) || !strings.Contains(ls, "sandbox.pending,sandbox.ready") || strings.Contains(ls, "whsec_") {
		t.Fatalf("sbx webhooks ls:\n%s\nwant the webhook and no secret", ls)
	}
	for _, c := range []struct{ url, says string }{
		{strings.Replace(rcv.URL, "127.0.0.1", "127.0.0.2", 1), "loopback"},
		// Trusted loopback, but sbx dev's own API.
		{p.API + "/api/v1/sandboxes", "sbx dev's own REST API"},
	} {
		cmd := exec.Command(sbxBinary(t), "webhooks", "add", c.url)
		cmd.Env = append(cmd.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(p.DataDir, "cli-config"))
		if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), c.says) {
			t.Fatalf("sbx webhooks add %s: %v %s, want a refusal saying %q", c.url, err, b, c.says)
		}
	}

	var sb sbView
	if err := json.Unmarshal([]byte(p.cli("create", "-o", "json")), &sb); err != nil || sb.Status != "ready" {
		t.Fatalf("sbx create: %+v %v", sb, err)
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		got := slices.Clone(types)
		mu.Unlock()
		if slices.Equal(got, []string{"sandbox.pending", "sandbox.ready"}) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("receiver got %v, want pending then ready", got)
		}
	}
	log := p.cli("webhooks", "deliveries", m[1])
	if !regexp.MustCompile(`sandbox.ready\s+` + sb.ID + `\s+delivered\s+1\s+200`).MatchString(log) {
		t.Fatalf("sbx webhooks deliveries:\n%s\nwant sandbox.ready delivered on its first attempt with 200", log)
	}
	p.cli("webhooks", "rm", m[1])
	if ls := p.cli("webhooks", "ls"); strings.Contains(ls, m[1]) {
		t.Fatalf("sbx webhooks ls after rm:\n%s", ls)
	}
}
