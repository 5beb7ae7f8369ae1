package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

type execDoc struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

func (e *env) execOK(t *testing.T, id string, body map[string]any) execDoc {
	t.Helper()
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", jsonBody(body))
	var out execDoc
	if code != 200 || json.Unmarshal(b, &out) != nil || out.ExitCode != 0 {
		t.Fatalf("exec %v: %d %s", body, code, b)
	}
	return out
}

// TestCreateEnvAndExecCwd: a create's env reaches exec and services (an
// exec's own env wins), GET shows it, and an exec's cwd runs it in a
// folder of the workspace; a cwd outside the workspace is a 422 on cwd.
func TestCreateEnvAndExecCwd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	const greeting = `say "hi" \ it's é`
	sb := e.create("dev", map[string]any{
		"profile": "tuist-linux-small",
		"env":     map[string]string{"GREETING": greeting, "STAGE": "test"},
		"services": []map[string]any{{"name": "envdump",
			"command": `printf '%s|%s' "$GREETING" "$STAGE" > service-env.txt; sleep 600`}},
	})
	e.waitStatus(sb.ID, "ready")
	e.waitService(t, sb.ID, "envdump", "running", func(s serviceDoc) bool { return s.State == "running" })

	var got struct {
		Env map[string]string `json:"env"`
	}
	_, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID, nil)
	if json.Unmarshal(b, &got) != nil || got.Env["GREETING"] != greeting || got.Env["STAGE"] != "test" {
		t.Errorf("GET env: %s", b)
	}
	out := e.execOK(t, sb.ID, map[string]any{"command": `printf '%s|%s' "$GREETING" "$STAGE"`})
	if out.Stdout != greeting+"|test" {
		t.Errorf("exec sees env %q, want %q", out.Stdout, greeting+"|test")
	}
	out = e.execOK(t, sb.ID, map[string]any{"command": `printf %s "$STAGE"`, "env": map[string]string{"STAGE": "mine"}})
	if out.Stdout != "mine" {
		t.Errorf("exec env override: %q, want mine", out.Stdout)
	}
	for deadline := 0; deadline < 100; deadline++ {
		if out = e.execOK(t, sb.ID, map[string]any{"command": "cat service-env.txt 2>/dev/null || true"}); out.Stdout != "" {
			break
		}
	}
	if out.Stdout != greeting+"|test" {
		t.Errorf("service sees env %q, want %q", out.Stdout, greeting+"|test")
	}

	e.execOK(t, sb.ID, map[string]any{"command": "mkdir -p src/app"})
	ws := e.execOK(t, sb.ID, map[string]any{"command": "pwd -P"}).Stdout
	for _, cwd := range []string{"src/app", strings.TrimSpace(ws) + "/src/app", "src/../src/app/"} {
		if out := e.execOK(t, sb.ID, map[string]any{"command": "pwd -P", "cwd": cwd}); out.Stdout != strings.TrimSpace(ws)+"/src/app\n" {
			t.Errorf("cwd %q: pwd %q, want %s/src/app", cwd, out.Stdout, strings.TrimSpace(ws))
		}
	}
	for _, cwd := range []string{"..", "src/../../x", "/etc", "/"} {
		for _, stream := range []bool{false, true} {
			code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec", jsonBody(map[string]any{"command": "pwd", "cwd": cwd, "stream": stream}))
			var p struct {
				Code   string `json:"code"`
				Detail string `json:"detail"`
			}
			if code != 422 || json.Unmarshal(b, &p) != nil || !strings.Contains(p.Detail, "cwd") {
				t.Errorf("cwd %q (stream %v): %d %s, want 422 naming cwd", cwd, stream, code, b)
			}
		}
	}
}

// TestCreateEnvRefused: env a sandbox could not be given, or that would
// shadow what the sandbox sets itself, is a 422 on env and creates nothing.
func TestCreateEnvRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	many := map[string]string{}
	for i := range 65 {
		many["V"+strings.Repeat("X", i)] = "1"
	}
	for name, env := range map[string]map[string]string{
		"newline":     {"A": "two\nlines"},
		"reserved":    {"HTTPS_PROXY": "http://elsewhere"},
		"ours":        {"SBX_WORKSPACE": "/x"},
		"lower proxy": {"https_proxy": "http://elsewhere"},
		"bad name":    {"A-B": "x"},
		"long value":  {"A": strings.Repeat("x", 4097)},
		"too many":    many,
	} {
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", jsonBody(map[string]any{"profile": "tuist-linux-small", "env": env}))
		if code != 422 || !strings.Contains(string(b), "env") {
			t.Errorf("%s: %d %s, want 422 on env", name, code, b)
		}
	}
	if _, _, b := e.do("dev", "GET", "/api/v1/sandboxes", nil); strings.Contains(string(b), `"id"`) {
		t.Errorf("a refused create left a sandbox: %s", b)
	}
}
