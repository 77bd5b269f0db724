//go:build testhooks

package main

import "time"

// testHooks are flags only a binary built with -tags testhooks has (the
// fleet tests build one); the production binary has none of them, so no
// operator can set them.
type testHooks struct {
	// The fleet tests play a replica whose clock is skewed with it.
	ScheduleClockOffset time.Duration `name:"schedule-clock-offset" env:"SCHEDULE_CLOCK_OFFSET" hidden:"" help:"Testing only: schedules read a clock this far off."`
}

func (h testHooks) scheduleClock() func() time.Time {
	offset := h.ScheduleClockOffset
	return func() time.Time { return time.Now().Add(offset) }
}
