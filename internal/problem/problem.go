// Package problem writes RFC 9457 problem documents. Every error the API
// and the edge produce goes through Write, so clients see one shape.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// TypeBase prefixes every problem type URI. The URIs are stable
// identifiers clients may switch on; they need not resolve.
const TypeBase = "https://sbx.dev/problems/"

// Problem is an RFC 9457 problem document with our `code` extension.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Code is the short stable form of Type (e.g. "sandbox_not_found").
	Code string `json:"code"`
	// Errors lists per-field problems for 422 responses.
	Errors []FieldError `json:"errors,omitempty"`
	// Logs are the last log lines of what failed (a preview's service
	// that keeps exiting), oldest first.
	Logs []string `json:"logs,omitempty"`
	// SandboxID names the sandbox a refusal is about when the request
	// named it another way (control's internal ssh_not_ready answer to a
	// username that is the sandbox's name).
	SandboxID string `json:"sandbox_id,omitempty"`
	// RetryAfter, when set, is also sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

// FieldError names one invalid input.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// New builds a problem with a code; title defaults to the status text.
func New(status int, code, detail string) *Problem {
	return &Problem{
		Type:   TypeBase + code,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// Write sends p as application/problem+json.
func Write(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		secs := int((p.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
