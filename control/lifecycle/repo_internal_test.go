package lifecycle

import (
	"errors"
	"testing"

	"github.com/sbxedge/sbx/internal/podssh"
)

func TestValidateRepoAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   RepoSpec
		want RepoArgs
	}{
		{"https with token", RepoSpec{URL: "https://github.com/o/r.git", Ref: "release/1.x", Depth: 1, Token: "ghp_x"},
			RepoArgs{URL: "https://github.com/o/r.git", Ref: "release/1.x", Depth: 1, Auth: true}},
		{"port and no suffix", RepoSpec{URL: "https://git.example.com:8443/group/sub/r"}, RepoArgs{URL: "https://git.example.com:8443/group/sub/r"}},
		{"git protocol", RepoSpec{URL: "git://git.kernel.org/pub/scm/git/git.git", Ref: "v2.39.0"},
			RepoArgs{URL: "git://git.kernel.org/pub/scm/git/git.git", Ref: "v2.39.0"}},
		{"token over http to loopback", RepoSpec{URL: "http://127.0.0.1:9000/private/r.git", Token: "t"},
			RepoArgs{URL: "http://127.0.0.1:9000/private/r.git", Auth: true}},
		{"token over http to localhost", RepoSpec{URL: "http://localhost/r.git", Token: "t"}, RepoArgs{URL: "http://localhost/r.git", Auth: true}},
		{"commit ID", RepoSpec{URL: "https://h/r", Ref: "0123456789abcdef0123456789abcdef01234567"},
			RepoArgs{URL: "https://h/r", Ref: "0123456789abcdef0123456789abcdef01234567"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := validateRepo(&tc.in)
			if err != nil || *got != tc.want {
				t.Fatalf("validateRepo(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestValidateRepoRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    RepoSpec
		field string
	}{
		{"token over http to a remote host", RepoSpec{URL: "http://[2001:db8::1]/r.git", Token: "t"}, "repo.token"},
		{"space in token", RepoSpec{URL: "https://h/r", Token: "a b"}, "repo.token"},
		{"ref ending in .lock", RepoSpec{URL: "https://h/r", Ref: "main.lock"}, "repo.ref"},
		{"ref with reflog syntax", RepoSpec{URL: "https://h/r", Ref: "main@{1}"}, "repo.ref"},
		{"ref with a double slash", RepoSpec{URL: "https://h/r", Ref: "a//b"}, "repo.ref"},
		{"newline in url", RepoSpec{URL: "https://h/r\n"}, "repo.url"},
		{"query", RepoSpec{URL: "https://h/r?x=1"}, "repo.url"},
		{"no host", RepoSpec{URL: "https:///r"}, "repo.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := validateRepo(&tc.in)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("validateRepo(%+v) = %v; want an error naming %s", tc.in, err, tc.field)
			}
		})
	}
}

// TestCloneClassify: what git prints decides the reason a sandbox fails
// with; these are git 2.39's words for each case.
func TestCloneClassify(t *testing.T) {
	for _, tc := range []struct {
		stderr, want string
	}{
		{"fatal: Authentication failed for 'https://h/r/'\n", ReasonRepoAuth},
		{"fatal: unable to access 'https://h/r/': The requested URL returned error: 403\n", ReasonRepoAuth},
		{"fatal: could not read Username for 'https://h': terminal prompts disabled\n", ReasonRepoAuth},
		{"remote: Repository not found.\nfatal: repository 'https://github.com/o/missing/' not found\n", ReasonRepoNotFound},
		{"fatal: unable to access 'https://nx.invalid/r/': Could not resolve host: nx.invalid\n", ReasonRepoUnreachable},
		{"fatal: unable to access 'http://127.0.0.1:1/r/': Failed to connect to 127.0.0.1 port 1: Connection refused\n", ReasonRepoUnreachable},
		{"fatal: remote error: upload-pack: not our ref 0123456789abcdef0123456789abcdef01234567\n", ReasonRepoUnknownRef},
		{"fatal: couldn't find remote ref refs/heads/gone\n", ReasonRepoUnknownRef},
		{"error: RPC failed; curl 92 HTTP/2 stream 0 was not closed cleanly\n", ReasonRepoFailed},
	} {
		g := gitRunner{token: "secret-token"}
		err := g.classify(podssh.ExecResult{ExitCode: 128, Stderr: []byte(tc.stderr)}, "fetch")
		var ce *cloneError
		if !errors.As(err, &ce) || ce.Reason != tc.want {
			t.Errorf("classify(%q) = %v; want %s", tc.stderr, err, tc.want)
		}
	}
	// A server echoing the token does not get it into the message.
	g := gitRunner{token: "secret-token"}
	err := g.classify(podssh.ExecResult{ExitCode: 128, Stderr: []byte("fatal: bad credential secret-token\n")}, "fetch")
	if ce := (*cloneError)(nil); !errors.As(err, &ce) || ce.Detail != "fetch: fatal: bad credential [token]" {
		t.Errorf("detail %v, want the token redacted", err)
	}
}
