package jsonbody

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzCheck: any body, checked as untyped JSON and as a request struct,
// never panics; a refusal for depth is told only for a body deeper than
// MaxDepth, and a body let through is no deeper and holds no object with
// two keys encoding/json would take for one field. The seed corpus in
// testdata/fuzz/FuzzCheck covers depth, width, duplicates in every case
// and huge numbers.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `1`, `"s"`, `null`,
		`{"profile":"a","PROFILE":"b"}`,
		`{"env":{"A":"1","a":"2"}}`,
		`{"any":{"k":1,"\u212a":2}}`,
		`{"grants":[{"scopes":[]},{"Scopes":[],"scopes":[]}]}`,
		`{"any":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`,
		strings.Repeat(`{"a":`, MaxDepth+1),
		`{"any":1e999999999,"profile":-0.0000000000000000000001e-99999}`,
		`{"any":[` + strings.Repeat(`1,`, 1000) + `1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v createReq
		_ = Decode(data, &v, Options{})
		_ = Check(data, reflect.TypeFor[createReq]())
		err := Check(data, nil)
		if !json.Valid(data) {
			return
		}
		deep := maxDepth(data) > MaxDepth
		var depth *DepthError
		if errors.As(err, &depth) && !deep {
			t.Fatalf("Check(%q) = %v for a body %d deep", data, err, maxDepth(data))
		}
		if err != nil {
			return
		}
		if deep {
			t.Fatalf("Check(%q) let a body %d deep through", data, maxDepth(data))
		}
		var tree any
		if json.Unmarshal(data, &tree) == nil {
			if a, b, ok := foldTwins(tree); ok {
				t.Fatalf("Check(%q) let keys %q and %q through in one object", data, a, b)
			}
		}
	})
}

// maxDepth is how deeply valid JSON nests, counted on its bytes.
func maxDepth(data []byte) int {
	depth, most, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			most = max(most, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return most
}

// foldTwins finds two keys of one object that differ and are equal
// under Unicode case folding, anywhere in a decoded tree.
func foldTwins(v any) (string, string, bool) {
	switch v := v.(type) {
	case map[string]any:
		for a, va := range v {
			for b := range v {
				if a != b && strings.EqualFold(a, b) {
					return a, b, true
				}
			}
			if x, y, ok := foldTwins(va); ok {
				return x, y, ok
			}
		}
	case []any:
		for _, e := range v {
			if x, y, ok := foldTwins(e); ok {
				return x, y, ok
			}
		}
	}
	return "", "", false
}
