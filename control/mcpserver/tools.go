package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// register adds every tool, each with its input schema from the contract.
func (t *tools) register(c *contract) error {
	schema := func(ptr string) map[string]any {
		s, err := c.at(ptr)
		if err != nil {
			panic(err) // caught below: the contract lacks what a tool mirrors
		}
		return s
	}
	var err error
	func() {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("mcpserver: build tool schemas: %v", v)
			}
		}()
		id, perr := c.param("/api/v1/sandboxes/{id}", "get", "id")
		if perr != nil {
			panic(perr)
		}
		id["description"] = "The sandbox's id (sbx-...) or name."
		filePath, perr := c.param("/api/v1/sandboxes/{id}/files/{path}", "get", "path")
		if perr != nil {
			panic(perr)
		}
		sandboxOnly := object(nil, map[string]any{"sandbox_id": id}, "sandbox_id")
		yes, no := true, false
		out := newOutputs(c)
		sandboxOut := out.api("/api/v1/sandboxes/{id}", "get", "200")

		create := schema("#/components/schemas/CreateSandbox")
		t.add(&mcp.Tool{Name: "create_sandbox", Title: "Create a sandbox",
			Description: "Create a sandbox (POST /api/v1/sandboxes). It starts pending; call wait_sandbox_ready before using it. " +
				"With repo, the repository is cloned into the workspace before the sandbox is ready; a clone that fails fails the sandbox " +
				"(wait_sandbox_ready says why). " +
				"Refused with the API's problem when the account's feature flag, platform allowlist or concurrency limit says no.",
			OutputSchema: out.api("/api/v1/sandboxes", "post", "201"),
			InputSchema: object(create, map[string]any{"idempotency_key": map[string]any{"type": "string",
				"description": "Retrying with the same key and arguments returns the same sandbox instead of a second one."}}),
			Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
		}, withArgs(t.createSandbox))

		t.add(&mcp.Tool{Name: "get_sandbox", Title: "Get a sandbox",
			Description: "A sandbox's state, deadline and ways in (GET /api/v1/sandboxes/{id}).",
			InputSchema: sandboxOnly, OutputSchema: sandboxOut,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.getSandbox))

		list, perr := listParams(c)
		if perr != nil {
			panic(perr)
		}
		t.add(&mcp.Tool{Name: "list_sandboxes", Title: "List sandboxes",
			Description: "The account's sandboxes, newest first, a page at a time (GET /api/v1/sandboxes).",
			InputSchema: list, OutputSchema: out.api("/api/v1/sandboxes", "get", "200"),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.listSandboxes))

		exec := schema("#/components/schemas/ExecRequest")
		delete(exec["properties"].(map[string]any), "stream")
		t.registerExec(exec, id, out)

		pathArg := func(desc string) map[string]any {
			p := map[string]any{}
			for k, v := range filePath {
				p[k] = v
			}
			p["description"] = desc
			return p
		}
		t.add(&mcp.Tool{Name: "read_sandbox_file", Title: "Read a file",
			Description: fmt.Sprintf("Read a file of the workspace (GET /api/v1/sandboxes/{id}/files/{path}). Text comes as text; "+
				"other content as base64 with its mime type. Files over %d bytes are refused: download them from that endpoint.", t.cfg.MaxFileBytes),
			InputSchema:  object(nil, map[string]any{"sandbox_id": id, "path": pathArg("File path relative to the workspace.")}, "sandbox_id", "path"),
			OutputSchema: typed[fileContent](out),
			Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.readFile))

		t.add(&mcp.Tool{Name: "write_sandbox_file", Title: "Write a file",
			Description: fmt.Sprintf("Create or replace a file of the workspace, making its folders (PUT /api/v1/sandboxes/{id}/files/{path}). "+
				"Binary content goes as base64 (encoding: base64). Content over %d bytes is refused: upload it to that endpoint.", t.cfg.MaxFileBytes),
			InputSchema: object(nil, map[string]any{
				"sandbox_id": id,
				"path":       pathArg("File path relative to the workspace."),
				"content":    map[string]any{"type": "string", "description": "The file's content, as text or base64 (see encoding)."},
				"encoding":   map[string]any{"type": "string", "enum": []any{"utf-8", "base64"}, "default": "utf-8"},
				"mime_type":  map[string]any{"type": "string", "description": "What the content is (informational; echoed back)."},
			}, "sandbox_id", "path", "content"),
			OutputSchema: typed[fileWritten](out),
			Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
		}, withArgs(t.writeFile))

		t.add(&mcp.Tool{Name: "list_sandbox_files", Title: "List a folder",
			Description: "The entries of a workspace folder (GET /api/v1/sandboxes/{id}/files/{path} on a folder).",
			InputSchema: object(nil, map[string]any{"sandbox_id": id,
				"path": pathArg("Folder path relative to the workspace; empty for the workspace itself.")}, "sandbox_id"),
			OutputSchema: out.api("/api/v1/sandboxes/{id}/files/{path}", "get", "200"),
			Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.listFiles))

		port := schema("#/components/schemas/PortRequest")
		t.add(&mcp.Tool{Name: "expose_sandbox_port", Title: "Expose a port",
			Description:  "Give a port the sandbox listens on a preview URL (POST /api/v1/sandboxes/{id}/ports).",
			InputSchema:  object(port, map[string]any{"sandbox_id": id}, "sandbox_id"),
			OutputSchema: out.api("/api/v1/sandboxes/{id}/ports", "post", "201"),
			Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &yes},
		}, withArgs(t.exposePort))

		svcName, perr := c.param("/api/v1/sandboxes/{id}/services/{name}", "put", "name")
		if perr != nil {
			panic(perr)
		}
		svcName["description"] = "The service's name."
		svcArgs := map[string]any{"sandbox_id": id, "name": svcName}
		t.add(&mcp.Tool{Name: "set_sandbox_service", Title: "Declare a service",
			Description: "Declare or replace a long-running service of the sandbox, such as a dev server, and (re)start it " +
				"(PUT /api/v1/sandboxes/{id}/services/{name}). It restarts with backoff when it exits and starts again after every wake; " +
				"with a port it is running only once something answers there.",
			InputSchema:  object(schema("#/components/schemas/ServiceRequest"), svcArgs, "sandbox_id", "name"),
			OutputSchema: out.api("/api/v1/sandboxes/{id}/services/{name}", "put", "200"),
			Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
		}, withArgs(t.setService))

		t.add(&mcp.Tool{Name: "list_sandbox_services", Title: "List services",
			Description: "The sandbox's services with their state, port, last exit code and last start (GET /api/v1/sandboxes/{id}/services).",
			InputSchema: sandboxOnly, OutputSchema: out.api("/api/v1/sandboxes/{id}/services", "get", "200"),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.listServices))

		t.add(&mcp.Tool{Name: "delete_sandbox_service", Title: "Remove a service",
			Description:  "Stop a service and remove its declaration (DELETE /api/v1/sandboxes/{id}/services/{name}).",
			InputSchema:  object(nil, svcArgs, "sandbox_id", "name"),
			OutputSchema: typed[serviceDeleted](out),
			Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false},
		}, withArgs(t.deleteService))

		tail, perr := c.param("/api/v1/sandboxes/{id}/services/{name}/logs", "get", "tail")
		if perr != nil {
			panic(perr)
		}
		tail["description"] = "How many of the last lines to read."
		t.add(&mcp.Tool{Name: "read_sandbox_service_logs", Title: "Read a service's logs",
			Description: "The last lines of a service's stdout and stderr, merged, with the init's start and exit lines " +
				"(GET /api/v1/sandboxes/{id}/services/{name}/logs). The sandbox must be ready.",
			InputSchema:  object(nil, map[string]any{"sandbox_id": id, "name": svcName, "tail": tail}, "sandbox_id", "name"),
			OutputSchema: typed[serviceLogs](out),
			Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.serviceLogs))

		t.add(&mcp.Tool{Name: "destroy_sandbox", Title: "Destroy a sandbox",
			Description: "Destroy a sandbox and its workspace; billing stops (DELETE /api/v1/sandboxes/{id}). Idempotent. " +
				"Its snapshots are kept (they are the account's, billed until deleted) unless delete_snapshots is true.",
			InputSchema: object(nil, map[string]any{"sandbox_id": id, "delete_snapshots": map[string]any{"type": "boolean",
				"description": "also delete the sandbox's snapshots (default false: they outlive it)"}}, "sandbox_id"), OutputSchema: out.api("/api/v1/sandboxes/{id}", "delete", "200"),
			Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
		}, withArgs(t.destroySandbox))

		extend, perr := c.at("#/paths/~1api~1v1~1sandboxes~1{id}/patch/requestBody/content/application~1json/schema")
		if perr != nil {
			panic(perr)
		}
		t.add(&mcp.Tool{Name: "extend_sandbox", Title: "Extend a sandbox's deadline",
			Description:  "Set the deadline to now + deadline_minutes, within the 7-day cap (PATCH /api/v1/sandboxes/{id}).",
			InputSchema:  object(extend, map[string]any{"sandbox_id": id}, "sandbox_id"),
			OutputSchema: out.api("/api/v1/sandboxes/{id}", "patch", "200"),
			Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true},
		}, withArgs(t.extendSandbox))
		t.add(&mcp.Tool{Name: "update_sandbox", Title: "Change a sandbox's settings",
			Description: "Change any of a sandbox's idle_timeout_minutes (1 to the account's idle timeout), keep_awake_while_busy, " +
				"retention_days (days it may stay suspended before it is deleted), labels, wake_on_traffic, network or deadline " +
				"(PATCH /api/v1/sandboxes/{id}); fields left out are left alone, and a value out of range is an error naming the field and the range.",
			InputSchema:  object(extend, map[string]any{"sandbox_id": id}, "sandbox_id"),
			OutputSchema: out.api("/api/v1/sandboxes/{id}", "patch", "200"),
			Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true},
		}, withArgs(t.extendSandbox))

		t.add(&mcp.Tool{Name: "wait_sandbox_ready", Title: "Wait until a sandbox is ready",
			Description: "Wait on the sandbox's event stream (GET /api/v1/sandboxes/{id}/events) until it is ready, " +
				"and answer with the sandbox; a sandbox that fails or ends instead is an error saying why.",
			InputSchema: object(nil, map[string]any{"sandbox_id": id,
				"timeout_seconds": map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": 3600, "default": 300,
					"description": "How long to wait before giving up (the sandbox keeps starting)."}}, "sandbox_id"),
			OutputSchema: sandboxOut,
			Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
		}, withArgs(t.waitReady))
		t.registerStopStart(c, id, out)
		t.registerSnapshots(c, id, out)
		t.registerMore(c, id, out)
		t.registerConnections(id, out)
		if out.err != nil {
			panic(out.err)
		}
	}()
	return err
}

