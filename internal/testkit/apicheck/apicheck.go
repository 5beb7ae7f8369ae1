// Package apicheck validates API responses against the OpenAPI document in
// tests, so the server and its contract cannot drift apart silently.
package apicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Checker validates JSON bodies against the response schemas of the
// OpenAPI document (JSON Schema 2020-12, as OpenAPI 3.1 uses).
type Checker struct {
	doc map[string]any
	// mu guards compil and cache: the compiler is not safe for concurrent
	// use, and tests send requests in parallel.
	mu     sync.Mutex
	compil *jsonschema.Compiler
	cache  map[string]*jsonschema.Schema
}

const docURL = "mem://openapi.json"

// New loads an OpenAPI document (control/api's OpenAPI()). It is passed
// in, so this kit under internal/ imports neither control nor the edge.
func New(t testing.TB, openapi []byte) *Checker {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(openapi, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(openapi))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, raw); err != nil {
		t.Fatalf("add openapi resource: %v", err)
	}
	return &Checker{doc: doc, compil: c, cache: map[string]*jsonschema.Schema{}}
}

// Paths returns "METHOD /path/{param}" for every operation in the document.
func (c *Checker) Paths() []string {
	var out []string
	for p, item := range c.doc["paths"].(map[string]any) {
		for m := range item.(map[string]any) {
			if m == "parameters" {
				continue
			}
			out = append(out, strings.ToUpper(m)+" "+p)
		}
	}
	return out
}

var paramRE = regexp.MustCompile(`\\\{[^/]+?\\\}`)

// route finds the document path matching a concrete URL path. {path}
// spans slashes (files); every other parameter is one segment.
func (c *Checker) route(urlPath string) (string, bool) {
	for p := range c.doc["paths"].(map[string]any) {
		re := paramRE.ReplaceAllStringFunc(regexp.QuoteMeta(p), func(m string) string {
			if m == `\{path\}` {
				return ".*"
			}
			return "[^/]+"
		})
		if regexp.MustCompile("^" + re + "$").MatchString(urlPath) {
			return p, true
		}
	}
	return "", false
}

// Check validates one response: its status must be documented for the
// operation, and a JSON body must match the documented schema.
func (c *Checker) Check(method, urlPath string, status int, contentType string, body []byte) error {
	p, ok := c.route(urlPath)
	if !ok {
		if status == 404 || status == 405 {
			// Unknown routes still answer with a problem document.
			return c.validate("#/components/schemas/Problem", method, urlPath, status, body)
		}
		return fmt.Errorf("%s %s: path not in the OpenAPI document", method, urlPath)
	}
	op, ok := c.doc["paths"].(map[string]any)[p].(map[string]any)[strings.ToLower(method)].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: method not documented for %s", method, urlPath, p)
	}
	responses := op["responses"].(map[string]any)
	code := strconv.Itoa(status)
	resp, ok := responses[code].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: status %d not documented (have %v)", method, urlPath, status, keys(responses))
	}
	mediaType, _, _ := strings.Cut(contentType, ";")
	mediaType = strings.TrimSpace(mediaType)
	var ptr string
	if ref, ok := resp["$ref"].(string); ok {
		// Shared responses (problems) live under components.
		name := strings.TrimPrefix(ref, "#/components/responses/")
		if mediaType != "application/problem+json" {
			return fmt.Errorf("%s %s %d: content type %q, want application/problem+json", method, urlPath, status, contentType)
		}
		ptr = "#/components/responses/" + name + "/content/application~1problem+json/schema"
	} else {
		content, _ := resp["content"].(map[string]any)
		if len(content) == 0 {
			if len(bytes.TrimSpace(body)) != 0 {
				return fmt.Errorf("%s %s %d: body present but none documented", method, urlPath, status)
			}
			return nil
		}
		if _, ok := content[mediaType]; !ok {
			return fmt.Errorf("%s %s %d: content type %q not documented", method, urlPath, status, contentType)
		}
		if mediaType != "application/json" {
			return nil
		}
		ptr = "#/paths/" + escape(p) + "/" + strings.ToLower(method) + "/responses/" + code + "/content/application~1json/schema"
	}
	return c.validate(ptr, method, urlPath, status, body)
}

func (c *Checker) validate(ptr, method, urlPath string, status int, body []byte) error {
	sch, err := c.schema(ptr)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s %d: body is not JSON: %w", method, urlPath, status, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s %s %d: body does not match the schema: %w\nbody: %s", method, urlPath, status, err, body)
	}
	return nil
}

func (c *Checker) schema(ptr string) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.cache[ptr]; ok {
		return s, nil
	}
	s, err := c.compil.Compile(docURL + ptr)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", ptr, err)
	}
	c.cache[ptr] = s
	return s, nil
}

func escape(p string) string {
	return strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Transport wraps an http.RoundTripper and validates every response it
// carries; failures are reported on t.
type Transport struct {
	T       testing.TB
	C       *Checker
	Base    http.RoundTripper
	MaxBody int64 // bodies larger than this (file downloads) are not buffered
}

// RoundTrip implements http.RoundTripper.
func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := tr.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	if !strings.Contains(ct, "json") {
		// Raw file bytes and text endpoints: status and type only.
		if err := tr.C.Check(req.Method, req.URL.Path, resp.StatusCode, ct, nil); err != nil {
			tr.T.Errorf("openapi: %v", err)
		}
		return resp, nil
	}
	body, err := readAll(resp, tr.MaxBody)
	if err != nil {
		return nil, err
	}
	if err := tr.C.Check(req.Method, req.URL.Path, resp.StatusCode, ct, body); err != nil {
		tr.T.Errorf("openapi: %v", err)
	}
	return resp, nil
}
