package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/podssh"
)

// The clone runs inside the sandbox, over the same SSH exec road as every
// other command (local and Kubernetes alike), as the sandbox's user, in
// its workspace. It is a few small steps rather than `git clone`, because
// a workspace is seldom empty (a volume's lost+found) and a ref may be a
// commit ID, which `git clone --branch` does not take:
//
//	prepare   git init and the origin remote (or nothing: an earlier
//	          attempt of this provisioning finished the clone)
//	resolve   git ls-remote: is the ref a branch, a tag, a commit?
//	fetch     git fetch --depth of just that ref
//	checkout  a branch tracking origin's, or a detached tag or commit

// cloneError is a clone that cannot succeed by retrying: the sandbox
// fails with Reason.
type cloneError struct {
	Reason string
	Detail string
}

func (e *cloneError) Error() string { return e.Reason + ": " + e.Detail }

// prepareScript makes the workspace a repository with the origin remote.
// A repository whose HEAD resolves is an earlier attempt's finished
// clone; one whose HEAD does not is an interrupted one, started over.
const prepareScript = `if [ -d .git ]; then
  if git rev-parse -q --verify HEAD >/dev/null; then echo staged; exit 0; fi
  rm -rf .git
fi
git -c init.defaultBranch=sbx-clone init -q && git remote add origin "$1"`

// authScript runs git with the token as the answer of a credential
// helper scoped to the repository's origin. The token comes on stdin, so
// it is in no command line; the empty credential.helper first drops any
// helper the sandbox's own config names (one that stores credentials
// would write it down). Prompts are off: a missing or wrong token fails.
const authScript = `IFS= read -r SBX_GIT_TOKEN || :
export SBX_GIT_TOKEN GIT_TERMINAL_PROMPT=0 GCM_INTERACTIVE=never
unset GIT_ASKPASS SSH_ASKPASS
origin=$1 helper=$2; shift 2
exec git -c credential.helper= -c "credential.$origin.helper=$helper" "$@"`

// credentialHelper answers git's "get" with the token from the
// environment authScript set, and ignores "store" and "erase".
const credentialHelper = `!f() { test "$1" = get && test -n "$SBX_GIT_TOKEN" && printf 'username=x-access-token\npassword=%s\n' "$SBX_GIT_TOKEN"; }; f`

// minCloneTimeout is the least a clone step is given, even when little of
// the provisioning timeout is left.
const minCloneTimeout = 10 * time.Second

// stageRepo clones repo into the workspace of sb, which the provider has
// just started at ep. A *cloneError is final; other errors (the sandbox
// could not be reached) are worth a retry of the provisioning.
func (m *Manager) stageRepo(ctx context.Context, sb store.Sandbox, ep provider.Endpoint, hostKey string, repo RepoArgs) error {
	if m.pods == nil {
		return errors.New("lifecycle: no connection pool to reach the sandbox for its clone")
	}
	tok := ""
	if repo.Auth {
		var ok bool
		if tok, ok = m.tokens.get(sb.ID); !ok {
			return &cloneError{Reason: ReasonRepoFailed,
				Detail: "the repository token is gone (the control process that took the create restarted); create the sandbox again"}
		}
	}
	client, err := m.pods.Client(ctx, podssh.Target{
		SandboxID: sb.ID, Addr: ep.Addr, User: ep.User, HostKey: hostKey, Workspace: ep.Workspace,
	})
	if err != nil {
		return fmt.Errorf("reach sandbox %s to clone: %w", sb.ID, err)
	}
	g := gitRunner{client: client, dir: ep.Workspace, token: tok, deadline: sb.CreatedAt.Add(m.cfg.ProvisionTimeout), now: m.now}
	if g.origin, err = repoOrigin(repo.URL); err != nil {
		return &cloneError{Reason: ReasonRepoFailed, Detail: err.Error()}
	}

	res, err := g.run(ctx, false, "sh", "-c", prepareScript, "sbx-clone", repo.URL)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &cloneError{Reason: ReasonRepoFailed, Detail: "prepare the workspace: " + g.lastLine(res)}
	}
	if strings.TrimSpace(string(res.Stdout)) == "staged" {
		return nil
	}

	target, err := g.resolve(ctx, repo.Ref)
	if err != nil {
		return err
	}
	fetch := []string{"fetch", "-q", "--no-tags"}
	if repo.Depth > 0 {
		fetch = append(fetch, "--depth", strconv.Itoa(repo.Depth))
	}
	fetch = append(fetch, "origin", target.refspec)
	if res, err = g.run(ctx, true, fetch...); err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return g.classify(res, "fetch "+target.describe)
	}
	if res, err = g.run(ctx, false, append([]string{"git", "checkout", "-q"}, target.checkout...)...); err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &cloneError{Reason: ReasonRepoFailed, Detail: "check out " + target.describe + ": " + g.lastLine(res)}
	}
	return nil
}

