package readme

import "testing"

// TestMatchOutput: the comparison the README test makes between an output
// block and what its command printed.
func TestMatchOutput(t *testing.T) {
	for _, c := range []struct {
		name          string
		shown, output string
		json          bool
		match         bool
	}{
		{"JSON laid out differently", `{ "a": 1, "b": ["x"] }`, "{\n  \"b\": [\n    \"x\"\n  ],\n  \"a\": 1\n}\n", true, true},
		{"a JSON value differs", `{"a": 1}`, `{"a": 2}`, true, false},
		{"a JSON field missing", `{"a": 1, "b": 2}`, `{"a": 1}`, true, false},
		{"a JSON field more", `{"a": 1}`, `{"a": 1, "b": 2}`, true, false},
		{"a wildcard in a string", `{"id": "op-…"}`, `{"id": "op-123"}`, true, true},
		{"a wildcard keeps its prefix", `{"id": "op-…"}`, `{"id": "job-123"}`, true, false},
		{"two documents", `{"a":1} {"a":2}`, "{\"a\":1}\n{\"a\":2}\n", true, true},
		{"one document of two", `{"a":1} {"a":2}`, `{"a":1}`, true, false},
		{"further members", `{"a": 1, "…": "…"}`, `{"a": 1, "b": 2}`, true, true},
		{"further members, one shown missing", `{"a": 1, "…": "…"}`, `{"b": 2}`, true, false},
		{"a no-break space", `{"e": "proto: x"}`, "{\"e\": \"proto:\u00a0x\"}", true, true},
		{"text, exactly", "2\n", "2\n", false, true},
		{"text differs", "2\n", "3\n", false, false},
		{"text wildcard in a line", "wrote a.xmtp: … bytes\n", "wrote a.xmtp: 104 bytes\n", false, true},
		{"text, lines skipped", "first\n…\nlast\n", "first\nx\ny\nlast\n", false, true},
		{"text, a line more", "first\n", "first\nsecond\n", false, false},
	} {
		if got := matchOutput(c.shown, c.output, c.json) == ""; got != c.match {
			t.Errorf("%s: match %v; want %v (%s)", c.name, got, c.match, matchOutput(c.shown, c.output, c.json))
		}
	}
}
