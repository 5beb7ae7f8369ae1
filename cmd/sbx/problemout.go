package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// The exit codes beyond explain's 1 to 5 (see exitCodesHelp): a shell's
// own conventions, so scripts treat sbx like timeout(1) and any program
// stopped by Ctrl-C.
const (
	exitTimedOut    = 124
	exitInterrupted = 130
)

// exitCodeNames are the problem codes of a failure the API did not
// describe itself, one per exit code.
var exitCodeNames = map[int]string{
	1:               "request_failed",
	2:               "usage",
	3:               "api_unreachable",
	4:               "unauthenticated",
	5:               "not_found",
	exitTimedOut:    "timed_out",
	exitInterrupted: "interrupted",
}

// cliProblem is a failure as -o json reports it: the API's problem
// document when the API answered one, with the CLI's one-line detail and
// its exit code, so a script reads the same fields either way.
type cliProblem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status,omitempty"`
	Code     string `json:"code"`
	Detail   string `json:"detail"`
	ExitCode int    `json:"exit_code"`
}

// writeProblem writes the failure as one JSON line on w (stderr: stdout
// stays what the command printed, if anything).
func writeProblem(w io.Writer, code int, msg string, err error) {
	p := cliProblem{Type: "about:blank", Code: exitCodeNames[code], Detail: msg, ExitCode: code}
	if p.Code == "" {
		p.Code = "failed"
	}
	p.Title = strings.ReplaceAll(p.Code, "_", " ")
	var pe *apiError
	if errors.As(err, &pe) && code != exitInterrupted {
		p.Status, p.Title = pe.Status, pe.Title
		if pe.Code != "" {
			p.Code = pe.Code
		}
		if pe.Type != "" {
			p.Type = pe.Type
		}
	}
	b, _ := json.Marshal(p)
	_, _ = w.Write(append(b, '\n'))
}

// jsonRequested reports whether args ask for -o json, for an error found
// before the flags were parsed (an unknown flag, a bad argument).
func jsonRequested(args []string) bool {
	for i, arg := range args {
		switch {
		case arg == "--":
			return false
		case arg == "-ojson" || arg == "--output=json" || arg == "-o=json":
			return true
		case (arg == "-o" || arg == "--output") && i+1 < len(args) && args[i+1] == "json":
			return true
		}
	}
	return false
}

// timedOutError is a command the API killed at its timeout: exit 124, as
// timeout(1) exits.
type timedOutError struct{ msg string }

func (e *timedOutError) Error() string { return e.msg }