// listParams is list_sandboxes' input: the query parameters of GET
// /api/v1/sandboxes.
func listParams(c *contract) (map[string]any, error) {
	props := map[string]any{}
	for _, name := range []string{"limit", "cursor", "status", "name", "label"} {
		s, err := c.param("/api/v1/sandboxes", "get", name)
		if err != nil {
			return nil, err
		}
		props[name] = s
	}
	return object(nil, props), nil
}

type sandboxArgs struct {
	SandboxID string `json:"sandbox_id"`
}

func (t *tools) createSandbox(ctx context.Context, req *mcp.CallToolRequest, args struct {
	apiclient.CreateSandbox
	IdempotencyKey *string `json:"idempotency_key"`
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.CreateSandboxWithResponse(ctx, &apiclient.CreateSandboxParams{IdempotencyKey: args.IdempotencyKey},
		args.CreateSandbox, auth))
}

func (t *tools) getSandbox(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.GetSandboxWithResponse(ctx, args.SandboxID, auth))
}

func (t *tools) listSandboxes(ctx context.Context, req *mcp.CallToolRequest, args apiclient.ListSandboxesParams, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ListSandboxesWithResponse(ctx, &args, auth))
}

func (t *tools) destroySandbox(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	apiclient.DeleteSandboxParams
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.DeleteSandboxWithResponse(ctx, args.SandboxID, &args.DeleteSandboxParams, auth))
}

