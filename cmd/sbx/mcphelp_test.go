package main

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	controlapi "github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/mcpserver"
)

// TestMCPHelpListsEveryTool asks the server for its tools over the
// protocol, as an agent does, and checks `sbx mcp --help` lists each
// one, and nothing else, under Tools.
func TestMCPHelpListsEveryTool(t *testing.T) {
	cliEnv(t, "http://127.0.0.1:1")
	api, err := apiclient.New("http://127.0.0.1:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Config{API: api, OpenAPI: controlapi.OpenAPI(), Execs: mcpserver.NewExecs(mcpserver.ExecsConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	served := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		served[tool.Name] = true
	}
	if len(served) == 0 {
		t.Fatal("the server lists no tools")
	}

	code, out, errOut := runCLI(t, "", "mcp", "--help")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, list, ok := strings.Cut(out, "\nTools:\n")
	if !ok {
		t.Fatalf("help has no Tools section:\n%s", out)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	listed := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[f[0]] = true
		}
	}
	for name := range served {
		if !listed[name] {
			t.Errorf("the server offers %s; sbx mcp --help does not list it", name)
		}
	}
	for name := range listed {
		if !served[name] {
			t.Errorf("sbx mcp --help lists %s; the server does not offer it", name)
		}
	}
}
