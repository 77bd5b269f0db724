// Package buildinfo says what a binary was built from, for --version.
package buildinfo

import "runtime/debug"

// Version is stamped, the version `make build` and the Dockerfile stamp
// with -ldflags "-X main.buildVersion=$(git describe --tags --always
// --dirty)", or, when empty (go run, go install), the module version and
// VCS revision the Go toolchain recorded.
func Version(stamped string) string {
	if stamped != "" {
		return stamped
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += " (modified)"
		}
	}
	return v
}
