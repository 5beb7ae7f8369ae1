package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/redistest"
)

// egressUpstream is a local upstream in the trusted range: "/" answers,
// "/stream" streams a line every 100 ms until its client goes (and says
// when it went), "/git/" serves a repository with git http-backend.
type egressUpstream struct {
	*httptest.Server
	streaming atomic.Bool
	streamEnd chan time.Time
}

func newEgressUpstream(t *testing.T) *egressUpstream {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "through the gateway"},
		{"clone", "-q", "--bare", work, filepath.Join(root, "repo.git")},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitPath, _ := exec.LookPath("git")
	u := &egressUpstream{streamEnd: make(chan time.Time, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "upstream says hi") })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		u.streaming.Store(true)
		defer func() { u.streamEnd <- time.Now() }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		limit := time.After(60 * time.Second)
		for {
			if _, err := fmt.Fprintln(w, "tick"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-limit:
				return
			case <-tick.C:
			}
		}
	})
	mux.Handle("/git/", &cgi.Handler{
		Path: gitPath, Args: []string{"http-backend"}, Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	})
	u.Server = httptest.NewServer(mux)
	t.Cleanup(u.Close)
	return u
}

// TestEgressPolicyEndToEnd drives the real `sbx dev` stack: a sandbox
// whose create narrows its network to an allowlist reaches the allowed
// local upstream (trusted range) with curl and with git clone over HTTP
// through the proxy, and is refused, with the reason in curl's output,
// another loopback port; a `none` sandbox is refused everything; a PATCH
// that removes the upstream closes an open streaming connection within
// 5 s and refuses new ones; the egress log lists each decision and the
// refusals are in the sandbox's events. Every address dialed is on
// loopback.
func TestEgressPolicyEndToEnd(t *testing.T) {
	up := newEgressUpstream(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "should not be reached") }))
	t.Cleanup(other.Close)
	upHost, otherHost := strings.TrimPrefix(up.URL, "http://"), strings.TrimPrefix(other.URL, "http://")

	p := startDev(t, t.TempDir(), "", "--egress-trust", "127.0.0.0/8")
	create := func(network map[string]any) string {
		t.Helper()
		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "network": network}, &sb); code != 201 {
			t.Fatalf("create with network %v: status %d", network, code)
		}
		p.waitStatus(sb.ID, "ready", 2*time.Minute)
		return sb.ID
	}
	exec := func(id, command string) execResult {
		t.Helper()
		var res execResult
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": command, "timeout_seconds": 60}, &res); code != 200 {
			t.Fatalf("exec %q: %d", command, code)
		}
		return res
	}
	// --noproxy '': NO_PROXY names loopback, which here is "the internet".
	curl := func(id, url string) string {
		t.Helper()
		res := exec(id, "curl -sS --max-time 10 --noproxy '' "+url)
		return res.Stdout + res.Stderr
	}

	id := create(map[string]any{"egress": "allowlist", "allow": []string{upHost}})
	var got struct {
		Network struct {
			Egress string   `json:"egress"`
			Allow  []string `json:"allow"`
		} `json:"network"`
	}
	if p.call("GET", "/api/v1/sandboxes/"+id, nil, &got); got.Network.Egress != "allowlist" || len(got.Network.Allow) != 1 {
		t.Errorf("GET shows network %+v, want the allowlist the create asked for", got.Network)
	}
	if out := curl(id, up.URL+"/"); out != "upstream says hi" {
		t.Errorf("curl to the allowed upstream: %q", out)
	}
	res := exec(id, "cd /tmp && rm -rf cloned && NO_PROXY= no_proxy= git clone -q "+up.URL+"/git/repo.git cloned && git -C cloned log --format=%s")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "through the gateway") {
		t.Errorf("git clone through the proxy: %+v", res)
	}
	if out := curl(id, other.URL+"/"); !strings.Contains(out, "is not in this sandbox's allowlist") || !strings.Contains(out, upHost) {
		t.Errorf("curl to a loopback port not in the list: %q, want the refusal naming the allowlist", out)
	}

	none := create(map[string]any{"egress": "none"})
	for _, u := range []string{up.URL + "/", other.URL + "/"} {
		if out := curl(none, u); !strings.Contains(out, "allows no egress") {
			t.Errorf("none sandbox, curl %s: %q, want the refusal", u, out)
		}
	}

	// Widening past the profile is refused at create; dev's profile is
	// open, so a PATCH back to open is allowed but a bad entry is not.
	var prob struct {
		Errors []struct{ Field string } `json:"errors"`
	}
	if code := p.call("PATCH", "/api/v1/sandboxes/"+id, map[string]any{"network": map[string]any{"egress": "allowlist", "allow": []string{"a b"}}}, &prob); code != 422 || len(prob.Errors) == 0 || prob.Errors[0].Field != "network.allow[0]" {
		t.Errorf("PATCH with a bad entry: %d %+v, want 422 naming network.allow[0]", code, prob)
	}

	// An open stream to the upstream, then a PATCH that removes it.
	exec(id, "setsid sh -c \"curl -sN --noproxy '' "+up.URL+"/stream >/tmp/stream.out 2>&1\" </dev/null >/dev/null 2>&1 &")
	for deadline := time.Now().Add(10 * time.Second); !up.streaming.Load(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the streaming curl never reached the upstream")
		}
	}
	time.Sleep(300 * time.Millisecond)
	patched := time.Now()
	if code := p.call("PATCH", "/api/v1/sandboxes/"+id, map[string]any{"network": map[string]any{"egress": "allowlist", "allow": []string{otherHost}}}, nil); code != 200 {
		t.Fatalf("PATCH network: %d", code)
	}
	select {
	case end := <-up.streamEnd:
		t.Logf("the open stream closed %v after the PATCH", end.Sub(patched).Round(time.Millisecond))
		if end.Sub(patched) > 5*time.Second {
			t.Errorf("the stream closed %v after the PATCH, want within 5 s", end.Sub(patched))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the open stream was not closed by the PATCH")
	}
	if out := curl(id, up.URL+"/"); !strings.Contains(out, "is not in this sandbox's allowlist") {
		t.Errorf("curl to the removed upstream after the PATCH: %q", out)
	}
	if out := curl(id, other.URL+"/"); out != "should not be reached" {
		t.Errorf("curl to the newly allowed port: %q", out)
	}

	// The egress log: every decision, newest first.
	type decision struct {
		Host      string  `json:"host"`
		Port      int     `json:"port"`
		Verdict   string  `json:"verdict"`
		Reason    *string `json:"reason"`
		BytesDown int64   `json:"bytes_down"`
	}
	var log struct {
		Decisions []decision `json:"decisions"`
	}
	has := func(f func(decision) bool) bool {
		for _, d := range log.Decisions {
			if f(d) {
				return true
			}
		}
		return false
	}
	upPort, otherPort := portOf(t, up.URL), portOf(t, other.URL)
	checks := map[string]func(decision) bool{
		"allowed curl": func(d decision) bool { return d.Verdict == "allowed" && d.Port == upPort && d.BytesDown > 0 },
		"denied other port": func(d decision) bool {
			return d.Verdict == "denied" && d.Port == otherPort && d.Reason != nil && strings.Contains(*d.Reason, "allowlist")
		},
		"stream closed by the PATCH": func(d decision) bool {
			return d.Verdict == "allowed" && d.Port == upPort && d.Reason != nil && strings.Contains(*d.Reason, "policy change")
		},
		"denied after the PATCH":  func(d decision) bool { return d.Verdict == "denied" && d.Port == upPort },
		"allowed after the PATCH": func(d decision) bool { return d.Verdict == "allowed" && d.Port == otherPort },
	}
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if code := p.call("GET", "/api/v1/sandboxes/"+id+"/egress?limit=200", nil, &log); code != 200 {
			t.Fatalf("GET egress: %d", code)
		}
		missing = missing[:0]
		for name, f := range checks {
			if !has(f) {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("the egress log lacks %v: %+v", missing, log.Decisions)
	}
	// The CLI: the log as a table, and a create with the network flags.
	if out := p.cli("egress", id, "--limit", "200"); !strings.Contains(out, "denied") || !strings.Contains(out, otherHost) {
		t.Errorf("sbx egress: %s", out)
	}
	var viaCLI struct {
		Network struct {
			Egress string   `json:"egress"`
			Allow  []string `json:"allow"`
		} `json:"network"`
	}
	if err := json.Unmarshal([]byte(p.cli("create", "--egress", "allowlist", "--allow", "github.com", "--allow", "*.npmjs.org:443", "-o", "json")), &viaCLI); err != nil ||
		viaCLI.Network.Egress != "allowlist" || strings.Join(viaCLI.Network.Allow, ",") != "github.com,*.npmjs.org:443" {
		t.Errorf("sbx create --egress allowlist --allow ...: %+v %v", viaCLI.Network, err)
	}
	var page struct {
		Decisions  []decision `json:"decisions"`
		NextCursor *string    `json:"next_cursor"`
	}
	if p.call("GET", "/api/v1/sandboxes/"+id+"/egress?limit=1", nil, &page); len(page.Decisions) != 1 || page.NextCursor == nil {
		t.Errorf("a page of one: %+v", page)
	}
	var events struct {
		Events []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"events"`
	}
	p.call("GET", "/api/v1/sandboxes/"+id+"/events", nil, &events)
	denied := false
	for _, e := range events.Events {
		denied = denied || (e.Type == "egress_denied" && strings.Contains(e.Message, fmt.Sprint(otherPort)))
	}
	if !denied {
		t.Errorf("no egress_denied event for the refused port in %+v", events.Events)
	}
}

func portOf(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(u.Port(), &n)
	return n
}

// TestEgressRefusesRedis: with loopback trusted, the stack's Redis stays
// refused, with the reason in curl's output.
func TestEgressRefusesRedis(t *testing.T) {
	r := redistest.Start(t)
	p := startDev(t, t.TempDir(), "", "--egress-trust", "127.0.0.0/8", "--redis-url", r.URL())
	id := createReady(t, p)
	var res execResult
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "curl -sS --max-time 10 --noproxy '' -x \"$http_proxy\" http://" + r.Addr + "/"}, &res); code != 200 {
		t.Fatalf("exec: %d", code)
	}
	if out := res.Stdout + res.Stderr; !strings.Contains(out, "own listeners") {
		t.Errorf("curl to Redis through the gateway: %q, want the refusal's reason", out)
	}
}
