// Package jsonbody is the one way a JSON body from a client (the public
// API, the internal API, MCP tool arguments, a terminal's control
// messages) becomes a Go value. It adds to encoding/json what a body
// from an untrusted peer needs: a nesting-depth limit and a refusal of
// any key given twice in one object, with cost linear in the body's
// size, checked before encoding/json sees the body.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxDepth bounds how many objects and arrays may be open at once. No
// body of ours nests deeper than four; 32 leaves room for what grows
// and refuses a body that is nothing but brackets after 32 bytes.
const MaxDepth = 32

// DepthError is a body nested deeper than MaxDepth.
type DepthError struct{ Max int }

func (e *DepthError) Error() string {
	return fmt.Sprintf("request body nests objects and arrays deeper than %d levels", e.Max)
}

// DuplicateKeyError is a key given twice in one object. encoding/json
// would keep the last value, and it matches a struct's fields without
// regard to case, so {"profile":…,"PROFILE":…} sets one field twice:
// two readers of one body could disagree on what it says.
type DuplicateKeyError struct {
	// Path locates the second key: grants[1].scopes.
	Path string
}

func (e *DuplicateKeyError) Error() string {
	return "request body has the key " + strconv.Quote(e.Path) + " more than once in one object"
}

// ErrNull is a body that is JSON null. encoding/json takes null into a
// struct as "nothing to set", so it would pass for {}.
var ErrNull = errors.New("the request body must be a JSON value, not null")

// ErrTrailing is a body holding more than one JSON value.
var ErrTrailing = errors.New("request body holds more than one JSON value")

// Options tunes Decode.
type Options struct {
	// AllowUnknownFields lets object keys that name no field of the
	// target through (the internal API, so that an edge a version ahead
	// still works). Duplicates and depth are refused all the same.
	AllowUnknownFields bool
}

// Decode reads data, one JSON value, into v (a pointer). It returns a
// *DepthError, a *DuplicateKeyError, ErrNull, ErrTrailing, or
// encoding/json's own errors (*json.SyntaxError, *json.UnmarshalTypeError,
// the unknown-field error) for the caller to map to its answer.
func Decode(data []byte, v any, opts Options) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsonbody: decode into %T, not a non-nil pointer", v)
	}
	if err := Check(data, rv.Type().Elem()); err != nil {
		return err
	}
	if string(bytes.TrimSpace(data)) == "null" {
		return ErrNull
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if !opts.AllowUnknownFields {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailing
	}
	return nil
}

// frame is one open object or array while Check walks a body. Its
// memory is the open keys and the keys seen so far in open objects, all
// parts of the body: the walk costs at most a small multiple of the
// body's size. Paths are built only for an error.
type frame struct {
	object bool
	// fields describes the struct the object decodes into (nil when it
	// is not a struct, or the type is not known).
	fields *structFields
	// exact: the object decodes into a map, whose keys are compared
	// exactly; every other object is compared as encoding/json matches
	// struct fields, without regard to case.
	exact bool
	elem  reflect.Type // an array's or a map's element type; nil if unknown
	// first is the first key's identity; seen holds every key's from
	// the second on (most objects have one key or none, and no map).
	first   string
	nkeys   int
	seen    map[string]struct{}
	key     string // the key whose value comes next
	wantKey bool
	index   int // an array's next element
}

// add records a key's identity and reports whether it was there before.
func (f *frame) add(id string) bool {
	switch f.nkeys++; {
	case f.nkeys == 1:
		f.first = id
		return false
	case f.seen == nil:
		f.seen = map[string]struct{}{f.first: {}}
	}
	if _, dup := f.seen[id]; dup {
		return true
	}
	f.seen[id] = struct{}{}
	return false
}

