package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	controlapi "github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/mcpserver"
)

// slowExec is an exec endpoint whose command prints a line, then runs
// until released (printing a last line and exiting 0) or until its
// request ends (the API ends the command then; ended counts those).
type slowExec struct {
	release chan struct{}
	mu      sync.Mutex
	ended   int
	started int
}

func (f *slowExec) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/exec") {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	f.started++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(s string) {
		b, _ := json.Marshal(apiclient.ExecChunk{Data: s, Encoding: "utf-8"})
		fmt.Fprintf(w, "event: stdout\ndata: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk("tick 1\n")
	select {
	case <-f.release:
		chunk("done\n")
		fmt.Fprint(w, "event: exit\ndata: {\"exit_code\":0,\"duration_ms\":5,\"signal\":null,\"timed_out\":false,\"truncated\":false,\"stdout_truncated\":false,\"stderr_truncated\":false}\n\n")
	case <-r.Context().Done():
		f.mu.Lock()
		f.ended++
		f.mu.Unlock()
	}
}

// waitEnded is the count of ended requests once it reaches n, or after
// 5 s: the server learns of a client's end a moment after the client.
func (f *slowExec) waitEnded(n int) int {
	for i := 0; i < 100 && f.endedCount() < n; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	return f.endedCount()
}

func (f *slowExec) endedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

