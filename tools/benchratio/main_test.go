package main

import (
	"math"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/tools/internal/roundtable"
)

func TestSerialBound(t *testing.T) {
	for _, c := range []struct{ c, k, want float64 }{
		{400, 400, 0.5},       // a cost as fast as the ceiling halves it
		{400, 1200, 0.75},     // three times as fast: a quarter lost
		{400, 4e9, 0.9999999}, // a cost next to nothing: the ceiling
	} {
		if got := serialBound(c.c, c.k); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("serialBound(%v, %v) = %v, want %v", c.c, c.k, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	out := []byte("goos: linux\nBenchmarkListMessages/postgres/grpc-2 \t 20\t 71041581 ns/op\t 140763 msgs/s\t 25136228 B/op\nPASS\n")
	got := parse(out)["ListMessages/postgres/grpc"]
	if got["msgs/s"] != 140763 || got["ns/op"] != 71041581 || got["B/op"] != 25136228 {
		t.Errorf("parsed %v", got)
	}
}

// TestContextRow: a figure with no target says so instead of counting
// rounds met.
func TestContextRow(t *testing.T) {
	r := ratio{"Reader", "RawKept", "MB/s", math.NaN()}
	row := roundtable.Row("Reader / RawKept", r.targetText(), []float64{0.9, 0.95}, "%.2f", nil)
	if !strings.Contains(row, "(context)") || !strings.HasSuffix(row, "| — |\n") {
		t.Errorf("row %q", row)
	}
	met := roundtable.Row("x", "≥ 0.80", []float64{0.9, 0.7}, "%.2f", roundtable.AtLeast(0.8))
	if !strings.HasSuffix(met, "| 1 of 2 |\n") {
		t.Errorf("row %q", met)
	}
}
