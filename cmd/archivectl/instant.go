package main

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/alecthomas/kong"
)

// instant is a point in time on the command line, for people rather than
// nanoseconds: RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02, at
// midnight UTC), or an age back from now (30d, 12h, 90m, 1w).
type instant struct {
	ns *int64
}

var age = regexp.MustCompile(`^(\d+)(w|d|h|m|s)$`)

// parseInstant reads s as an instant, ages counted back from now.
func parseInstant(s string, now time.Time) (time.Time, error) {
	if m := age.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return time.Time{}, err
		}
		unit := map[string]time.Duration{"w": 7 * 24 * time.Hour, "d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second}[m[2]]
		return now.Add(-time.Duration(n) * unit), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: give RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02) or an age such as 30d, 12h or 90m", s)
}

func (i *instant) Decode(ctx *kong.DecodeContext) error {
	var s string
	if err := ctx.Scan.PopValueInto("time", &s); err != nil {
		return err
	}
	t, err := parseInstant(s, time.Now())
	if err != nil {
		return err
	}
	ns := t.UnixNano()
	i.ns = &ns
	return nil
}

// or is the instant's nanoseconds when it was given, else ns.
func (i instant) or(ns *int64) *int64 {
	if i.ns != nil {
		return i.ns
	}
	return ns
}
