package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/sbxedge/sbx/internal/jsonbody"
	"github.com/sbxedge/sbx/internal/problem"
)

// decode reads a bounded JSON body strictly through jsonbody: no unknown
// fields, one value, no nesting past jsonbody.MaxDepth, and no key twice
// in one object at any depth, in any case where encoding/json would take
// both spellings for one field. It answers the request itself and
// returns false on any problem.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxJSONBody))
	if err == nil {
		err = jsonbody.Decode(data, v, jsonbody.Options{})
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	var dup *jsonbody.DuplicateKeyError
	var depth *jsonbody.DepthError
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, r, problem.New(http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit)))
	case errors.As(err, &dup):
		p := problem.New(http.StatusBadRequest, "duplicate_key", dup.Error())
		p.Errors = []problem.FieldError{{Field: dup.Path, Detail: "appears more than once"}}
		writeProblem(w, r, p)
	case errors.As(err, &depth):
		writeProblem(w, r, problem.New(http.StatusBadRequest, "malformed_json", depth.Error()))
	case errors.Is(err, jsonbody.ErrNull):
		writeProblem(w, r, problem.New(http.StatusUnprocessableEntity, "invalid_request",
			"the request body must be a JSON object, not null"))
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
	// encoding/json quotes the value it refused ("number 9999…"): a
	// client's 1 MiB number is not sent back whole.
	if len(v) > 64 {
		v = strings.ToValidUTF8(v[:64], "") + "…"
	}
	if v != "" && strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}