func (t *tools) extendSandbox(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	apiclient.UpdateSandboxJSONBody
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.UpdateSandboxWithResponse(ctx, args.SandboxID, apiclient.UpdateSandboxJSONRequestBody(args.UpdateSandboxJSONBody), auth))
}

func (t *tools) exposePort(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	apiclient.PortRequest
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ExposePortWithResponse(ctx, args.SandboxID, args.PortRequest, auth))
}

// waitReady follows the event stream from its start, so a sandbox that
// turned ready before the call still answers at once.
func (t *tools) waitReady(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}, auth apiclient.RequestEditorFn) (any, error) {
	limit := 300 * time.Second
	if args.TimeoutSeconds != nil {
		if *args.TimeoutSeconds <= 0 || *args.TimeoutSeconds > 3600 {
			return nil, &argsError{errors.New("timeout_seconds must be in (0, 3600]")}
		}
		limit = time.Duration(*args.TimeoutSeconds * float64(time.Second))
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var final apiclient.Status
	why := "" // the final state's message: a failed clone's git error
	err := apiclient.WatchEvents(wctx, t.api, args.SandboxID, 0, func(e apiclient.Event) (bool, error) {
		if e.Type != "state" || e.State == nil {
			return true, nil
		}
		switch *e.State {
		case "ready", "failed", "terminating", "terminated":
			final = *e.State
			if e.Message != nil {
				why = ": " + *e.Message
			}
			return false, nil
		}
		return true, nil
	}, auth)
	if err != nil && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
		return nil, err
	}
	r, gerr := apiclient.Result(t.api.GetSandboxWithResponse(ctx, args.SandboxID, auth))
	if gerr != nil {
		return nil, gerr
	}
	switch {
	case final == "ready":
		return json.RawMessage(r.Body), nil
	case final == "":
		if err != nil {
			return nil, &toolErr{status: http.StatusGatewayTimeout, code: "timeout",
				detail: fmt.Sprintf("the sandbox is still %s after %s; call wait_sandbox_ready again", r.JSON200.Status, limit)}
		}
		// The stream ended without a state we wait for: read the state.
		if r.JSON200.Status == "ready" {
			return json.RawMessage(r.Body), nil
		}
	}
	reason := ""
	if r.JSON200.EndReason != nil {
		reason = " (" + *r.JSON200.EndReason + ")"
	}
	return nil, &toolErr{status: http.StatusConflict, code: "sandbox_state",
		detail: fmt.Sprintf("the sandbox will not become ready: it is %s%s%s", r.JSON200.Status, reason, why)}
}

