package codec

import "strconv"

// Entry is one row of the catalogue table of CTYPE section 7.
type Entry struct {
	Type      TypeID
	Push      bool
	Deletable bool
	// Transcript marks commit transcripts (group updated and the legacy
	// membership change), which GMOD-035 forbids publishing.
	Transcript bool
	// Reserved marks the edit type: a schema with no active codec (CTYPE-020).
	Reserved bool

	name string // Type.String(), computed once
}

// catalogue is the table's rows, in the descriptors' order.
var catalogue = func() []Entry {
	var out []Entry
	for _, d := range descriptors {
		if d.Catalogued {
			out = append(out, d.Entry)
		}
	}
	return out
}()

// catalogueByKey indexes the table for the per-message lookups of Decode.
var catalogueByKey = func() map[Key]Entry {
	m := make(map[Key]Entry, len(catalogue))
	for _, e := range catalogue {
		e.name = e.Type.Authority + "/" + e.Type.Type + ":" + strconv.FormatUint(uint64(e.Type.Major), 10) + ".0"
		m[e.Type.Key()] = e
	}
	return m
}()

// Catalogue returns the catalogue row matching t on authority, type and
// major version (CTYPE-001). The legacy reaction 1.0 is outside the catalogue.
func Catalogue(t TypeID) (Entry, bool) {
	e, ok := catalogueByKey[t.Key()]
	return e, ok
}

// Entries returns a copy of the catalogue table.
func Entries() []Entry { return append([]Entry(nil), catalogue...) }

// Deletable reports whether content of type t may be the target of a
// deletion (CTYPE-018): a catalogue type marked Deletable yes. Transcripts,
// unknown, custom and reserved types, and types marked no, are not. The
// message kind half of the rule belongs to the caller, which knows it.
func Deletable(t TypeID) bool {
	e, ok := Catalogue(t)
	return ok && e.Deletable
}
