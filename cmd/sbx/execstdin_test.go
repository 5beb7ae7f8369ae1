package main

import (
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
)

// TestExecInWhileReadLoop: a shell's `while read` loop calling sbx exec
// runs once per line, since sbx exec reads stdin only with -i; it once
// read the loop's input to its end on the first pass, as ssh without -n
// does. -i still sends the pipe.
func TestExecInWhileReadLoop(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	bin, env := cliExecutable(t)
	loop := `printf 'a\nb\nc\n' | while read x; do "$SBX" exec "$ID" -- echo "$x"; done; echo piped | "$SBX" exec -i "$ID" -- cat`
	cmd := exec.Command("sh", "-c", loop)
	cmd.Env = append(env, "SBX="+bin, "ID="+fakeID)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the loop: %v\n%s", err, out)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	var got []string
	for _, r := range api.reqs {
		if !strings.HasSuffix(r.Path, "/exec") {
			continue
		}
		args, _ := r.Body["args"].([]any)
		stdin, _ := r.Body["stdin"].(string)
		got = append(got, strings.TrimSpace(strings.Join([]string{r.Body["command"].(string), anyJoin(args), stdin}, " ")))
	}
	want := []string{"echo a", "echo b", "echo c", "cat  piped"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("exec requests %q, want %q (output %s)", got, want, out)
	}
}

func anyJoin(xs []any) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i], _ = x.(string)
	}
	return strings.Join(s, " ")
}
