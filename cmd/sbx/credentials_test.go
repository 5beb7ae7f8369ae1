package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Tokens other than fakeToken, for a second and third API.
const (
	fakeTokenA = "sbx_at_FAKE0A0SECRET0TOKEN0MATERIAL0xyz"
	fakeTokenB = "sbx_at_FAKE0B0SECRET0TOKEN0MATERIAL0xyz"
)

// credEnv isolates the CLI like cliEnv, with no token anywhere: no
// SBX_TOKEN, no config file, no sbx dev token file, no SBX_API.
func credEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("SBX_CONFIG_DIR", filepath.Join(dir, "config"))
	t.Setenv("SBX_DATA_DIR", filepath.Join(dir, "data"))
	t.Setenv("SBX_API", "")
	t.Setenv("SBX_TOKEN", "")
}

// startFakeAPI serves a fakeAPI that takes token on a real loopback
// listener.
func startFakeAPI(t *testing.T, token string) (*fakeAPI, string) {
	t.Helper()
	f := &fakeAPI{token: token}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// authorized lists the Authorization headers f received, non-empty ones
// only.
func (f *fakeAPI) authorized() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	for _, r := range f.reqs {
		if r.Auth != "" {
			got = append(got, r.Auth)
		}
	}
	return got
}

// login runs sbx login --api api with token on stdin and fails the test
// unless it is saved.
func login(t *testing.T, api, token string) {
	t.Helper()
	code, out, errOut := runCLI(t, token+"\n", "login", "--api", api)
	if code != 0 || !strings.Contains(errOut, "token saved") {
		t.Fatalf("sbx login --api %s: exit %d, stderr %q", api, code, errOut)
	}
	assertNoToken(t, out+errOut)
}

func assertNoToken(t *testing.T, output string) {
	t.Helper()
	for _, tok := range []string{fakeToken, fakeTokenA, fakeTokenB, "FAKE0"} {
		if strings.Contains(output, tok) {
			t.Errorf("output shows token material %q:\n%s", tok, output)
		}
	}
}

func TestAPIKey(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", true},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080", true},
		{"HTTP://Sbx.Example.COM:80", "http://sbx.example.com", true},
		{"https://sbx.example.com:443/", "https://sbx.example.com", true},
		{"https://sbx.example.com:8443/api/", "https://sbx.example.com:8443/api", true},
		{"https://user:pw@sbx.example.com?x=1#f", "https://sbx.example.com", true},
		{"http://[::1]:8080", "http://[::1]:8080", true},
		{"http://[::1]", "http://[::1]", true},
		{"ftp://sbx.example.com", "", false},
		{"127.0.0.1:8080", "", false},
		{"http://", "", false},
		{"http://%zz", "", false},
	} {
		got, ok := apiKey(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("apiKey(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSavedTokenStaysWithItsAPI: a token sbx login saved for API A is
// sent to A, however its URL is spelled, and never to B, named with --api
// or SBX_API, though B would accept it; the error names B, the API the
// token is for and the command that fixes it, and no token.
func TestSavedTokenStaysWithItsAPI(t *testing.T) {
	credEnv(t)
	a, aURL := startFakeAPI(t, fakeToken)
	b, bURL := startFakeAPI(t, fakeToken)
	login(t, aURL, fakeToken)

	for _, spelled := range []string{aURL, aURL + "/", strings.Replace(aURL, "http://", "HTTP://", 1)} {
		code, out, errOut := runCLI(t, "", "--api", spelled, "get", fakeID)
		if code != 0 || a.last(t).Auth != "Bearer "+fakeToken {
			t.Errorf("sbx --api %s get: exit %d (stderr %q), A got %q; want 0 and the token", spelled, code, errOut, a.last(t).Auth)
		}
		assertNoToken(t, out+errOut)
	}

	for _, tc := range []struct {
		name, env string
		args      []string
	}{
		{"--api", "", []string{"--api", bURL, "get", fakeID}},
		{"SBX_API", bURL, []string{"get", fakeID}},
		{"SBX_API and list", bURL, []string{"list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SBX_API", tc.env)
			code, out, errOut := runCLI(t, "", tc.args...)
			if got := b.authorized(); len(got) > 0 {
				t.Fatalf("sbx %v: B received Authorization %d times; want never", tc.args, len(got))
			}
			for _, want := range []string{"no API token for " + bURL, "`sbx login --api " + bURL + "`", "saved tokens for " + aURL + " only", "SBX_TOKEN"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("sbx %v: stderr %q lacks %q", tc.args, errOut, want)
				}
			}
			if code != 4 || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("sbx %v: exit %d, stderr %q; want 4 and one line", tc.args, code, errOut)
			}
			assertNoToken(t, out+errOut)
		})
	}
}

