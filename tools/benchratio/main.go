// Command benchratio runs a package's benchmarks beside their ceilings and
// prints each figure as a ratio to its ceiling, next to its target.
//
// The machines are shared and noisy, so a figure means little alone: each
// round runs the benchmarks and their ceilings in one process, one after
// the other, and a ratio is only ever taken within a round. Rounds repeat
// the whole set, so that drift in the machine's load falls on each alike.
//
//	benchratio -pkg ./internal/archive -rounds 3 \
//	    -ratio 'Reader,RawDecompressOpen,MB/s,0.8' \
//	    -floor 'Writer,MB/s,500'
//
// -serial prints, beside the ratios, the most a ratio could reach when
// its work includes a cost that runs one after the ceiling's, as a paged
// call's client decodes a page only once the server has read it: with the
// ceiling at c and the cost alone at k (both rates), k/(c+k) of c.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/contentbackup/contentbackup/tools/internal/roundtable"
)

// ratio is a benchmark read against a ceiling measured in the same round.
type ratio struct {
	name, ceiling, unit string
	target              float64
}

func (r ratio) targetText() string {
	if math.IsNaN(r.target) {
		return "(context)"
	}
	return fmt.Sprintf("≥ %.2f", r.target)
}

// serial is the bound on a ratio to ceiling from a cost that runs one
// after the ceiling's work (see the package comment).
type serial struct {
	ceiling, cost, unit string
}

// serialBound is the fraction of ceiling rate c that work reaches when a
// cost of rate k follows each unit of the ceiling's: one unit takes
// 1/c + 1/k, so the rate is ck/(c+k), which is k/(c+k) of c.
func serialBound(c, k float64) float64 { return k / (c + k) }

// floor is a benchmark with an absolute target (no ceiling exists).
type floor struct {
	name, unit string
	target     float64
}

type list []string

func (l *list) String() string     { return strings.Join(*l, " ") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
}