// gitRunner runs the clone's steps in one sandbox.
type gitRunner struct {
	client   *ssh.Client
	dir      string
	token    string
	origin   string // scheme://host[:port] the credential helper answers for
	deadline time.Time
	now      func() time.Time
}

// run runs argv in the workspace; with auth, argv is git's arguments and
// runs under authScript with the token on stdin.
func (g gitRunner) run(ctx context.Context, auth bool, argv ...string) (podssh.ExecResult, error) {
	req := podssh.ExecRequest{
		Command: argv[0], Args: argv[1:], Dir: g.dir, OutputLimit: 64 << 10,
		Timeout: max(g.deadline.Sub(g.now()), minCloneTimeout),
		Stdin:   strings.NewReader(""),
	}
	if auth {
		req.Command = "sh"
		req.Args = append([]string{"-c", authScript, "sbx-clone", g.origin, credentialHelper}, argv...)
		req.Stdin = strings.NewReader(g.token + "\n")
	}
	res, err := podssh.Exec(ctx, g.client, req)
	if err != nil {
		return res, fmt.Errorf("clone step %s: %w", argv[0], err)
	}
	if res.TimedOut {
		return res, &cloneError{Reason: ReasonRepoFailed, Detail: "the clone outlasted the provisioning timeout"}
	}
	return res, nil
}

// cloneTarget is what the ref resolved to.
type cloneTarget struct {
	refspec  string   // what to fetch
	checkout []string // git checkout's arguments after -q
	describe string   // for messages
}

var commitIDRE = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)

// resolve asks the remote what ref is; an empty ref is its default branch.
func (g gitRunner) resolve(ctx context.Context, ref string) (cloneTarget, error) {
	args := []string{"ls-remote", "--symref", "origin", "HEAD"}
	if ref != "" && !commitIDRE.MatchString(ref) {
		args = append(args, "refs/heads/"+ref, "refs/tags/"+ref)
	}
	res, err := g.run(ctx, true, args...)
	if err != nil {
		return cloneTarget{}, err
	}
	if res.ExitCode != 0 {
		return cloneTarget{}, g.classify(res, "reach the repository")
	}
	refs := map[string]bool{}
	defaultBranch := ""
	for line := range strings.Lines(string(res.Stdout)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "ref:" && f[2] == "HEAD":
			defaultBranch = strings.TrimPrefix(f[1], "refs/heads/")
		case len(f) == 2:
			refs[f[1]] = true
		}
	}
	switch {
	case ref == "" && defaultBranch == "":
		return cloneTarget{}, &cloneError{Reason: ReasonRepoUnknownRef, Detail: "the repository has no default branch (is it empty?)"}
	case ref == "":
		ref = defaultBranch
		fallthrough
	case refs["refs/heads/"+ref]:
		return cloneTarget{
			refspec:  "+refs/heads/" + ref + ":refs/remotes/origin/" + ref,
			checkout: []string{"-b", ref, "--track", "origin/" + ref},
			describe: "branch " + ref,
		}, nil
	case refs["refs/tags/"+ref]:
		return cloneTarget{
			refspec:  "+refs/tags/" + ref + ":refs/tags/" + ref,
			checkout: []string{"--detach", "refs/tags/" + ref},
			describe: "tag " + ref,
		}, nil
	case commitIDRE.MatchString(ref):
		return cloneTarget{refspec: ref, checkout: []string{"--detach", ref}, describe: "commit " + ref}, nil
	}
	return cloneTarget{}, &cloneError{Reason: ReasonRepoUnknownRef,
		Detail: fmt.Sprintf("the repository has no branch or tag %q (a commit needs its full ID)", ref)}
}