// TestExplicitTokenGoesToNamedAPI: SBX_TOKEN is the caller's choice for
// this call, so it goes to the API named, whatever was saved for others;
// the saved token does not go there with it.
func TestExplicitTokenGoesToNamedAPI(t *testing.T) {
	credEnv(t)
	_, aURL := startFakeAPI(t, fakeTokenA)
	b, bURL := startFakeAPI(t, fakeToken)
	login(t, aURL, fakeTokenA)

	t.Setenv("SBX_TOKEN", fakeToken)
	for _, args := range [][]string{{"--api", bURL, "get", fakeID}, {"get", fakeID}} {
		t.Setenv("SBX_API", "")
		if args[0] != "--api" {
			t.Setenv("SBX_API", bURL)
		}
		code, out, errOut := runCLI(t, "", args...)
		if code != 0 || b.last(t).Auth != "Bearer "+fakeToken {
			t.Errorf("SBX_TOKEN=... sbx %v: exit %d (stderr %q), B got %q; want 0 and SBX_TOKEN", args, code, errOut, b.last(t).Auth)
		}
		assertNoToken(t, out+errOut)
	}
	for _, got := range b.authorized() {
		if got != "Bearer "+fakeToken {
			t.Errorf("B received a token other than SBX_TOKEN")
		}
	}
}