func run() error {
	var ratios, floors, serials, extra list
	pkg := flag.String("pkg", "", "the package whose benchmarks to run, e.g. ./internal/archive")
	rounds := flag.Int("rounds", 3, "how many times to run the whole set")
	benchtime := flag.String("benchtime", "", "passed to -test.benchtime")
	flag.Var(&ratios, "ratio", "NAME,CEILING,UNIT,TARGET: NAME's UNIT over CEILING's, at least TARGET, or - for a figure with no target (repeatable)")
	flag.Var(&floors, "floor", "NAME,UNIT,TARGET: NAME's UNIT at least TARGET (repeatable)")
	flag.Var(&serials, "serial", "CEILING,COST,UNIT: the most a ratio to CEILING can reach when COST (a rate) runs one after CEILING's work (repeatable)")
	flag.Var(&extra, "arg", "another argument for the test binary (repeatable)")
	flag.Parse()
	if *pkg == "" || len(ratios)+len(floors) == 0 {
		return errors.New("need -pkg and at least one -ratio or -floor")
	}
	var rs []ratio
	var fs []floor
	tops := map[string]bool{}
	for _, s := range ratios {
		p := strings.Split(s, ",")
		if len(p) != 4 {
			return fmt.Errorf("-ratio %q: want NAME,CEILING,UNIT,TARGET", s)
		}
		t := math.NaN() // "-": a figure for context, with no target
		if p[3] != "-" {
			var err error
			if t, err = strconv.ParseFloat(p[3], 64); err != nil {
				return fmt.Errorf("-ratio %q: target: %w", s, err)
			}
		}
		rs = append(rs, ratio{p[0], p[1], p[2], t})
		tops[top(p[0])], tops[top(p[1])] = true, true
	}
	for _, s := range floors {
		p := strings.Split(s, ",")
		if len(p) != 3 {
			return fmt.Errorf("-floor %q: want NAME,UNIT,TARGET", s)
		}
		t, err := strconv.ParseFloat(p[2], 64)
		if err != nil {
			return fmt.Errorf("-floor %q: target: %w", s, err)
		}
		fs = append(fs, floor{p[0], p[1], t})
		tops[top(p[0])] = true
	}
	var ss []serial
	for _, s := range serials {
		p := strings.Split(s, ",")
		if len(p) != 3 {
			return fmt.Errorf("-serial %q: want CEILING,COST,UNIT", s)
		}
		ss = append(ss, serial{p[0], p[1], p[2]})
		tops[top(p[0])], tops[top(p[1])] = true, true
	}
	names := make([]string, 0, len(tops))
	for n := range tops {
		names = append(names, regexp.QuoteMeta(n))
	}
	sort.Strings(names)

	dir, err := os.MkdirTemp("", "benchratio")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, *pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build %s: %w", *pkg, err)
	}
	args := []string{"-test.run", "^$", "-test.bench", "^Benchmark(" + strings.Join(names, "|") + ")$", "-test.count", "1", "-test.benchmem"}
	if *benchtime != "" {
		args = append(args, "-test.benchtime", *benchtime)
	}
	args = append(args, extra...)

	ratioRuns := make([][]float64, len(rs))
	floorRuns := make([][]float64, len(fs))
	serialRuns := make([][]float64, len(ss))
	for round := 1; round <= *rounds; round++ {
		fmt.Printf("round %d of %d\n", round, *rounds)
		cmd := exec.Command(bin, args...)
		cmd.Dir = strings.TrimPrefix(*pkg, "./")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		os.Stdout.Write(out)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		got := parse(out)
		for i, r := range rs {
			v, c := got[r.name][r.unit], got[r.ceiling][r.unit]
			if v == 0 || c == 0 {
				return fmt.Errorf("round %d: no %s for %s or %s", round, r.unit, r.name, r.ceiling)
			}
			q := v / c
			if strings.HasSuffix(r.unit, "/op") { // a cost: less is better
				q = c / v
			}
			ratioRuns[i] = append(ratioRuns[i], q)
			fmt.Printf("  %s / %s = %.2f (%s)\n", r.name, r.ceiling, q, r.targetText())
		}
		for i, sb := range ss {
			c, k := got[sb.ceiling][sb.unit], got[sb.cost][sb.unit]
			if c == 0 || k == 0 {
				return fmt.Errorf("round %d: no %s for %s or %s", round, sb.unit, sb.ceiling, sb.cost)
			}
			b := serialBound(c, k)
			serialRuns[i] = append(serialRuns[i], b)
			fmt.Printf("  at most %.2f of %s with %s after it\n", b, sb.ceiling, sb.cost)
		}
		for i, f := range fs {
			v := got[f.name][f.unit]
			if v == 0 {
				return fmt.Errorf("round %d: no %s for %s", round, f.unit, f.name)
			}
			floorRuns[i] = append(floorRuns[i], v)
		}
	}

	fmt.Print("\n" + roundtable.Header("figure", "target", *rounds))
	for i, r := range rs {
		var ok func(float64) bool
		if !math.IsNaN(r.target) {
			ok = roundtable.AtLeast(r.target)
		}
		fmt.Print(roundtable.Row(fmt.Sprintf("%s / %s (%s)", r.name, r.ceiling, r.unit), r.targetText(), ratioRuns[i], "%.2f", ok))
	}
	for i, sb := range ss {
		fmt.Print(roundtable.Row(fmt.Sprintf("bound: %s, then %s (%s)", sb.ceiling, sb.cost, sb.unit), "(bound)", serialRuns[i], "%.2f", nil))
	}
	for i, f := range fs {
		fmt.Print(roundtable.Row(fmt.Sprintf("%s (%s)", f.name, f.unit), fmt.Sprintf("≥ %.0f", f.target), floorRuns[i], "%.0f", roundtable.AtLeast(f.target)))
	}
	return nil
}

// top is a benchmark's top-level name: the -test.bench pattern selects it
// and runs its sub-benchmarks.
func top(name string) string { return strings.SplitN(name, "/", 2)[0] }

// parse reads benchmark result lines: the name without its "Benchmark"
// prefix and GOMAXPROCS suffix, to each unit's value.
func parse(out []byte) map[string]map[string]float64 {
	res := map[string]map[string]float64{}
	suffix := regexp.MustCompile(`-\d+$`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := suffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		units := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				units[f[i+1]] = v
			}
		}
		res[name] = units
	}
	return res
}
