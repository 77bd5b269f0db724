package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/jobs"
)

func TestOperationNames(t *testing.T) {
	id := jobs.NewID(time.Now())
	if got, err := jobIDOf(operationName(id)); err != nil || got != id {
		t.Errorf("round trip: %q, %v", got, err)
	}
	for _, bad := range []string{"", id, "operations/", "operations/" + id + "x", "operations/../" + id[3:], "operations/" + strings.ToUpper(id)} {
		if _, err := jobIDOf(bad); err == nil {
			t.Errorf("jobIDOf(%q) accepted", bad)
		}
	}
}

// FuzzJobID: an operation name is accepted only as operations/ and 32
// lowercase hex digits, and the id it gives names it again.
func FuzzJobID(f *testing.F) {
	for _, seed := range []string{"operations/18edb1feabe826e344714986db5e6a6f", "operations/", "operations/../x", "x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, err := jobIDOf(name)
		if err != nil {
			return
		}
		if operationName(id) != name || len(id) != 32 {
			t.Fatalf("jobIDOf(%q) = %q", name, id)
		}
	})
}

// TestPersistenceIsTheAPIsWireForm: the jobs layer keeps a job's spec,
// progress and result as contentbackup.persistence.v1 messages, and the
// edge reads those bytes as the API's messages (operation, jobMetadata);
// rows written before the split hold the API's messages and are read by
// the jobs layer. Both hold while each persistence field is the API
// field of the same number: same name, kind and cardinality, a nested
// message or enum alike in turn (enums value for value). The sidecar's
// JSON, written from the persistence result, then reads as the API's.
func TestPersistenceIsTheAPIsWireForm(t *testing.T) {
	pairs := []struct{ row, api protoreflect.ProtoMessage }{
		{&pv.ExportSpec{}, &cb.StartExportRequest{}},
		{&pv.ImportSpec{}, &cb.StartImportRequest{}},
		{&pv.JobProgress{}, &cb.JobMetadata{}},
		{&pv.ExportJobResult{}, &cb.ExportJobResult{}},
		{&pv.ImportJobResult{}, &cb.ImportJobResult{}},
		{&pv.EraseJobResult{}, &cb.EraseOwnerResult{}},
	}
	for _, p := range pairs {
		sameWireForm(t, p.row.ProtoReflect().Descriptor(), p.api.ProtoReflect().Descriptor())
	}
}

func sameWireForm(t *testing.T, row, api protoreflect.MessageDescriptor) {
	t.Helper()
	fields := row.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		g := api.Fields().ByNumber(f.Number())
		where := string(row.FullName()) + "." + string(f.Name())
		if g == nil {
			t.Errorf("%s (%d): %s has no field %d", where, f.Number(), api.FullName(), f.Number())
			continue
		}
		if f.Name() != g.Name() || f.Kind() != g.Kind() || f.Cardinality() != g.Cardinality() {
			t.Errorf("%s: %s %s %s; the API's field %d is %s %s %s", where, f.Cardinality(), f.Kind(), f.Name(), f.Number(), g.Cardinality(), g.Kind(), g.Name())
			continue
		}
		switch {
		case f.Message() != nil && f.Message().FullName() != g.Message().FullName():
			sameWireForm(t, f.Message(), g.Message())
		case f.Enum() != nil:
			sameEnum(t, where, f.Enum(), g.Enum())
		}
	}
	// Every API field the row leaves out is one the row reserves (so no
	// later persistence field can take its number for something else).
	for i := range api.Fields().Len() {
		g := api.Fields().Get(i)
		if fields.ByNumber(g.Number()) == nil && !row.ReservedRanges().Has(g.Number()) {
			t.Errorf("%s: the API's %s (%d) is neither kept nor reserved", row.FullName(), g.Name(), g.Number())
		}
	}
}

func sameEnum(t *testing.T, where string, row, api protoreflect.EnumDescriptor) {
	t.Helper()
	if row.Values().Len() != api.Values().Len() {
		t.Errorf("%s: %d enum values; the API's %s has %d", where, row.Values().Len(), api.FullName(), api.Values().Len())
	}
	for i := range row.Values().Len() {
		v := row.Values().Get(i)
		if w := api.Values().ByNumber(v.Number()); w == nil || w.Name() != v.Name() {
			t.Errorf("%s: enum value %s (%d) is not the API's", where, v.Name(), v.Number())
		}
	}
}
