package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/gittest"
)

// TestAgentLoopExample runs examples/agent-loop, the spec's coding loop,
// against a real sbx dev and a private repository on a local git server:
// the sandbox is created with the repository staged, the test fails, the
// fix is written, the test passes, a branch is committed and pushed, the
// sandbox is destroyed, each step printed with its time. The pushed
// branch holds the fix; the git token is in no file of sbx dev's data
// dir (its database, the sandbox's workspace) and not in its log.
func TestAgentLoopExample(t *testing.T) {
	const gitToken = "gittok-agent-loop-5f1e0c2a9b7d"
	gs := gittest.Start(t, gitToken)
	url := gs.Create(t, gittest.Repo{Path: "private/calc.git", DefaultBranch: "main", Branches: map[string][]gittest.Commit{"main": {{
		"calc.sh": "add() { echo $(($1 - $2)); }\n",
		"test.sh": ". ./calc.sh\ngot=$(add 2 3)\n[ \"$got\" = 5 ] || { echo \"add 2 3 = $got, want 5\"; exit 1; }\necho PASS\n",
	}}}})
	bare := filepath.Join(gs.Root, "private", "calc.git")
	gittest.Git(t, bare, "config", "http.receivepack", "true") // pushes pass the server's basic auth first

	bin := filepath.Join(t.TempDir(), "agent-loop")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/agent-loop").CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	fix := filepath.Join(t.TempDir(), "calc.sh")
	if err := os.WriteFile(fix, []byte("add() { echo $(($1 + $2)); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, t.TempDir(), "", "--egress-trust", "127.0.0.0/8")

	cmd := exec.Command(bin, "-api", p.API, "-repo", url, "-test", "sh test.sh", "-fix-path", "calc.sh", "-fix-from", fix,
		"-branch", "agent/fix-add", "-message", "Fix add")
	cmd.Env = append(os.Environ(), "SBX_TOKEN="+p.Token, "GIT_TOKEN="+gitToken)
	out, err := cmd.CombinedOutput()
	t.Logf("agent-loop:\n%s", out)
	if err != nil {
		t.Fatalf("agent-loop: %v", err)
	}
	for _, step := range []string{"create sandbox (repo staged)", "run the test (fails)", "write the fix", "rerun the test (passes)",
		"commit on agent/fix-add", "push agent/fix-add", "destroy sandbox"} {
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, step) {
				line = l
			}
		}
		if !strings.HasSuffix(line, "s  ok") {
			t.Errorf("step %q: %q, want it timed and ok", step, line)
		}
	}
	if !strings.Contains(string(out), "add 2 3 = -1, want 5") {
		t.Errorf("the failing run's output is not shown")
	}
	if got := gittest.Git(t, bare, "log", "-1", "--format=%s", "agent/fix-add"); got != "Fix add" {
		t.Errorf("pushed branch's commit %q, want Fix add", got)
	}
	if got := gittest.Git(t, bare, "show", "agent/fix-add:calc.sh"); !strings.Contains(got, "$1 + $2") {
		t.Errorf("pushed calc.sh %q, want the fix", got)
	}

	// The token is stored nowhere sbx keeps anything.
	files := 0
	err = filepath.WalkDir(p.DataDir, func(path string, d fs.DirEntry, err error) error {
		files++
		if err != nil || !d.Type().IsRegular() {
			return nil // a socket, or a file gone while walking
		}
		if b, rerr := os.ReadFile(path); rerr == nil && bytes.Contains(b, []byte(gitToken)) {
			t.Errorf("the git token is stored in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries of the data dir searched for the token", files)
	p.log.mu.Lock()
	inLog := strings.Contains(p.log.String(), gitToken)
	p.log.mu.Unlock()
	if inLog {
		t.Error("the git token is in sbx dev's log")
	}
}
