package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The JSON types of section 7.2 are read member by member rather than with
// struct tags: encoding/json matches member names case-insensitively and
// treats null as "leave unchanged", and neither fits the member tables,
// which name exact members, aliases, and null as absent.

// jsonObject is one JSON object being decoded; path names it in errors.
type jsonObject struct {
	path    string
	members map[string]json.RawMessage
}

func parseJSONObject(b []byte, path string) (jsonObject, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return jsonObject{}, decodeError(path, "not a JSON object: %v", err)
	}
	if m == nil {
		return jsonObject{}, decodeError(path, "not a JSON object: null")
	}
	return jsonObject{path: path, members: m}, nil
}

func (o jsonObject) field(name string) string {
	if o.path == "" {
		return name
	}
	return o.path + "." + name
}

// lookup returns the first of names that is present and not null.
func (o jsonObject) lookup(names ...string) (json.RawMessage, string, bool) {
	for _, n := range names {
		if raw, ok := o.members[n]; ok && !isNull(raw) {
			return raw, n, true
		}
	}
	return nil, names[0], false
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// requiredString reads a required string member (first of names).
func (o jsonObject) requiredString(names ...string) (string, error) {
	s, err := o.optionalString(names...)
	if err != nil {
		return "", err
	}
	if s == nil {
		return "", decodeError(o.field(names[0]), "required member missing")
	}
	return *s, nil
}

// optionalString reads an optional string member; absent or null gives nil.
func (o jsonObject) optionalString(names ...string) (*string, error) {
	raw, name, ok := o.lookup(names...)
	if !ok {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, decodeError(o.field(name), "must be a string")
	}
	return &s, nil
}

func (o jsonObject) requiredArray(name string) ([]json.RawMessage, error) {
	raw, _, ok := o.lookup(name)
	if !ok {
		return nil, decodeError(o.field(name), "required member missing")
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, decodeError(o.field(name), "must be an array")
	}
	return a, nil
}

// optionalObject reads an optional object member; absent or null gives ok=false.
func (o jsonObject) optionalObject(names ...string) (jsonObject, bool, error) {
	raw, name, ok := o.lookup(names...)
	if !ok {
		return jsonObject{}, false, nil
	}
	obj, err := parseJSONObject(raw, o.field(name))
	if err != nil {
		return jsonObject{}, false, decodeError(o.field(name), "must be an object")
	}
	return obj, true, nil
}

// stringMap reads every member of o as a string, except those in skip.
func (o jsonObject) stringMap(skip ...string) (map[string]string, error) {
	out := make(map[string]string, len(o.members))
	for name, raw := range o.members {
		if contains(skip, name) {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, decodeError(o.field(name), "must be a string")
		}
		out[name] = s
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func indexPath(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// marshalJSON writes compact JSON without HTML escaping, as serde_json in
// the reference client does. Struct members come out in declaration order
// and map members in sorted key order, so output is deterministic.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, encodeError("", "JSON: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