// execSession is an MCP client session on a server whose exec bound is
// bound and which holds at most max commands.
func execSession(t *testing.T, fake *slowExec, bound time.Duration, max int) (*mcp.ClientSession, *mcpserver.Execs) {
	t.Helper()
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	api, err := apiclient.New(ts.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	execs := mcpserver.NewExecs(mcpserver.ExecsConfig{Bound: bound, Max: max})
	t.Cleanup(execs.Close) // before ts.Close: cleanups run last-in first-out
	srv, err := mcpserver.New(mcpserver.Config{API: api, OpenAPI: controlapi.OpenAPI(), Execs: execs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, execs
}

type execAnswer struct {
	ExecID     string `json:"exec_id"`
	Running    bool   `json:"running"`
	ExitCode   *int   `json:"exit_code"`
	Killed     bool   `json:"killed"`
	Stdout     string `json:"stdout"`
	StdoutNext int    `json:"stdout_next_offset"`
	Data       string `json:"data"`
	Code       string `json:"code"`
}

func callExec(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (execAnswer, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var a execAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s: %s: %v", tool, b, err)
	}
	return a, res.IsError
}

// TestLongExecFlow: a command outliving the bound answers with a handle
// and the output so far; wait_exec from the offset given answers only
// what followed, then the exit; read_exec_output reads it all by offset.
func TestLongExecFlow(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after every other cleanup
	fake := &slowExec{release: make(chan struct{})}
	cs, _ := execSession(t, fake, 300*time.Millisecond, 4)
	ctx := context.Background()

	start := time.Now()
	first, isErr := callExec(t, ctx, cs, "exec_in_sandbox", map[string]any{"sandbox_id": "sbx-1", "command": "slow"})
	if isErr || !first.Running || first.ExecID == "" || first.ExitCode != nil || first.Stdout != "tick 1\n" || first.StdoutNext != 7 {
		t.Fatalf("exec_in_sandbox: %+v (error %v), want a running command's handle with its first line", first, isErr)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("exec_in_sandbox answered after %s, want the 300ms bound", d)
	}
	still, _ := callExec(t, ctx, cs, "wait_exec", map[string]any{"exec_id": first.ExecID, "stdout_offset": first.StdoutNext})
	if !still.Running || still.Stdout != "" {
		t.Fatalf("wait_exec before the end: %+v, want still running with no new output", still)
	}
	close(fake.release)
	done, _ := callExec(t, ctx, cs, "wait_exec", map[string]any{"exec_id": first.ExecID, "stdout_offset": first.StdoutNext})
	if done.Running || done.ExitCode == nil || *done.ExitCode != 0 || done.Stdout != "done\n" {
		t.Fatalf("wait_exec after the end: %+v, want exit 0 and only the new line", done)
	}
	read, _ := callExec(t, ctx, cs, "read_exec_output", map[string]any{"exec_id": first.ExecID, "offset": 2, "limit": 5})
	if read.Data != "ck 1\n" {
		t.Errorf("read_exec_output from 2, 5 bytes: %+v", read)
	}
	if fake.endedCount() != 0 {
		t.Errorf("the command's request was ended %d times, want it to run to its exit", fake.endedCount())
	}
}

// TestLongExecOutlivesCall: an exec call cancelled before it answered
// ends its command (nobody holds its handle); a wait_exec call cancelled
// does not; kill_exec ends it in the sandbox; at the cap a new exec is
// refused while the others run; Close ends what still runs and leaves no
// goroutine behind.
func TestLongExecOutlivesCall(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after every other cleanup
	fake := &slowExec{release: make(chan struct{})}
	cs, execs := execSession(t, fake, 2*time.Second, 2)

	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "exec_in_sandbox", Arguments: map[string]any{"sandbox_id": "sbx-1", "command": "slow"}})
	cancel()
	if err == nil {
		t.Fatal("the call outlived its client's 200ms timeout")
	}
	if fake.waitEnded(1) != 1 {
		t.Fatalf("an exec call cancelled before it answered left its command running")
	}
	ctx := context.Background()
	second, _ := callExec(t, ctx, cs, "exec_in_sandbox", map[string]any{"sandbox_id": "sbx-1", "command": "slow"})
	third, _ := callExec(t, ctx, cs, "exec_in_sandbox", map[string]any{"sandbox_id": "sbx-1", "command": "slow"})
	if !second.Running || !third.Running {
		t.Fatalf("second and third exec: %+v %+v", second, third)
	}
	refused, isErr := callExec(t, ctx, cs, "exec_in_sandbox", map[string]any{"sandbox_id": "sbx-1", "command": "slow"})
	if !isErr || refused.Code != "too_many_execs" {
		t.Fatalf("exec at the cap of 2: %+v (error %v), want too_many_execs", refused, isErr)
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = cs.CallTool(wctx, &mcp.CallToolParams{Name: "wait_exec", Arguments: map[string]any{"exec_id": second.ExecID}})
	wcancel()
	if err == nil {
		t.Fatal("wait_exec outlived its client's 200ms timeout")
	}
	if still, _ := callExec(t, ctx, cs, "wait_exec", map[string]any{"exec_id": second.ExecID, "wait_seconds": 0.1}); !still.Running || fake.endedCount() != 1 {
		t.Fatalf("after a cancelled wait_exec: %+v, %d ended; want the command still running", still, fake.endedCount())
	}
	killed, _ := callExec(t, ctx, cs, "kill_exec", map[string]any{"exec_id": second.ExecID})
	if killed.Running || !killed.Killed || killed.ExitCode != nil || fake.waitEnded(2) != 2 {
		t.Fatalf("kill_exec: %+v, %d requests ended; want it killed and its request ended", killed, fake.endedCount())
	}
	// At the cap the oldest ended command is forgotten to make room (the
	// third exec above took the cancelled one's place the same way).
	if fourth, isErr := callExec(t, ctx, cs, "exec_in_sandbox", map[string]any{"sandbox_id": "sbx-1", "command": "slow"}); isErr || !fourth.Running {
		t.Fatalf("exec after a kill freed a place: %+v (error %v)", fourth, isErr)
	}
	if gone, isErr := callExec(t, ctx, cs, "wait_exec", map[string]any{"exec_id": second.ExecID}); !isErr || gone.Code != "exec_not_found" {
		t.Errorf("the killed command, forgotten at the cap: %+v (error %v), want exec_not_found", gone, isErr)
	}
	other, isErr := callExec(t, ctx, cs, "wait_exec", map[string]any{"exec_id": "exec-000000000000000000000000"})
	if !isErr || other.Code != "exec_not_found" {
		t.Errorf("wait_exec on an unknown handle: %+v", other)
	}
	execs.Close()
	if fake.waitEnded(4) != 4 {
		t.Errorf("after Close %d commands were ended, want all 4", fake.endedCount())
	}
}
