package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
)

type sbView struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	Name          *string           `json:"name"`
	Labels        map[string]string `json:"labels"`
	WakeOnTraffic bool              `json:"wake_on_traffic"`
}

// send does a request as tok and wants status want, decoding the answer
// into out (when non-nil).
func (e *env) send(tok, method, path, body string, want int, out any) []byte {
	e.t.Helper()
	code, _, b := e.do(tok, method, path, strings.NewReader(body))
	if code != want {
		e.t.Fatalf("%s %s %s: status %d, want %d; body %s", method, path, body, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return b
}

func (e *env) waitStatus(id, want string) {
	e.t.Helper()
	end := time.Now().Add(time.Minute)
	for {
		var v sbView
		e.send("dev", "GET", "/api/v1/sandboxes/"+id, "", 200, &v)
		if v.Status == want {
			return
		}
		if time.Now().After(end) {
			e.t.Fatalf("sandbox %s is %s after a minute, want %s", id, v.Status, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) lines(id string) []string {
	e.t.Helper()
	ss, err := e.svc.Store.Sessions(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	sb, err := e.svc.Store.Sandbox(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := lifecycle.CheckLedger(sb, ss); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range ss {
		r := "open"
		if s.EndedAt != nil {
			r = s.EndReason
		}
		out = append(out, string(s.Kind)+":"+r)
	}
	return out
}

// TestStopStartAPI: POST .../suspend and .../resume move the sandbox and
// its ledger as the spec's rows say; both are idempotent; a sandbox
// created with wake_on_traffic false refuses traffic with 409 while
// stopped; an ended sandbox is a 409 problem.
func TestStopStartAPI(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, false)
			var sb sbView
			e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"parked","wake_on_traffic":false}`, 201, &sb)
			if sb.WakeOnTraffic || sb.Name == nil || *sb.Name != "parked" {
				t.Fatalf("created %+v, want name parked and wake_on_traffic false", sb)
			}
			e.waitStatus(sb.ID, "ready")

			code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/parked/suspend", nil)
			if code != http.StatusAccepted && code != http.StatusOK {
				t.Fatalf("suspend: %d %s, want 202 or 200", code, b)
			}
			e.waitStatus(sb.ID, "suspended")
			e.send("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/suspend", "", 200, nil)
			if got, want := e.lines(sb.ID), []string{"compute:user_suspend", "storage:open"}; !slices.Equal(got, want) {
				t.Fatalf("ledger after stop: %v, want %v", got, want)
			}

			var p problemDoc
			_ = json.Unmarshal(e.send("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec", `{"command":"true"}`, 409, nil), &p)
			if p.Code != "sandbox_stopped" || !strings.Contains(p.Detail, "sbx start") {
				t.Fatalf("exec on a stopped sandbox that does not wake on traffic: %+v, want sandbox_stopped saying how to start it", p)
			}

			var back sbView
			e.send("dev", "POST", "/api/v1/sandboxes/parked/resume", "", 200, &back)
			if back.Status != "ready" {
				t.Fatalf("resume answered %s, want ready", back.Status)
			}
			e.send("dev", "POST", "/api/v1/sandboxes/parked/resume", "", 200, nil)
			if got, want := e.lines(sb.ID), []string{"compute:user_suspend", "storage:restored", "compute:open"}; !slices.Equal(got, want) {
				t.Fatalf("ledger after start: %v, want %v", got, want)
			}
			e.send("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec", `{"command":"true"}`, 200, nil)

			e.send("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, "", 200, nil)
			for _, verb := range []string{"suspend", "resume"} {
				_ = json.Unmarshal(e.send("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/"+verb, "", 409, nil), &p)
				if p.Code != "sandbox_state" || !strings.Contains(p.Detail, "create a new sandbox") {
					t.Fatalf("%s of a deleted sandbox: %+v, want sandbox_state saying what to do", verb, p)
				}
			}
			e.send("other", "POST", "/api/v1/sandboxes/"+sb.ID+"/suspend", "", 404, nil)
		})
	}
}

// TestNamesAndLabels: a name works wherever the ID does and is unique
// among the account's live sandboxes; labels are set at create and by
// PATCH; lists filter by name and labels, and refuse unknown filters.
func TestNamesAndLabels(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	var a, b sbView
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"pr-1234","labels":{"team":"edge","pr":"1234"}}`, 201, &a)
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","labels":{"team":"edge"}}`, 201, &b)

	var p problemDoc
	_ = json.Unmarshal(e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"pr-1234"}`, 409, nil), &p)
	if p.Code != "name_taken" || !strings.Contains(p.Detail, "by-name/pr-1234") {
		t.Fatalf("second live sandbox of one name: %+v, want name_taken pointing at ensure", p)
	}
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"Not_A_Label"}`, 422, nil)
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"sbx-looks-like-an-id"}`, 422, nil)
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","labels":{"bad key":"x"}}`, 422, nil)

	var got sbView
	e.send("dev", "GET", "/api/v1/sandboxes/pr-1234", "", 200, &got)
	if got.ID != a.ID || got.Labels["pr"] != "1234" {
		t.Fatalf("GET by name: %+v, want %s with its labels", got, a.ID)
	}
	e.send("other", "GET", "/api/v1/sandboxes/pr-1234", "", 404, nil)
	// Every route under a sandbox takes the name.
	e.send("dev", "GET", "/api/v1/sandboxes/pr-1234/services", "", 200, nil)
	e.send("dev", "GET", "/api/v1/sandboxes/pr-1234/ports", "", 200, nil)
	e.send("other", "GET", "/api/v1/sandboxes/pr-1234/ports", "", 404, nil)
	e.send("dev", "GET", "/api/v1/sandboxes/no-such-name/ports", "", 404, nil)

	list := func(query string) []string {
		t.Helper()
		var l struct{ Sandboxes []sbView }
		e.send("dev", "GET", "/api/v1/sandboxes?"+query, "", 200, &l)
		var ids []string
		for _, sb := range l.Sandboxes {
			ids = append(ids, sb.ID)
		}
		return ids
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"name=pr-1234", []string{a.ID}},
		{"label=team=edge", []string{b.ID, a.ID}},
		{"label=team=edge&label=pr=1234", []string{a.ID}},
		{"label=team=core", nil},
		{"name=pr-1234&status=pending", []string{a.ID}},
	} {
		if got := list(c.query); !slices.Equal(got, c.want) {
			t.Errorf("?%s: %v, want %v", c.query, got, c.want)
		}
	}
	for _, bad := range []string{"lable=team=edge", "label=noequals", "name=Not_A_Label", "consumer.actor=agent"} {
		_ = json.Unmarshal(e.send("dev", "GET", "/api/v1/sandboxes?"+bad, "", 400, nil), &p)
		if p.Code != "invalid_query" {
			t.Errorf("?%s: %+v, want invalid_query", bad, p)
		}
	}

	var patched sbView
	e.send("dev", "PATCH", "/api/v1/sandboxes/pr-1234", `{"labels":{"team":"core"},"wake_on_traffic":false}`, 200, &patched)
	if patched.Labels["team"] != "core" || patched.Labels["pr"] != "" || patched.WakeOnTraffic {
		t.Fatalf("PATCH labels and wake flag: %+v", patched)
	}
	if got := list("label=team=core"); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("after PATCH, ?label=team=core: %v", got)
	}
	e.send("dev", "PATCH", "/api/v1/sandboxes/pr-1234", `{}`, 422, nil)

	// Once its sandbox ends, a name may be used again.
	e.send("dev", "DELETE", "/api/v1/sandboxes/pr-1234", "", 200, nil)
	var again sbView
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"pr-1234"}`, 201, &again)
	if again.ID == a.ID {
		t.Fatal("name reuse returned the ended sandbox")
	}
}

// TestEnsureMakesOneSandbox: ten parallel ensures of one name make one
// sandbox, on both stores, also for an account whose limit is one.
func TestEnsureMakesOneSandbox(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, true)
			for _, tok := range []string{"dev", "other"} {
				var wg sync.WaitGroup
				type answer struct {
					code int
					id   string
				}
				answers := make(chan answer, 10)
				for range 10 {
					wg.Go(func() {
						code, _, b := e.do(tok, "PUT", "/api/v1/sandboxes/by-name/ws-1", strings.NewReader(`{"profile":"tuist-linux-small","labels":{"k":"v"}}`))
						var v sbView
						_ = json.Unmarshal(b, &v)
						answers <- answer{code, v.ID}
					})
				}
				wg.Wait()
				close(answers)
				codes := map[int]int{}
				ids := map[string]bool{}
				for a := range answers {
					codes[a.code]++
					ids[a.id] = true
				}
				if codes[201] != 1 || codes[200] != 9 || len(ids) != 1 {
					t.Fatalf("%s: statuses %v, sandboxes %v; want one 201, nine 200, one sandbox", tok, codes, ids)
				}
			}
			e.send("dev", "PUT", "/api/v1/sandboxes/by-name/ws-1", `{"name":"ws-2"}`, 422, nil)
			e.send("dev", "PUT", "/api/v1/sandboxes/by-name/Bad_Name", `{}`, 422, nil)

		})
	}
}

// TestMCPStopStartEnsure: ensure_sandbox makes one sandbox by name and
// returns it again; suspend_sandbox and resume_sandbox park it and bring
// it back by name, their answers matching their output schemas.
func TestMCPStopStartEnsure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)
	first, isErr := call(t, s, "ensure_sandbox", map[string]any{"name": "agent-ws", "profile": "tuist-linux-small"})
	if isErr || first["id"] == nil {
		t.Fatalf("ensure_sandbox: %v", first)
	}
	if again, isErr := call(t, s, "ensure_sandbox", map[string]any{"name": "agent-ws", "profile": "tuist-linux-small"}); isErr || again["id"] != first["id"] {
		t.Fatalf("second ensure_sandbox: %v, want %v", again, first["id"])
	}
	if got, isErr := call(t, s, "wait_sandbox_ready", map[string]any{"sandbox_id": "agent-ws"}); isErr || got["status"] != "ready" {
		t.Fatalf("wait_sandbox_ready by name: %v", got)
	}
	if got, isErr := call(t, s, "suspend_sandbox", map[string]any{"sandbox_id": "agent-ws"}); isErr || (got["status"] != "suspending" && got["status"] != "suspended") {
		t.Fatalf("suspend_sandbox: %v", got)
	}
	e.waitStatus(first["id"].(string), "suspended")
	if got, isErr := call(t, s, "resume_sandbox", map[string]any{"sandbox_id": "agent-ws"}); isErr || got["status"] != "ready" {
		t.Fatalf("resume_sandbox: %v", got)
	}
}
