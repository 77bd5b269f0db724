package eventually

import (
	"runtime"
	"strings"
)

// Goroutines counts the goroutines whose stack runs a function whose name
// contains fn ("backup.Export.func1"): a check that one component's
// goroutines ended, which other tests' goroutines, ending in their own
// time, do not disturb as a whole-process count does.
func Goroutines(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
