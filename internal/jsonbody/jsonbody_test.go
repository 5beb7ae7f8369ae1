package jsonbody

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type grant struct {
	ProjectID string   `json:"project_id"`
	Scopes    []string `json:"scopes"`
}

type base struct {
	Name string `json:"name"`
}

type createReq struct {
	base
	Profile string            `json:"profile"`
	Grants  []grant           `json:"grants"`
	Env     map[string]string `json:"env"`
	Extra   json.RawMessage   `json:"extra"`
	Any     any               `json:"any"`
	Ptr     *grant            `json:"ptr"`
	Skip    string            `json:"-"`
	Untag   int
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, body string
		wantDup    string // the duplicate's path
		wantDepth  bool
		wantErr    bool // some other error
	}{
		{"plain", `{"profile":"small","grants":[{"project_id":"p","scopes":["a"]}]}`, "", false, false},
		{"exact duplicate", `{"profile":"small","profile":"large"}`, "profile", false, false},
		{"duplicate differing in case", `{"profile":"small","PROFILE":"large"}`, "PROFILE", false, false},
		{"duplicate in mixed case", `{"Profile":"small","pROFILe":"large"}`, "pROFILe", false, false},
		{"untagged field", `{"untag":1,"Untag":2}`, "Untag", false, false},
		{"duplicate through the Kelvin sign", `{"any":{"k":1,"\u212a":2}}`, "any.\u212a", false, false},
		{"escaped spelling", `{"profile":"a","pro\u0066ile":"b"}`, "profile", false, false},
		{"promoted field", `{"name":"a","NAME":"b"}`, "NAME", false, false},
		{"nested in an array", `{"grants":[{"project_id":"p"},{"scopes":["a"],"Scopes":["b"]}]}`, "grants[1].Scopes", false, false},
		{"behind a pointer", `{"ptr":{"project_id":"a","Project_ID":"b"}}`, "ptr.Project_ID", false, false},
		{"map keys are exact", `{"env":{"A":"1","a":"2"}}`, "", false, false},
		{"map key twice", `{"env":{"A":"1","A":"2"}}`, "env.A", false, false},
		{"raw message compared as a struct would be", `{"extra":{"k":1,"K":2}}`, "extra.K", false, false},
		{"any compared as a struct would be", `{"any":{"k":[1],"K":2}}`, "any.K", false, false},
		{"same key in siblings", `{"grants":[{"scopes":["a"]},{"scopes":["b"]}]}`, "", false, false},
		{"unknown field", `{"profile":"a","nope":1}`, "", false, true},
		{"skipped field is unknown", `{"Skip":"a"}`, "", false, true},
		{"depth at the limit", `{"any":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`, "", false, false},
		{"one past the limit", `{"any":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, "", true, false},
		{"deep and unterminated", `{"profile":` + strings.Repeat("[", 1<<20), "", true, false},
		{"deep objects", strings.Repeat(`{"any":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), "", true, false},
		{"huge number into a string", `{"profile":1e999999999}`, "", false, true},
		{"huge number into any", `{"any":` + strings.Repeat("9", 100000) + `}`, "", false, true},
		{"huge number in a map", `{"env":{"a":` + strings.Repeat("9", 100000) + `}}`, "", false, true},
		{"null", `null`, "", false, true},
		{"two values", `{} {}`, "", false, true},
		{"not JSON", `{"profile":`, "", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v createReq
			err := Decode([]byte(c.body), &v, Options{})
			var dup *DuplicateKeyError
			var depth *DepthError
			switch {
			case c.wantDup != "":
				if !errors.As(err, &dup) || dup.Path != c.wantDup {
					t.Fatalf("Decode(%.80s) = %.200v, want a duplicate at %q", c.body, err, c.wantDup)
				}
			case c.wantDepth:
				if !errors.As(err, &depth) {
					t.Fatalf("Decode(%.80s) = %.200v, want a depth error", c.body, err)
				}
			case c.wantErr:
				if err == nil || errors.As(err, &dup) || errors.As(err, &depth) {
					t.Fatalf("Decode(%.80s) = %.200v, want an error of encoding/json's", c.body, err)
				}
			default:
				if err != nil {
					t.Fatalf("Decode(%.80s) = %.200v, want nil", c.body, err)
				}
			}
		})
	}
}

// TestUnknownFieldsAllowed: the internal API's option lets unknown keys
// through, but not a duplicate among them.
func TestUnknownFieldsAllowed(t *testing.T) {
	var v createReq
	if err := Decode([]byte(`{"profile":"a","later":1}`), &v, Options{AllowUnknownFields: true}); err != nil || v.Profile != "a" {
		t.Fatalf("got %v (profile %q), want nil and profile a", err, v.Profile)
	}
	var dup *DuplicateKeyError
	if err := Decode([]byte(`{"later":1,"LATER":2}`), &v, Options{AllowUnknownFields: true}); !errors.As(err, &dup) {
		t.Fatalf("got %v, want a duplicate", err)
	}
}

// BenchmarkNested: the cost of refusing a 1 MiB body of brackets, the
// shape that grew the old checker by the square of its depth. Reports
// bytes allocated per refusal (TotalAlloc) and the heap in use after.
func BenchmarkNested(b *testing.B) {
	body := []byte(`{"token":` + strings.Repeat("[", 1<<20) + `}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var v createReq
		var depth *DepthError
		if err := Decode(body, &v, Options{}); !errors.As(err, &depth) {
			b.Fatalf("got %v, want a depth error", err)
		}
	}
}

// BenchmarkWide: a 1 MiB array of small values at depth 2, the widest
// body the limit lets through, checked and decoded.
func BenchmarkWide(b *testing.B) {
	body := []byte(`{"any":[` + strings.Repeat("1,", 1<<19) + `1]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var v createReq
		if err := Decode(body, &v, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
