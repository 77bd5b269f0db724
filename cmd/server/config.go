package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
)

// The long tail of flags can live in a file: serve --config FILE reads a
// JSON object of flag names to values ({"max-archive-streams": 32,
// "job-lease": "45s"}), the names as on the command line (or with "_"
// for "-"). A flag given on the command line or in the environment wins
// over the file, and the file over the defaults. A key that names no flag
// of serve is an error, not a setting silently ignored.

// configFile is a kong configuration loader that is strict about keys:
// kong.JSON alone ignores a misspelled one.
func configFile(known map[string]bool) kong.ConfigurationLoader {
	return func(r io.Reader) (kong.Resolver, error) {
		b, err := io.ReadAll(io.LimitReader(r, 1<<20))
		if err != nil {
			return nil, err
		}
		var values map[string]json.RawMessage
		if err := json.Unmarshal(b, &values); err != nil {
			return nil, fmt.Errorf("--config: not a JSON object of flags: %w", err)
		}
		var unknown []string
		// kong.JSON reads a flag as "max_archive_streams": the file may
		// spell it as the command line does.
		byName := make(map[string]json.RawMessage, len(values))
		for k, v := range values {
			name := strings.ReplaceAll(k, "_", "-")
			if !known[name] {
				unknown = append(unknown, k)
			}
			byName[strings.ReplaceAll(name, "-", "_")] = v
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return nil, fmt.Errorf("--config: %s: no such flag of serve (serve --help lists them)", strings.Join(unknown, ", "))
		}
		normalized, err := json.Marshal(byName)
		if err != nil {
			return nil, err
		}
		fromFile, err := kong.JSON(bytes.NewReader(normalized))
		if err != nil {
			return nil, err
		}
		// The environment wins over the file, as a container's settings
		// override an image's: a flag whose variable is set is left to
		// it.
		return kong.ResolverFunc(func(kctx *kong.Context, parent *kong.Path, flag *kong.Flag) (any, error) {
			for _, env := range flag.Envs {
				if _, set := os.LookupEnv(env); set {
					return nil, nil
				}
			}
			return fromFile.Resolve(kctx, parent, flag)
		}), nil
	}
}

// serveFlagNames are the names of serve's flags, for configFile.
func serveFlagNames() map[string]bool {
	var c cli
	parser, err := kong.New(&c, parserOptions()...)
	if err != nil {
		return nil
	}
	known := map[string]bool{}
	for _, n := range parser.Model.Children {
		if n.Name != "serve" {
			continue
		}
		for _, f := range n.Flags {
			if f.Name != "config" && f.Name != "help" {
				known[f.Name] = true
			}
		}
	}
	return known
}
