// Package roundtable writes the markdown tables the benchmark tools print:
// a figure per row, a column per round, and in how many rounds the figure
// met its target.
package roundtable

import (
	"fmt"
	"strings"
)

// Header is the table's head: its first two columns' names, then a column
// per round of rounds, then "met in".
func Header(first, second string, rounds int) string {
	cols := []string{first, second}
	for i := range rounds {
		cols = append(cols, fmt.Sprintf("run %d", i+1))
	}
	cols = append(cols, "met in")
	return "| " + strings.Join(cols, " | ") + " |\n|" + strings.Repeat("---|", len(cols)) + "\n"
}

// Row is one figure: its name, its target as text, its value in each round
// (written with format), and in how many rounds ok held; with ok nil (a
// figure for context, with no target), "—".
func Row(name, target string, values []float64, format string, ok func(float64) bool) string {
	cols := []string{name, target}
	met := 0
	for _, v := range values {
		cols = append(cols, fmt.Sprintf(format, v))
		if ok != nil && ok(v) {
			met++
		}
	}
	if ok == nil {
		cols = append(cols, "—")
	} else {
		cols = append(cols, fmt.Sprintf("%d of %d", met, len(values)))
	}
	return "| " + strings.Join(cols, " | ") + " |\n"
}

// AtLeast is ok for a target the figure must reach.
func AtLeast(target float64) func(float64) bool {
	return func(v float64) bool { return v >= target }
}