type serviceArgs struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name"`
}

func (t *tools) setService(ctx context.Context, req *mcp.CallToolRequest, args struct {
	serviceArgs
	apiclient.ServiceRequest
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.PutServiceWithResponse(ctx, args.SandboxID, args.Name, args.ServiceRequest, auth))
}

func (t *tools) listServices(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ListServicesWithResponse(ctx, args.SandboxID, auth))
}

// deleteService answers with what was removed: the API's 204 has no body.
func (t *tools) deleteService(ctx context.Context, req *mcp.CallToolRequest, args serviceArgs, auth apiclient.RequestEditorFn) (any, error) {
	if _, err := apiclient.Result(t.api.DeleteServiceWithResponse(ctx, args.SandboxID, args.Name, auth)); err != nil {
		return nil, err
	}
	return serviceDeleted{SandboxID: args.SandboxID, Name: args.Name, Deleted: true}, nil
}

// serviceDeleted is delete_sandbox_service's result.
type serviceDeleted struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name"`
	Deleted   bool   `json:"deleted"`
}

// serviceLogs is read_sandbox_service_logs' result.
type serviceLogs struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name"`
	// Text is the lines, each ending in a newline.
	Text string `json:"text"`
}

// serviceLogs reads the tail only: a tool call answers once, so following
// is left to the REST stream.
func (t *tools) serviceLogs(ctx context.Context, req *mcp.CallToolRequest, args struct {
	serviceArgs
	Tail *int `json:"tail"`
}, auth apiclient.RequestEditorFn) (any, error) {
	body, err := apiclient.Raw(t.api.ServiceLogsWithResponse(ctx, args.SandboxID, args.Name, &apiclient.ServiceLogsParams{Tail: args.Tail}, auth))
	if err != nil {
		return nil, err
	}
	return serviceLogs{SandboxID: args.SandboxID, Name: args.Name, Text: string(body)}, nil
}