// Check walks the first JSON value in data, refusing nesting deeper than
// MaxDepth and a key that appears twice in one object. t, the type the
// body will be decoded into (nil if unknown), says how keys compare: an
// object decoded into a map compares them exactly, as a map keeps them;
// every other object compares them as encoding/json matches struct
// fields (the same field under two spellings is a duplicate). A body
// that is not valid JSON may pass here; the decoder says what is wrong.
//
// It reads the bytes itself, one pass with no allocation per value:
// json.Decoder.Token boxes every token and decodes every scalar, which
// made a 1 MiB array of numbers take a second.
func Check(data []byte, t reflect.Type) error {
	stack := make([]frame, 0, 8)
	pending := t // the type of the value about to be read
	i := 0
	for {
		for i < len(data) && (isSpace(data[i]) || data[i] == ',' || data[i] == ':') {
			i++
		}
		if i >= len(data) {
			return nil
		}
		c := data[i]
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			top := &stack[n-1]
			switch c {
			case '}':
				i++
				stack = stack[:n-1]
			case '"':
				end := stringEnd(data, i)
				if end < 0 {
					return nil
				}
				k, ok := key(data[i:end])
				if !ok {
					return nil
				}
				i = end
				top.key, top.wantKey = k, false
				id, next := top.member(k)
				if top.add(id) {
					return &DuplicateKeyError{Path: path(stack)}
				}
				pending = next
				continue
			default:
				return nil
			}
		} else {
			switch c {
			case '{', '[':
				if len(stack) == MaxDepth {
					return &DepthError{Max: MaxDepth}
				}
				i++
				stack = append(stack, open(c == '{', pending))
				if top := &stack[len(stack)-1]; !top.object {
					pending = top.elem
				}
				continue
			case ']':
				if len(stack) == 0 || stack[len(stack)-1].object {
					return nil
				}
				i++
				stack = stack[:len(stack)-1]
			case '}':
				return nil // a key with no value; not JSON
			case '"':
				if i = stringEnd(data, i); i < 0 {
					return nil
				}
			default:
				j := i
				for j < len(data) && !isSpace(data[j]) && !strings.ContainsRune(",:[]{}\"", rune(data[j])) {
					j++
				}
				if j == i {
					return nil
				}
				i = j
			}
		}
		// A value (a scalar, or a container just closed) is complete.
		if len(stack) == 0 {
			return nil
		}
		top := &stack[len(stack)-1]
		if top.object {
			top.wantKey = true
		} else {
			top.index++
			pending = top.elem
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// stringEnd returns the index just past the string opening at data[i],
// or -1 if it does not end.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// key is the string a quoted key decodes to, as encoding/json reads it:
// escapes resolved and invalid UTF-8 replaced, so two spellings of one
// key are one key here too.
func key(quoted []byte) (string, bool) {
	plain := true
	for _, c := range quoted[1 : len(quoted)-1] {
		if c == '\\' || c >= utf8.RuneSelf || c < ' ' {
			plain = false
			break
		}
	}
	if plain {
		return string(quoted[1 : len(quoted)-1]), true
	}
	var k string
	if json.Unmarshal(quoted, &k) != nil {
		return "", false
	}
	return k, true
}

// open starts a frame for an object or array decoded into t.
func open(object bool, t reflect.Type) frame {
	t = target(t)
	f := frame{object: object, wantKey: true}
	if t == nil {
		return f
	}
	switch t.Kind() {
	case reflect.Map:
		f.exact, f.elem = true, t.Elem()
	case reflect.Slice, reflect.Array:
		f.elem = t.Elem()
	case reflect.Struct:
		f.fields = fieldsOf(t)
	}
	return f
}

// member names key k of an object for duplicate detection, and gives the
// type of its value.
func (f *frame) member(k string) (string, reflect.Type) {
	if f.exact {
		return k, f.elem
	}
	if f.fields != nil {
		if fi, ok := f.fields.byName[k]; ok {
			return "\x00" + fi.name, fi.typ
		}
		if fi, ok := f.fields.byFold[fold(k)]; ok {
			return "\x00" + fi.name, fi.typ
		}
	}
	return fold(k), nil
}

// path renders where the innermost open key is: grants[1].scopes.
func path(stack []frame) string {
	var b strings.Builder
	for i := range stack {
		f := &stack[i]
		switch {
		case f.object && i == 0:
			b.WriteString(f.key)
		case f.object:
			b.WriteString("." + f.key)
		case i < len(stack)-1:
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	return b.String()
}

// target is the type encoding/json decodes into for t: pointers followed,
// and nil for what decides for itself (an Unmarshaler, an interface).
func target(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

type field struct {
	name string
	typ  reflect.Type
}

// structFields indexes a struct's JSON fields as encoding/json finds
// them: by exact name first, then by folded name.
type structFields struct {
	byName map[string]field
	byFold map[string]field
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if c, ok := fieldCache.Load(t); ok {
		return c.(*structFields)
	}
	sf := &structFields{byName: map[string]field{}, byFold: map[string]field{}}
	collect(sf, t, 0)
	c, _ := fieldCache.LoadOrStore(t, sf)
	return c.(*structFields)
}

// collect adds t's fields, and those of its embedded structs, shallower
// ones first, as encoding/json promotes them. Names two fields share at
// one depth go to the first; encoding/json drops both, and the decoder
// then refuses the key as unknown, so duplicates are still caught.
func collect(sf *structFields, t reflect.Type, depth int) {
	if depth > 8 {
		return
	}
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fi := field{name: name, typ: f.Type}
		if _, ok := sf.byName[name]; !ok {
			sf.byName[name] = fi
		}
		if _, ok := sf.byFold[fold(name)]; !ok {
			sf.byFold[fold(name)] = fi
		}
	}
	for _, et := range embedded {
		collect(sf, et, depth+1)
	}
}

// fold maps every spelling encoding/json takes for one struct field to
// one string: each rune to the smallest of its case-folding orbit, so
// "PROFILE", "profile" and "ProfiLe" fold alike, and so do "k" and the
// Kelvin sign.
func fold(s string) string {
	ascii := true
	for i := range len(s) {
		if c := s[i]; c >= utf8.RuneSelf || ('a' <= c && c <= 'z') {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b.WriteRune(r)
	}
	return b.String()
}
