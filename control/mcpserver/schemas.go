package mcpserver

import (
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
)

// contract reads JSON schemas out of the API's OpenAPI document, so tool
// inputs are described by the same schemas the REST API validates
// against (and the generated client is built from).
type contract struct {
	doc map[string]any
}

func newContract(openapi []byte) (*contract, error) {
	var doc map[string]any
	if err := json.Unmarshal(openapi, &doc); err != nil {
		return nil, fmt.Errorf("read openapi document: %w", err)
	}
	return &contract{doc: doc}, nil
}

// at returns the value at a JSON pointer ("#/components/schemas/X") with
// every $ref inside it inlined.
func (c *contract) at(ptr string) (map[string]any, error) {
	v, err := c.lookup(ptr)
	if err != nil {
		return nil, err
	}
	out, err := c.inline(v, 0)
	if err != nil {
		return nil, err
	}
	m, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", ptr)
	}
	return m, nil
}

func (c *contract) lookup(ptr string) (any, error) {
	var v any = c.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "#/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("openapi: %s: %q is not in an object", ptr, tok)
		}
		if v, ok = m[tok]; !ok {
			return nil, fmt.Errorf("openapi: %s: no %q", ptr, tok)
		}
	}
	return v, nil
}

// inline copies v with $refs replaced by what they point at. The
// contract's schemas are not recursive; depth guards against a cycle.
func (c *contract) inline(v any, depth int) (any, error) {
	if depth > 32 {
		return nil, fmt.Errorf("openapi: $ref nesting too deep (a cycle?)")
	}
	switch t := v.(type) {
	case map[string]any:
		if ref, ok := t["$ref"].(string); ok {
			target, err := c.lookup(ref)
			if err != nil {
				return nil, err
			}
			return c.inline(target, depth+1)
		}
		out := make(map[string]any, len(t))
		if err := inlineEach(c, maps.All(t), depth, func(k string, y any) { out[k] = y }); err != nil {
			return nil, err
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		if err := inlineEach(c, slices.All(t), depth, func(i int, y any) { out[i] = y }); err != nil {
			return nil, err
		}
		return out, nil
	}
	return v, nil
}

// inlineEach inlines each value of an object's members or an array's
// elements one level down, handing set the copy under the same key.
func inlineEach[K comparable](c *contract, all iter.Seq2[K, any], depth int, set func(K, any)) error {
	for k, x := range all {
		y, err := c.inline(x, depth+1)
		if err != nil {
			return err
		}
		set(k, y)
	}
	return nil
}

// param returns the schema of a parameter of a path ("id" of
// /api/v1/sandboxes/{id}), with its description.
func (c *contract) param(path, method, name string) (map[string]any, error) {
	esc := escapePointer(path)
	for _, where := range []string{"#/paths/" + esc + "/parameters", "#/paths/" + esc + "/" + method + "/parameters"} {
		v, err := c.lookup(where)
		if err != nil {
			continue
		}
		list, _ := v.([]any)
		for _, p := range list {
			pm, _ := p.(map[string]any)
			if pm["name"] != name {
				continue
			}
			s, err := c.inline(pm["schema"], 0)
			if err != nil {
				return nil, err
			}
			sm, _ := s.(map[string]any)
			sm = maps.Clone(sm)
			if d, ok := pm["description"].(string); ok {
				sm["description"] = d
			}
			return sm, nil
		}
	}
	return nil, fmt.Errorf("openapi: no parameter %q on %s %s", name, method, path)
}

// escapePointer escapes s as one JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// object builds a tool's input schema: an object of the given properties
// (and those of base, when not nil), closed to others.
func object(base map[string]any, props map[string]any, required ...string) map[string]any {
	out := map[string]any{"type": "object", "additionalProperties": false}
	all := map[string]any{}
	var req []string
	if base != nil {
		if p, ok := base["properties"].(map[string]any); ok {
			maps.Copy(all, p)
		}
		if r, ok := base["required"].([]any); ok {
			for _, x := range r {
				if s, ok := x.(string); ok {
					req = append(req, s)
				}
			}
		}
		if d, ok := base["description"].(string); ok {
			out["description"] = d
		}
	}
	maps.Copy(all, props)
	req = append(req, required...)
	slices.Sort(req)
	out["properties"] = all
	if len(req) > 0 { // an empty "required" must be absent, not null
		out["required"] = slices.Compact(req)
	}
	return out
}
