package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/sbxedge/sbx/internal/problem"
)

// decode reads a bounded JSON body strictly: no unknown fields, one value,
// and no key twice in one object at any depth (encoding/json would keep
// the last, so two readers of one body could disagree on what it says).
// It answers the request itself and returns false on any problem.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxJSONBody))
	if err == nil {
		if path, ok := duplicateKey(data); ok {
			p := problem.New(http.StatusBadRequest, "duplicate_key",
				fmt.Sprintf("request body has the key %s more than once in one object", strconv.Quote(path)))
			p.Errors = []problem.FieldError{{Field: path, Detail: "appears more than once"}}
			writeProblem(w, r, p)
			return false
		}
		if string(bytes.TrimSpace(data)) == "null" {
			// encoding/json takes null into a struct as "nothing to set",
			// so it would pass for {}: a POST /sandboxes of null created a
			// sandbox of the default profile.
			writeProblem(w, r, problem.New(http.StatusUnprocessableEntity, "invalid_request",
				"the request body must be a JSON object, not null"))
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
		if err == nil {
			if _, extra := dec.Token(); extra != io.EOF {
				err = errors.New("body holds more than one JSON value")
			}
		}
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, r, problem.New(http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit)))
	case errors.As(err, &typeErr) && typeErr.Field == "":
		writeProblem(w, r, problem.New(http.StatusUnprocessableEntity, "invalid_request",
			"the request body must be a JSON object, not "+article(typeErr.Value)))
	case errors.As(err, &typeErr):
		writeProblem(w, r, unprocessable(typeErr.Field, "must be "+jsonKind(typeErr.Type)+", not "+article(typeErr.Value)))
	case errors.As(err, &syntax), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		writeProblem(w, r, problem.New(http.StatusBadRequest, "malformed_json", "request body is not valid JSON: "+err.Error()))
	default:
		writeProblem(w, r, problem.New(http.StatusBadRequest, "malformed_json", err.Error()))
	}
	return false
}

// jsonFrame is one open object or array while duplicateKey walks a body.
type jsonFrame struct {
	path string
	// seen holds an object's keys so far; nil for an array.
	seen    map[string]bool
	key     string // the key whose value comes next
	wantKey bool
	index   int // an array's next element
}

func (f *jsonFrame) child() string {
	if f.seen == nil {
		return f.path + "[" + strconv.Itoa(f.index) + "]"
	}
	if f.path == "" {
		return f.key
	}
	return f.path + "." + f.key
}

// valueDone moves f past the value just read.
func (f *jsonFrame) valueDone() {
	if f.seen == nil {
		f.index++
	} else {
		f.wantKey = true
	}
}

// duplicateKey finds the first key that appears twice in one object of
// the first JSON value in data, and returns its path (grants[1].scopes).
// Keys are compared exactly, as JSON defines them. A body that is not
// valid JSON has no duplicate here; the decoder reports what is wrong.
func duplicateKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // no float parsing of numbers only skipped over
	var stack []*jsonFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.seen != nil && top.wantKey {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
			} else {
				k, _ := tok.(string)
				top.key, top.wantKey = k, false
				if top.seen[k] {
					return top.child(), true
				}
				top.seen[k] = true
				continue
			}
		} else {
			switch tok {
			case json.Delim('{'), json.Delim('['):
				f := &jsonFrame{wantKey: true}
				if tok == json.Delim('{') {
					f.seen = map[string]bool{}
				}
				if top != nil {
					f.path = top.child()
				}
				stack = append(stack, f)
				continue
			case json.Delim(']'):
				stack = stack[:len(stack)-1]
			}
		}
		// A value (scalar, or a container just closed) is complete.
		if len(stack) == 0 {
			return "", false
		}
		stack[len(stack)-1].valueDone()
	}
}

// jsonKind names what JSON value decodes into t, for a client that knows
// JSON, not Go's types.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// article puts "a" or "an" before a JSON value kind as encoding/json
// names it ("array", "number 1.5", "string", "object", "bool").
func article(v string) string {
	if v != "" && strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}
