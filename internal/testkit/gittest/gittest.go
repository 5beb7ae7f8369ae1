// Package gittest serves git repositories over HTTP on loopback for
// tests: the machine's `git http-backend` behind net/http/cgi, with the
// repositories under /private/ behind HTTP basic auth.
package gittest

import (
	"crypto/subtle"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Server is a git smart-HTTP server. Repositories live under Root as
// bare repositories: Root/public/<name>.git and Root/private/<name>.git.
type Server struct {
	URL  string // http://127.0.0.1:<port>
	Root string

	token string

	mu   sync.Mutex // guards auth
	auth []string   // Authorization headers seen, in order
}

// Start serves Root (a fresh directory) until the test ends. Requests for
// /private/... need basic auth with token as the password (any user).
func Start(t testing.TB, token string) *Server {
	t.Helper()
	backend := filepath.Join(execPath(t), "git-http-backend")
	s := &Server{Root: t.TempDir(), token: token}
	h := &cgi.Handler{
		Path: backend,
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1"},
		// http-backend's complaints (a repository that is not there)
		// are expected by the tests that cause them.
		Stderr: io.Discard,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/private/") {
			_, pass, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(pass), []byte(s.token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AuthHeaders returns the Authorization headers of every request so far
// ("" for none).
func (s *Server) AuthHeaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// Commit is one commit of a branch: files written (relative paths) on top
// of the previous commit.
type Commit map[string]string

// Repo describes a repository to create.
type Repo struct {
	// Path is where it is served, e.g. "public/app.git".
	Path string
	// Branches maps a branch name to its commits, oldest first; each
	// branch starts from the first commit of DefaultBranch.
	Branches map[string][]Commit
	// DefaultBranch is HEAD's branch (and is created first).
	DefaultBranch string
	// Tags maps a tag name to a branch whose tip it names.
	Tags map[string]string
}

// Create builds r in a work tree and publishes it as a bare repository,
// returning its URL.
func (s *Server) Create(t testing.TB, r Repo) string {
	t.Helper()
	work := t.TempDir()
	git(t, work, "init", "-q", "-b", r.DefaultBranch)
	git(t, work, "config", "user.email", "test@example.com")
	git(t, work, "config", "user.name", "gittest")
	commit := func(c Commit, msg string) {
		for name, body := range c {
			p := filepath.Join(work, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		git(t, work, "add", "-A")
		git(t, work, "commit", "-q", "-m", msg)
	}
	base := r.Branches[r.DefaultBranch]
	for i, c := range base {
		commit(c, r.DefaultBranch+" commit")
		if i == 0 {
			git(t, work, "tag", "sbx-gittest-base")
		}
	}
	for name, commits := range r.Branches {
		if name == r.DefaultBranch {
			continue
		}
		git(t, work, "checkout", "-q", "-b", name, "sbx-gittest-base")
		for _, c := range commits {
			commit(c, name+" commit")
		}
	}
	git(t, work, "checkout", "-q", r.DefaultBranch)
	git(t, work, "tag", "-d", "sbx-gittest-base")
	for tag, branch := range r.Tags {
		git(t, work, "tag", "-a", "-m", "tag "+tag, tag, branch)
	}
	dst := filepath.Join(s.Root, filepath.FromSlash(r.Path))
	git(t, "", "clone", "-q", "--bare", work, dst)
	return s.URL + "/" + r.Path
}

// Git runs git in dir and returns its trimmed output, failing the test on
// an error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return git(t, dir, args...)
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	// The machine's own git config must not change the fixtures.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func execPath(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (apt-get install git): the clone tests need a real git")
	}
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	return strings.TrimSpace(string(out))
}
