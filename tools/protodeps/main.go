// Command protodeps writes the .proto sources of the Google API files the
// contentbackup API imports (google.longrunning.Operation and what it
// needs) into a directory buf compiles against.
//
// The sources are printed from the descriptors the Go modules in go.mod
// register (cloud.google.com/go/longrunning, genproto), so they are the
// same definitions the generated Go code links against, at the versions
// go.mod pins. `make generate` writes them under api/third_party, where
// they are committed, so `buf generate` with any plugin works in a fresh
// clone; `make check-generated` fails when they differ from go.mod's.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/jhump/protoreflect/v2/protoprint"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() {
	out := flag.String("out", "third_party", "directory to write the .proto files under")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "protodeps:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	// The long-running Operation the API returns, and the error details
	// its statuses carry (ErrorInfo, BadRequest, RequestInfo), which a
	// client in another language needs to read them.
	files := closure(longrunningpb.File_google_longrunning_operations_proto, errdetails.File_google_rpc_error_details_proto)
	p := protoprint.Printer{}
	if err := p.PrintProtosToFileSystem(files, out); err != nil {
		return fmt.Errorf("print: %w", err)
	}
	return nil
}

// closure is fds and every file they import, transitively, except the
// well-known types buf already has.
func closure(fds ...protoreflect.FileDescriptor) []protoreflect.FileDescriptor {
	seen := map[string]bool{}
	var files []protoreflect.FileDescriptor
	var walk func(protoreflect.FileDescriptor)
	walk = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] || strings.HasPrefix(f.Path(), "google/protobuf/") {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := range imports.Len() {
			walk(imports.Get(i).FileDescriptor)
		}
		files = append(files, f)
	}
	for _, fd := range fds {
		walk(fd)
	}
	return files
}
