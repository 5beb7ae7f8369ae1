package lifecycle

import (
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// A sandbox may be created with a repository, which provisioning clones
// into the workspace before the sandbox is ready. The rules:
//
//   - url is https, http or git (git:// has no authentication); file://,
//     local paths, ssh and scp-like addresses are refused: the clone runs
//     before the sandbox holds any SSH key, and a path names nothing a
//     caller should reach through us. Credentials never ride in the URL.
//   - a token is sent over https only, or over http to a loopback host
//     (a local mirror, a test). It is kept in this process's memory from
//     the create until the clone ends, never written down (the provision
//     job is inserted on a queue only this process works, see repoQueue),
//     and reaches git on stdin, as a credential helper's answer: in no
//     command line, no file, and not in the workspace's .git/config.
//   - a failed clone fails the sandbox with an end reason that says why
//     (ReasonRepo*); events of type "repo_clone" report its start and end.

// RepoSpec is the repository a create asks for.
type RepoSpec struct {
	// URL is what git clones: https://, http:// or git://.
	URL string `json:"url"`
	// Ref is a branch, a tag, or a full commit ID; empty is the remote's
	// default branch.
	Ref string `json:"ref,omitempty"`
	// Depth truncates history to that many commits; zero is all of it.
	Depth int `json:"depth,omitempty"`
	// Token authenticates to the repository's host (HTTP basic, user
	// x-access-token). Used at provisioning only, never stored or returned.
	Token string `json:"token,omitempty"`
}

// RepoArgs is the repository as the provision job carries it: everything
// but the token, which job arguments (persisted by the queue) never hold.
type RepoArgs struct {
	URL   string `json:"url"`
	Ref   string `json:"ref,omitempty"`
	Depth int    `json:"depth,omitempty"`
	// Auth says a token was given: the job is then on the queue of the
	// process that holds it.
	Auth bool `json:"auth,omitempty"`
}

// End reasons of a sandbox whose repository could not be cloned.
const (
	ReasonRepoAuth        = "repo_auth_failed"
	ReasonRepoUnknownRef  = "repo_unknown_ref"
	ReasonRepoNotFound    = "repo_not_found"
	ReasonRepoUnreachable = "repo_unreachable"
	ReasonRepoFailed      = "repo_clone_failed"
)

// MaxRepoDepth bounds repo.depth; deeper is the same as a full clone.
const MaxRepoDepth = 1_000_000

const (
	maxRepoURL   = 2048
	maxRepoToken = 4096
)

// refRE is what a ref may look like: a subset of git check-ref-format
// that also keeps it from reading as an option or a revision expression.
var refRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}$`)

// validateRepo checks a create's repository and returns the job's part.
func validateRepo(r *RepoSpec) (*RepoArgs, error) {
	if r == nil {
		return nil, nil
	}
	u, err := checkRepoURL(r.URL)
	if err != nil {
		return nil, err
	}
	if r.Ref != "" && !validRef(r.Ref) {
		return nil, invalid("repo.ref", "must be a branch, tag or commit ID: letters, digits and ._/+- without '..', '//' or a trailing '/' or '.lock'")
	}
	if r.Depth < 0 || r.Depth > MaxRepoDepth {
		return nil, invalid("repo.depth", "must be between 1 and %d, or 0 (or absent) for the whole history", MaxRepoDepth)
	}
	if r.Token != "" {
		if len(r.Token) > maxRepoToken || strings.ContainsFunc(r.Token, func(c rune) bool { return c < 0x21 || c == 0x7f }) {
			return nil, invalid("repo.token", "must be at most %d printable characters without spaces", maxRepoToken)
		}
		switch {
		case u.Scheme == "git":
			return nil, invalid("repo.token", "git:// has no authentication; use the https URL")
		case u.Scheme == "http" && !loopbackHost(u.Hostname()):
			return nil, invalid("repo.token", "is sent over https only (or http to a loopback host)")
		}
	}
	return &RepoArgs{URL: r.URL, Ref: r.Ref, Depth: r.Depth, Auth: r.Token != ""}, nil
}

func checkRepoURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, invalid("repo.url", "is required")
	}
	if len(raw) > maxRepoURL || strings.ContainsFunc(raw, func(c rune) bool { return c < 0x21 || c == 0x7f }) {
		return nil, invalid("repo.url", "must be at most %d characters without spaces or control characters", maxRepoURL)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return nil, invalid("repo.url", "must be an https://, http:// or git:// URL (local paths and scp-like addresses are not cloned)")
	}
	switch u.Scheme {
	case "https", "http", "git":
	case "ssh":
		return nil, invalid("repo.url", "ssh is not cloned at create (the sandbox holds no key yet); use the https URL with repo.token")
	default:
		return nil, invalid("repo.url", "scheme %q is not cloned; use https://, http:// or git://", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, invalid("repo.url", "must name a host")
	}
	if u.User != nil {
		return nil, invalid("repo.url", "must not carry credentials; put the token in repo.token")
	}
	if u.Fragment != "" || u.RawQuery != "" {
		return nil, invalid("repo.url", "must not have a query or fragment")
	}
	return u, nil
}

func validRef(ref string) bool {
	return refRE.MatchString(ref) && !strings.Contains(ref, "..") && !strings.Contains(ref, "//") &&
		!strings.HasSuffix(ref, "/") && !strings.HasSuffix(ref, ".lock") && !strings.HasSuffix(ref, ".")
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// withoutToken is r as hashed for idempotent replays: a token (low
// entropy, perhaps) must not be recoverable from the stored hash.
func (r *RepoSpec) withoutToken() *RepoSpec {
	if r == nil {
		return nil
	}
	c := *r
	c.Token = ""
	return &c
}

// tokenVault holds repository tokens from a create until its clone ends,
// in memory only. mu guards m.
type tokenVault struct {
	mu sync.Mutex
	m  map[string]heldToken // by sandbox ID
}

type heldToken struct {
	token   string
	expires time.Time
}

// put holds tok for sandboxID until expires, and lets go of expired ones
// (their sandboxes failed by timing out in pending).
func (v *tokenVault) put(sandboxID, tok string, now, expires time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]heldToken{}
	}
	for id, h := range v.m {
		if now.After(h.expires) {
			delete(v.m, id)
		}
	}
	v.m[sandboxID] = heldToken{token: tok, expires: expires}
}

func (v *tokenVault) get(sandboxID string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	h, ok := v.m[sandboxID]
	return h.token, ok
}

func (v *tokenVault) drop(sandboxID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, sandboxID)
}
