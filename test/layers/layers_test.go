// Package layers holds the repository's layering to account: each package
// sits on one floor and imports only from its own floor or below, and
// below the gRPC edge no package speaks the API (contentbackup.v1) or
// gRPC.
package layers

import (
	"encoding/json"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/contentbackup/contentbackup/"

// floors: the layer list of docs/architecture.md, bottom to top. A package of this module
// missing here fails the test, so a new package must be placed.
var floors = map[string]int{
	"internal/wire": 1, "internal/fault": 1, "internal/eventually": 1, "internal/budget": 1, "internal/buildinfo": 1, "internal/devpki": 1, "internal/doclines": 1,
	"internal/codec": 2, "internal/preview": 2, "internal/archive": 2, "internal/archive/archivetest": 2, "internal/records": 2, "internal/keyring": 2,
	"internal/store": 3, "internal/store/internal/sqlstore": 3, "internal/store/sqlite": 3, "internal/store/postgres": 3, "internal/store/storetest": 3, "internal/store/enginetest": 3,
	"internal/backup": 4, "internal/backup/backuptest": 4, "internal/expiry": 4, "internal/history": 4,
	"internal/jobs": 5, "internal/jobs/jobstest": 5, "internal/drivers": 5,
	// The gRPC edge: authentication, transport, telemetry, the content
	// API's mapping onto the codecs, and the services.
	"internal/auth": 6, "internal/auth/authtest": 6, "internal/transport": 6, "internal/telemetry": 6, "internal/contentapi": 6, "internal/server": 6,
	"internal/server/pagetoken": 6, "internal/server/httpjson": 6, "internal/server/authz": 6, "internal/server/requestid": 6,
	"internal/server/callbudget": 6, "internal/server/streams": 6, "internal/server/wirecodec": 6,
	"cmd/server": 7, "cmd/archivectl": 7,
}

const edge = 6

// speaksAPI: imports that belong to the edge alone.
func speaksAPI(imp string) bool {
	return imp == module+"api/contentbackup/v1" || imp == "google.golang.org/grpc" || strings.HasPrefix(imp, "google.golang.org/grpc/")
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", module+"internal/...", module+"cmd/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	spoke := map[string][]string{}
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		floor, ok := floors[name]
		if !ok {
			t.Errorf("%s has no floor: place it in floors (and the layer list of docs/architecture.md)", name)
			continue
		}
		for _, imp := range p.Imports {
			if dep, ok := floors[strings.TrimPrefix(imp, module)]; ok && dep > floor {
				t.Errorf("%s (floor %d) imports %s (floor %d): calls go downward only", name, floor, strings.TrimPrefix(imp, module), dep)
			}
			if floor < edge && speaksAPI(imp) {
				spoke[name] = append(spoke[name], strings.TrimPrefix(imp, module))
			}
		}
	}
	var names []string
	for name := range spoke {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Errorf("%s is below the gRPC edge and imports %v: map to domain types and errors at the edge instead", name, spoke[name])
	}
}
