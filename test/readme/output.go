package readme

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
)

// matchOutput says how printed differs from shown ("" when it matches).
//
// A JSON output is compared as values, one per JSON document printed (a
// stream prints several), so the README may lay it out compactly; a text
// output line by line, trailing spaces aside. In both, "…" in what is
// shown stands for any run of characters (an id, a time, a digest that
// differ from run to run); a text line of "…" alone stands for any lines,
// and a JSON member "…": "…" for any further members of its object.
// protobuf-go's errors put a no-break space after "proto:" at random (so
// that nobody matches their text); it reads as a space here.
func matchOutput(shown, printed string, isJSON bool) string {
	printed = strings.ReplaceAll(printed, "\u00a0", " ")
	if isJSON {
		want, err := jsonValues(shown)
		if err != nil {
			return "the README's JSON does not parse: " + err.Error()
		}
		got, err := jsonValues(printed)
		if err != nil {
			return "the output is not JSON: " + err.Error()
		}
		if len(want) != len(got) {
			return fmt.Sprintf("%d JSON documents printed, %d shown", len(got), len(want))
		}
		for i := range want {
			if why := matchValue("", want[i], got[i]); why != "" {
				return why
			}
		}
		return ""
	}
	return matchLines(lines(shown), lines(printed))
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.TrimRight(l, " \t"))
	}
	return out
}

func matchLines(want, got []string) string {
	if len(want) == 0 {
		if len(got) == 0 {
			return ""
		}
		return fmt.Sprintf("printed more lines than shown, from %q", got[0])
	}
	if want[0] == "…" {
		for skip := 0; skip <= len(got); skip++ {
			if matchLines(want[1:], got[skip:]) == "" {
				return ""
			}
		}
		return "nothing printed matches what follows a \"…\" line"
	}
	if len(got) == 0 {
		return fmt.Sprintf("shown %q, printed nothing more", want[0])
	}
	if !wildcard(want[0], got[0]) {
		return fmt.Sprintf("shown %q, printed %q", want[0], got[0])
	}
	return matchLines(want[1:], got[1:])
}

func jsonValues(s string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

func matchValue(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: shown an object, printed %v", path, got)
		}
		_, more := w["…"]
		for _, k := range keys(w) {
			if _, ok := g[k]; !ok && k != "…" {
				return fmt.Sprintf("%s: shown field %q, not printed", path, k)
			}
		}
		for _, k := range keys(g) {
			if _, ok := w[k]; !ok && !more {
				return fmt.Sprintf("%s: printed field %q, not shown", path, k)
			}
		}
		for _, k := range keys(w) {
			if k == "…" {
				continue
			}
			if why := matchValue(path+"."+k, w[k], g[k]); why != "" {
				return why
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: shown %d items, printed %v", path, len(w), got)
		}
		for i := range w {
			if why := matchValue(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); why != "" {
				return why
			}
		}
		return ""
	case string:
		if g, ok := got.(string); ok && wildcard(w, g) {
			return ""
		}
		return fmt.Sprintf("%s: shown %q, printed %v", path, w, got)
	default:
		if reflect.DeepEqual(want, got) {
			return ""
		}
		wb, _ := json.Marshal(want)
		gb, _ := json.Marshal(got)
		if bytes.Equal(wb, gb) {
			return ""
		}
		return fmt.Sprintf("%s: shown %s, printed %s", path, wb, gb)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// wildcard reports whether s matches pattern, where each "…" stands for
// any run of characters.
func wildcard(pattern, s string) bool {
	parts := strings.Split(pattern, "…")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(s, p) && len(s) >= len(p)
		}
		j := strings.Index(s, p)
		if j < 0 {
			return false
		}
		s = s[j+len(p):]
	}
	return true
}