// classify turns a failed network step into the reason the sandbox
// fails with, from what git printed.
func (g gitRunner) classify(res podssh.ExecResult, doing string) error {
	msg := strings.ToLower(string(res.Stderr))
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	reason := ReasonRepoFailed
	switch {
	case has("authentication failed", "could not read username", "could not read password",
		"terminal prompts disabled", "returned error: 401", "returned error: 403", "permission denied"):
		reason = ReasonRepoAuth
	case has("couldn't find remote ref", "not our ref", "unadvertised object", "no such remote ref"):
		reason = ReasonRepoUnknownRef
	case has("repository not found", "not found", "returned error: 404", "does not appear to be a git repository"):
		reason = ReasonRepoNotFound
	case has("could not resolve host", "failed to connect", "couldn't connect", "connection refused",
		"connection timed out", "timed out", "network is unreachable", "no route to host", "unable to access",
		"could not resolve hostname", "unable to look up"):
		reason = ReasonRepoUnreachable
	}
	return &cloneError{Reason: reason, Detail: doing + ": " + g.lastLine(res)}
}

// lastLine is git's last error line, without the token should a server
// echo it, and bounded.
func (g gitRunner) lastLine(res podssh.ExecResult) string {
	out := strings.TrimSpace(string(res.Stderr))
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if out == "" {
		out = "exit status " + strconv.Itoa(res.ExitCode)
	}
	if g.token != "" {
		out = strings.ReplaceAll(out, g.token, "[token]")
	}
	if len(out) > 300 {
		out = out[:300] + "…"
	}
	return out
}

// repoOrigin is the scheme://host[:port] a credential applies to, so
// that a redirect elsewhere is not handed the token.
func repoOrigin(raw string) (string, error) {
	u, err := checkRepoURL(raw)
	if err != nil {
		return "", err
	}
	return u.Scheme + "://" + u.Host, nil
}

// Reasons of "repo_clone" events besides the failures' end reasons.
const (
	RepoCloneStarted = "started"
	RepoCloned       = "cloned"
)

// cloneStep stages the repository of a provisioning and reports it in
// events. done says the provisioning ends here: the sandbox failed (err
// is nil) or the attempt should be retried (err says why).
func (m *Manager) cloneStep(ctx context.Context, sb store.Sandbox, ep provider.Endpoint, hostKey string, repo RepoArgs, lastAttempt bool) (done bool, err error) {
	what := describeRepo(repo)
	m.repoEvent(ctx, sb, RepoCloneStarted, what)
	start := time.Now()
	err = m.stageRepo(ctx, sb, ep, hostKey, repo)
	var ce *cloneError
	switch {
	case err == nil:
		m.tokens.drop(sb.ID)
		m.repoEvent(ctx, sb, RepoCloned, fmt.Sprintf("%s in %s", what, time.Since(start).Round(time.Millisecond)))
		m.log.InfoContext(ctx, "repository cloned", "sandbox_id", sb.ID, "url", repo.URL, "took", time.Since(start))
		return false, nil
	case errors.As(err, &ce) || lastAttempt:
		if ce == nil {
			ce = &cloneError{Reason: ReasonRepoFailed, Detail: err.Error()}
		}
		m.tokens.drop(sb.ID)
		m.repoEvent(ctx, sb, ce.Reason, ce.Detail)
		return true, m.failWith(ctx, sb.ID, ce.Reason, "clone "+repo.URL+": "+ce.Detail)
	default:
		// The sandbox could not be reached: the token stays held for
		// the retry.
		m.log.WarnContext(ctx, "clone attempt failed", "sandbox_id", sb.ID, "err", err)
		return true, fmt.Errorf("clone into %s: %w", sb.ID, err)
	}
}

func describeRepo(r RepoArgs) string {
	s := r.URL
	if r.Ref != "" {
		s += " at " + r.Ref
	}
	if r.Depth > 0 {
		s += fmt.Sprintf(" (depth %d)", r.Depth)
	}
	return s
}

// repoEvent records a step of the clone. It is a report, not a state
// change: a store that does not take it is logged, not retried.
func (m *Manager) repoEvent(ctx context.Context, sb store.Sandbox, reason, msg string) {
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		return tx.InsertEvent(ctx, store.Event{
			SandboxID: sb.ID, AccountID: sb.AccountID, Type: "repo_clone", Reason: reason,
			Actor: "provisioner", Message: msg, At: m.now().UTC(),
		})
	})
	if err != nil {
		m.log.WarnContext(ctx, "record clone event", "sandbox_id", sb.ID, "reason", reason, "err", err)
	}
}
