//go:build !testhooks

package main

import "time"

// testHooks is empty in the production binary: see testhooks.go.
type testHooks struct{}

func (testHooks) scheduleClock() func() time.Time { return time.Now }
