// Package openapi holds the OpenAPI (Swagger 2.0) document of the HTTP/JSON
// listener's routes, made from the protos by grpc-gateway's
// protoc-gen-openapiv2 (tools/openapi, make generate) and served by that
// listener at /openapi.json.
package openapi

import (
	"bytes"
	_ "embed"
)

//go:embed contentbackup.swagger.json
var document []byte

// Document is the document, as JSON.
func Document() []byte { return bytes.Clone(document) }