// TestLoginKeepsATokenPerAPI: sbx login for two APIs keeps both, each
// used with its API only; the last --api is the default; logout removes
// one API's token only.
func TestLoginKeepsATokenPerAPI(t *testing.T) {
	credEnv(t)
	a, aURL := startFakeAPI(t, fakeTokenA)
	b, bURL := startFakeAPI(t, fakeTokenB)
	login(t, aURL, fakeTokenA)
	login(t, bURL, fakeTokenB)

	cfg, err := readConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tokens[aURL] != fakeTokenA || cfg.Tokens[bURL] != fakeTokenB || len(cfg.Tokens) != 2 || cfg.API != bURL {
		t.Fatalf("config after two logins: %d tokens, A's saved %v, B's saved %v, default %s; want both, B the default",
			len(cfg.Tokens), cfg.Tokens[aURL] == fakeTokenA, cfg.Tokens[bURL] == fakeTokenB, cfg.API)
	}
	if st, err := os.Stat(configFile()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, mode %v; want 0600", err, st)
	}
	for _, tc := range []struct {
		args []string
		api  *fakeAPI
		want string
	}{
		{[]string{"--api", aURL, "get", fakeID}, a, fakeTokenA},
		{[]string{"--api", bURL, "get", fakeID}, b, fakeTokenB},
		{[]string{"get", fakeID}, b, fakeTokenB}, // the default API
	} {
		code, out, errOut := runCLI(t, "", tc.args...)
		if code != 0 || tc.api.last(t).Auth != "Bearer "+tc.want {
			t.Errorf("sbx %v: exit %d (stderr %q); want 0 and that API's own token", tc.args, code, errOut)
		}
		assertNoToken(t, out+errOut)
	}

	if code, _, errOut := runCLI(t, "", "logout", "--api", aURL); code != 0 || !strings.Contains(errOut, "token for "+aURL+" removed") {
		t.Fatalf("sbx logout --api A: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "--api", aURL, "get", fakeID); code != 4 || !strings.Contains(errOut, "sbx login --api "+aURL) {
		t.Errorf("sbx get on A after its logout: exit %d, stderr %q; want 4 and how to log in", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "--api", bURL, "get", fakeID); code != 0 || b.last(t).Auth != "Bearer "+fakeTokenB {
		t.Errorf("sbx get on B after A's logout: exit %d, stderr %q; want B's token kept", code, errOut)
	}
}

// TestLegacyConfigTokenKeepsItsAPI: a config file of an older sbx (one
// token, and the API it was saved with) keeps working for that API only,
// and survives a login for another API; one saved without an API is bound
// to the default API, the only one that file pointed it at.
func TestLegacyConfigTokenKeepsItsAPI(t *testing.T) {
	credEnv(t)
	a, aURL := startFakeAPI(t, fakeTokenA)
	b, bURL := startFakeAPI(t, fakeTokenB)
	writeRawConfig(t, map[string]string{"api": aURL + "/", "token": fakeTokenA})

	if code, _, errOut := runCLI(t, "", "get", fakeID); code != 0 || a.last(t).Auth != "Bearer "+fakeTokenA {
		t.Fatalf("sbx get with an old config: exit %d, stderr %q; want its API with its token", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "--api", bURL, "get", fakeID); code != 4 || len(b.authorized()) > 0 {
		t.Fatalf("sbx --api B get with an old config for A: exit %d, stderr %q, B got %d tokens; want 4 and none", code, errOut, len(b.authorized()))
	}
	login(t, bURL, fakeTokenB)
	raw, err := os.ReadFile(configFile())
	if err != nil {
		t.Fatal(err)
	}
	var onDisk map[string]any
	if err := json.Unmarshal(raw, &onDisk); err != nil {
		t.Fatal(err)
	}
	if _, old := onDisk["token"]; old {
		t.Errorf("config still has the old single token field after a login")
	}
	if code, _, errOut := runCLI(t, "", "--api", aURL, "get", fakeID); code != 0 || a.last(t).Auth != "Bearer "+fakeTokenA {
		t.Errorf("sbx --api A get after a login for B: exit %d, stderr %q; want the old token kept for A", code, errOut)
	}

	writeRawConfig(t, map[string]string{"token": fakeTokenA})
	cfg, err := readConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tokens) != 1 || cfg.Tokens[defaultAPI] != fakeTokenA {
		t.Errorf("old config without an API: tokens for %v; want the token bound to %s alone", keys(cfg.Tokens), defaultAPI)
	}
}

func writeRawConfig(t *testing.T, v map[string]string) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(configDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configFile(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestDevTokenOnlyToItsAPI: a real sbx dev records the API it serves
// beside its token file; the CLI sends that token there and nowhere else,
// and a token file with no recorded API (an older sbx dev's) nowhere.
func TestDevTokenOnlyToItsAPI(t *testing.T) {
	sbxBinary(t) // built before credEnv moves HOME, and with it Go's caches
	credEnv(t)
	dataDir := filepath.Join(t.TempDir(), "dev")
	t.Setenv("SBX_DATA_DIR", dataDir)
	p := startDev(t, dataDir, "", "--metrics-addr", "")
	b, bURL := startFakeAPI(t, p.Token)

	if rec, err := os.ReadFile(devAPIFile(dataDir)); err != nil || strings.TrimSpace(string(rec)) != p.API {
		t.Fatalf("sbx dev recorded %q (%v); want %s", rec, err, p.API)
	}
	t.Setenv("SBX_API", p.API)
	if code, out, errOut := runCLI(t, "", "list"); code != 0 {
		t.Fatalf("sbx list on the dev API: exit %d, stderr %q", code, errOut)
	} else {
		assertNoToken(t, out+errOut)
	}

	t.Setenv("SBX_API", bURL)
	code, out, errOut := runCLI(t, "", "list")
	if got := b.authorized(); len(got) > 0 {
		t.Fatalf("sbx list on another API: it received Authorization %d times; want never", len(got))
	}
	for _, want := range []string{"no API token for " + bURL, "sbx dev token (" + devTokenFile(dataDir) + ") is for " + p.API + " only", "sbx login --api " + bURL} {
		if code != 4 || !strings.Contains(errOut, want) {
			t.Errorf("sbx list on another API: exit %d, stderr %q; want 4 and %q", code, errOut, want)
		}
	}
	if strings.Contains(out+errOut, p.Token) {
		t.Errorf("output shows the dev token")
	}

	// A token file an older sbx dev wrote, with no API recorded.
	p.stop()
	if err := os.Remove(devAPIFile(dataDir)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SBX_API", bURL)
	if code, _, errOut := runCLI(t, "", "list"); code != 4 || len(b.authorized()) > 0 || !strings.Contains(errOut, "restart sbx dev") {
		t.Errorf("a dev token with no API recorded: exit %d, stderr %q, B got %d tokens; want 4, none, and restart sbx dev", code, errOut, len(b.authorized()))
	}
}
