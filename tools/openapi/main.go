// Command openapi writes the OpenAPI (Swagger 2.0) document of every HTTP
// route the HTTP/JSON listener serves: each google.api.http rule of the
// API, and the Connect path (POST /<package.Service>/<Method>, the request
// as a JSON body) of every unary RPC, google.longrunning.Operations
// included. Streaming RPCs are left out: their bodies are Connect or
// gRPC-Web frames, not JSON (docs/clients.md).
//
// The document is made by grpc-gateway's protoc-gen-openapiv2 (pinned in
// the Makefile) through buf, twice over one image of the API: as it is,
// for the REST rules and the unannotated RPCs' paths, and with the rules
// cleared, for the Connect paths of the annotated ones. This program only
// merges the two, drops the streaming operations and adds the bearer
// token's security definition; make check-generated holds the committed
// api/openapi/contentbackup.swagger.json to it.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// paths are the files whose services the document covers.
var paths = []string{"contentbackup/v1", "google/longrunning"}

func main() {
	api := flag.String("api", "api", "the API's buf workspace")
	out := flag.String("out", "api/openapi/contentbackup.swagger.json", "the document to write")
	flag.Parse()
	if err := run(*api, *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}

func run(api, out string) error {
	tmp, err := os.MkdirTemp("", "openapi")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	image := filepath.Join(tmp, "image.binpb")
	args := []string{"build", "--as-file-descriptor-set", "-o", image}
	for _, p := range paths {
		args = append(args, "--path", sourcePath(p))
	}
	if err := command(api, "buf", args...); err != nil {
		return err
	}
	set, err := readSet(image)
	if err != nil {
		return err
	}
	rest, err := generate(api, tmp, "rest", image)
	if err != nil {
		return err
	}
	unbound := filepath.Join(tmp, "unbound.binpb")
	if err := writeSet(unbound, withoutHTTPRules(set)); err != nil {
		return err
	}
	connect, err := generate(api, tmp, "connect", unbound)
	if err != nil {
		return err
	}
	doc := merge(rest, connect, streaming(set))
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// sourcePath is a path as buf's --path names it in the workspace: the
// Google files live in the third_party module.
func sourcePath(p string) string {
	if strings.HasPrefix(p, "google/") {
		return "third_party/" + p
	}
	return p
}

func command(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

func readSet(path string) (*descriptorpb.FileDescriptorSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(b, set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return set, nil
}

func writeSet(path string, set *descriptorpb.FileDescriptorSet) error {
	b, err := proto.Marshal(set)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// withoutHTTPRules is set with every method's google.api.http rule
// cleared, so that the generator gives each RPC its own path.
func withoutHTTPRules(set *descriptorpb.FileDescriptorSet) *descriptorpb.FileDescriptorSet {
	set = proto.Clone(set).(*descriptorpb.FileDescriptorSet)
	for _, f := range set.GetFile() {
		for _, s := range f.GetService() {
			for _, m := range s.GetMethod() {
				if m.GetOptions() != nil {
					proto.ClearExtension(m.GetOptions(), annotations.E_Http)
				}
			}
		}
	}
	return set
}

// streaming is the RPC path of every streaming method of set.
func streaming(set *descriptorpb.FileDescriptorSet) map[string]bool {
	out := map[string]bool{}
	for _, f := range set.GetFile() {
		for _, s := range f.GetService() {
			for _, m := range s.GetMethod() {
				if m.GetClientStreaming() || m.GetServerStreaming() {
					out["/"+f.GetPackage()+"."+s.GetName()+"/"+m.GetName()] = true
				}
			}
		}
	}
	return out
}

// generate runs protoc-gen-openapiv2 over image and reads the document.
func generate(api, tmp, name, image string) (map[string]any, error) {
	dir := filepath.Join(tmp, name)
	template := fmt.Sprintf(`{"version":"v2","plugins":[{"local":"protoc-gen-openapiv2","out":%q,"strategy":"all",
"opt":["generate_unbound_methods=true","allow_merge=true","merge_file_name=contentbackup","output_format=json","omit_enum_default_value=true"]}]}`, dir)
	args := []string{"generate", image, "--template", template}
	for _, p := range paths {
		args = append(args, "--path", p)
	}
	if err := command(api, "buf", args...); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "contentbackup.swagger.json"))
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s document: %w", name, err)
	}
	return doc, nil
}

// merge is rest with connect's paths for the RPCs rest has under a REST
// rule only, less the streaming RPCs, with the bearer token required.
func merge(rest, connect map[string]any, streams map[string]bool) map[string]any {
	paths, _ := rest["paths"].(map[string]any)
	defs, _ := rest["definitions"].(map[string]any)
	for path, item := range connect["paths"].(map[string]any) {
		if _, ok := paths[path]; ok || !rpcPath(path) {
			continue
		}
		// The REST rule's operation keeps the method's operation id; the
		// Connect path's is the second binding's, as the generator names
		// an additional binding.
		for _, op := range item.(map[string]any) {
			if op, ok := op.(map[string]any); ok {
				op["operationId"] = fmt.Sprint(op["operationId"]) + "2"
			}
		}
		paths[path] = item
	}
	for path := range paths {
		if streams[path] {
			delete(paths, path)
		}
	}
	for name, def := range connect["definitions"].(map[string]any) {
		if _, ok := defs[name]; !ok {
			defs[name] = def
		}
	}
	rest["info"] = map[string]any{
		"title":       "contentbackup",
		"version":     "v1",
		"description": "The HTTP/JSON listener's routes (--http-listen): each google.api.http rule and the Connect path of every unary RPC. Every call but the health check needs a bearer token. Streaming RPCs are served there too, as Connect or gRPC-Web streams, and are not listed.",
	}
	rest["securityDefinitions"] = map[string]any{
		"bearer": map[string]any{"type": "apiKey", "name": "Authorization", "in": "header", "description": "Bearer <token>"},
	}
	rest["security"] = []any{map[string]any{"bearer": []any{}}}
	return rest
}

// rpcPath reports whether path is an RPC's own path, /<package.Service>/<Method>.
func rpcPath(path string) bool {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	return len(parts) == 2 && strings.Contains(parts[0], ".")
}
