package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
)

// protoJSON is the one JSON form archivectl prints API messages in:
// protojson with the proto field names (snake_case, as archivectl's own
// objects), every field present (an empty list is [], never missing), and
// protojson's own rules otherwise (64-bit integers as strings), but for
// digests.
//
// One convention for every --json output: protobuf's field names, every
// field present (empty lists as []), and digests (a "sha256" field) in
// lowercase hex, as sha256sum prints them and the text output shows them,
// not in the base64 protobuf's JSON gives bytes.
func protoJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	dropNulls(v)
	hexDigests(v)
	return json.Marshal(v)
}

// protoWith is protoJSON's object for m with extra's keys beside its
// fields: an export's summary and the file it wrote, in one object.
func protoWith(m proto.Message, extra map[string]any) (json.RawMessage, error) {
	b, err := protoJSON(m)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for k, v := range extra {
		fields[k] = v
	}
	return json.Marshal(fields)
}

// dropNulls removes every key whose value is null: protojson writes a
// message field that is not set as null ("hold": null for a backup no
// hold keeps); in archivectl's JSON a field not set is absent, and a list
// is [] (protojson's own), never null.
func dropNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			dropNulls(x)
		}
	case []any:
		for _, x := range t {
			dropNulls(x)
		}
	}
}

// hexDigests rewrites every "sha256" string of v, base64, as hex, and
// reports whether it found one.
func hexDigests(v any) bool {
	found := false
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "sha256" {
				if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
					t[k] = hex.EncodeToString(raw)
					found = true
				}
				continue
			}
			found = hexDigests(x) || found
		}
	case []any:
		for _, x := range t {
			found = hexDigests(x) || found
		}
	}
	return found
}

// output prints v as JSON with --json, else text.
func (c *cli) output(v any, text string) error {
	if !c.JSON {
		fmt.Print(text)
		return nil
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// metadataJSON renders a metadata element with protojson's field names.
func metadataJSON(m *ds.BackupMetadataSave) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

func metadataText(m *ds.BackupMetadataSave) string {
	var sel []string
	for _, e := range m.GetElements() {
		sel = append(sel, strings.TrimPrefix(e.String(), "BACKUP_ELEMENT_SELECTION_"))
	}
	window := "none"
	if m.StartNs != nil || m.EndNs != nil {
		window = fmt.Sprintf("(%s, %s]", optNs(m.StartNs), optNs(m.EndNs))
	}
	return fmt.Sprintf("selection:   %s\nwindow:      %s\nexported at: %s (%d ns)\n",
		strings.Join(sel, ", "), window, time.Unix(0, m.GetExportedAtNs()).UTC().Format(time.RFC3339Nano), m.GetExportedAtNs())
}

func optNs(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// progress reports a long transfer on stderr, at most once a second:
// bytes and rate, and with a known total (an import's file) the share
// done and the time left at the rate so far.
type progress struct {
	verb        string
	total       uint64 // 0: unknown
	start, last time.Time
	bytes       uint64
}

func newProgress(verb string, total uint64) *progress {
	now := time.Now()
	return &progress{verb: verb, total: total, start: now, last: now}
}

func (p *progress) add(n int) {
	p.bytes += uint64(n)
	if time.Since(p.last) >= time.Second {
		p.last = time.Now()
		fmt.Fprintln(os.Stderr, p.line(time.Since(p.start)))
	}
}

// line is the report after elapsed: no rate before a whole second has
// gone (a rate over the first milliseconds reads as terabytes a second).
func (p *progress) line(elapsed time.Duration) string {
	mib := float64(p.bytes) / (1 << 20)
	line := fmt.Sprintf("%s %.1f MiB", p.verb, mib)
	if p.total > 0 {
		line = fmt.Sprintf("%s %.1f of %.1f MiB (%.0f%%)", p.verb, mib, float64(p.total)/(1<<20), 100*float64(p.bytes)/float64(p.total))
	}
	if elapsed < time.Second || p.bytes == 0 {
		return line
	}
	rate := float64(p.bytes) / elapsed.Seconds()
	line += fmt.Sprintf(", %.1f MiB/s", rate/(1<<20))
	if p.total > p.bytes {
		left := time.Duration(float64(p.total-p.bytes) / rate * float64(time.Second))
		line += ", about " + left.Round(time.Second).String() + " left"
	}
	return line
}
