package controlclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sbxedge/sbx/edge/sshbroker"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"

// fakeControl answers the SSH authorize endpoint with a problem code per
// fingerprint (empty: accept), checking the bearer like control does.
func fakeControl(t *testing.T, codes map[string]string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+edgeapi.PathSSHAuthorize, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			problem.Write(w, r, problem.New(http.StatusUnauthorized, edgeapi.CodeUnauthorized, "no"))
			return
		}
		var req edgeapi.SSHAuthorizeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode: %v", err)
		}
		switch code := codes[req.Fingerprint]; code {
		case "":
			_ = json.NewEncoder(w).Encode(edgeapi.SSHAuthorizeResponse{SandboxID: req.Username, Addr: "127.0.0.1:1", User: "u",
				HostKey: "ssh-ed25519 AAAA", ExpiresAt: time.Unix(2000000000, 0).UTC()})
		case "html502":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		case "slow":
			<-r.Context().Done()
		default:
			problem.Write(w, r, problem.New(http.StatusForbidden, code, "refused"))
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestAuthorizeMapsAnswers(t *testing.T) {
	t.Parallel()
	ts := fakeControl(t, map[string]string{
		"fp-unknown": edgeapi.CodeSSHUnknownKey,
		"fp-expired": edgeapi.CodeSSHExpired,
		"fp-ended":   edgeapi.CodeSSHSandboxEnded,
		"fp-other":   edgeapi.CodeSSHWrongSandbox,
		"fp-nosb":    edgeapi.CodeSSHUnknownSandbox,
		"fp-waking":  edgeapi.CodeSSHNotReady,
		"fp-html":    "html502",
		"fp-weird":   "some_future_code",
	})
	c, err := New(Config{BaseURL: ts.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for fp, want := range map[string]error{
		"fp-unknown": sshbroker.ErrUnknownKey,
		"fp-expired": sshbroker.ErrExpired,
		"fp-ended":   sshbroker.ErrSandboxEnded,
		"fp-other":   sshbroker.ErrWrongSandbox,
		"fp-nosb":    sshbroker.ErrUnknownSandbox,
		"fp-waking":  sshbroker.ErrNotReady,
	} {
		_, err := c.Authorize(context.Background(), "sb1", fp)
		if !errors.Is(err, want) {
			t.Errorf("Authorize(%s) = %v, want %v", fp, err, want)
		}
	}
	for _, fp := range []string{"fp-html", "fp-weird"} {
		_, err := c.Authorize(context.Background(), "sb1", fp)
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Authorize(%s) = %v, want *Error", fp, err)
		}
		for _, s := range []error{sshbroker.ErrUnknownKey, sshbroker.ErrExpired, sshbroker.ErrNotReady} {
			if errors.Is(err, s) {
				t.Errorf("Authorize(%s) = %v, must not be a refusal sentinel", fp, err)
			}
		}
	}
	r, err := c.Authorize(context.Background(), "sb1", "fp-good")
	if err != nil {
		t.Fatal(err)
	}
	if r.SandboxID != "sb1" || r.Addr != "127.0.0.1:1" || r.User != "u" || !r.ExpiresAt.Equal(time.Unix(2000000000, 0)) {
		t.Fatalf("route %+v", r)
	}
}

func TestWrongSecretAndTimeout(t *testing.T) {
	t.Parallel()
	ts := fakeControl(t, map[string]string{"fp-slow": "slow"})
	c, err := New(Config{BaseURL: ts.URL, Secret: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Authorize(context.Background(), "sb1", "fp")
	if Code(err) != edgeapi.CodeUnauthorized || errors.Is(err, sshbroker.ErrUnknownKey) {
		t.Fatalf("wrong secret: %v, want an unauthorized fault, not a refusal", err)
	}
	c, err = New(Config{BaseURL: ts.URL, Secret: secret, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Authorize(context.Background(), "sb1", "fp-slow")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow control: %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"no url":     {Secret: "x"},
		"bad scheme": {BaseURL: "ftp://x", Secret: "x"},
		"no secret":  {BaseURL: "http://x"},
		"negative":   {BaseURL: "http://x", Secret: "x", Timeout: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}
