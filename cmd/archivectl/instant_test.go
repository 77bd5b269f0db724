package main

import (
	"testing"
	"time"
)

func TestParseInstant(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"30d":                         now.Add(-30 * 24 * time.Hour),
		"1w":                          now.Add(-7 * 24 * time.Hour),
		"12h":                         now.Add(-12 * time.Hour),
		"90m":                         now.Add(-90 * time.Minute),
		"45s":                         now.Add(-45 * time.Second),
		"2026-01-02":                  time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC),
		"2026-01-02T15:04:05Z":        time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		"2026-01-02T15:04:05.5+01:00": time.Date(2026, 1, 2, 14, 4, 5, 500_000_000, time.UTC),
	} {
		got, err := parseInstant(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseInstant(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "30", "30y", "-5d", "2026-13-01"} {
		if _, err := parseInstant(bad, now); err == nil {
			t.Errorf("parseInstant(%q) took it", bad)
		}
	}
}

// TestProgressLine: with a total, the share done and the time left at the
// rate so far; no rate before a whole second (the first frame read "64
// TB/s", issue 36).
func TestProgressLine(t *testing.T) {
	p := &progress{verb: "sent", total: 100 << 20, bytes: 25 << 20}
	for elapsed, want := range map[time.Duration]string{
		10 * time.Millisecond: "sent 25.0 of 100.0 MiB (25%)",
		5 * time.Second:       "sent 25.0 of 100.0 MiB (25%), 5.0 MiB/s, about 15s left",
	} {
		if got := p.line(elapsed); got != want {
			t.Errorf("after %s: %q, want %q", elapsed, got, want)
		}
	}
	unknown := &progress{verb: "exported", bytes: 10 << 20}
	if got := unknown.line(2 * time.Second); got != "exported 10.0 MiB, 5.0 MiB/s" {
		t.Errorf("no total: %q", got)
	}
}
