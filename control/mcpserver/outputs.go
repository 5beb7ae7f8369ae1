package mcpserver

import (
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// Output schemas. A tool that answers with an API body declares the API's
// own response schema, read from the contract like its input; a tool that
// builds its answer declares the schema the MCP SDK infers from the Go
// type it answers with. Either way the schema also admits the problem
// document a tool error (isError) carries as its structured content:
// clients validate error results against the output schema as well (the
// TypeScript SDK's callTool does).

// outputs builds output schemas; err keeps the first failure.
type outputs struct {
	c       *contract
	problem map[string]any
	err     error
}

func newOutputs(c *contract) *outputs {
	o := &outputs{c: c}
	o.problem = o.inferred(inferSchema[toolProblem])
	return o
}

// api is the schema of the JSON body an operation answers with.
func (o *outputs) api(path, method, code string) map[string]any {
	esc := "#/paths/" + escapePointer(path) + "/" + method + "/responses/" + code + "/content/application~1json/schema"
	s, err := o.c.at(esc)
	if err != nil && o.err == nil {
		o.err = fmt.Errorf("output schema of %s %s: %w", method, path, err)
	}
	return o.orProblem(s)
}

// typed is the schema inferred from T, the Go type a tool answers with.
func typed[T any](o *outputs) map[string]any {
	return o.orProblem(o.inferred(inferSchema[T]))
}

func (o *outputs) inferred(infer func() (map[string]any, error)) map[string]any {
	s, err := infer()
	if err != nil && o.err == nil {
		o.err = err
	}
	return s
}

// orProblem is result or a tool error's problem. MCP wants an object
// schema at the top.
func (o *outputs) orProblem(result map[string]any) map[string]any {
	return map[string]any{
		"type":        "object",
		"description": "The tool's result; a tool error (isError) carries the API's problem document instead.",
		"anyOf":       []any{result, o.problem},
	}
}

// inferSchema is the JSON schema the MCP SDK infers for T, as a map.
func inferSchema[T any]() (map[string]any, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("infer output schema: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode output schema: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode output schema: %w", err)
	}
	return m, nil
}
