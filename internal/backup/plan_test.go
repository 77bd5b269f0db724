package backup

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestImportValidateOnlyPredictsTheImport: a dry run (ValidateOnly, AIP-163)
// reads the whole archive, writes nothing, and reports exactly what the
// import then does: into an empty owner, into an owner holding part of the
// archive, and into one holding all of it; on both engines.
func TestImportValidateOnlyPredictsTheImport(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		a := storetest.Owner("a")
		fill(t, s, a)
		full, _ := export(t, s, a, nil)
		// The earlier half of the messages, by send time.
		var sent []int64
		_, els := elements(t, full)
		for _, el := range els {
			if m := el.GetGroupMessage(); m != nil {
				sent = append(sent, m.GetSentAtNs())
			}
		}
		slices.Sort(sent)
		early, _ := export(t, s, a, &ds.ArchiveOptions{EndNs: ptr64(sent[len(sent)/2]), Elements: []ds.BackupElementSelection{
			ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES, ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_CONSENT}})
		for _, c := range []struct {
			name  string
			first []byte // imported for real before the dry run
		}{{"empty owner", nil}, {"part of it stored", early}, {"all of it stored", full}} {
			t.Run(c.name, func(t *testing.T) {
				b := storetest.Owner("b-" + c.name)
				if c.first != nil {
					if _, err := Import(t.Context(), s, b, key, bytes.NewReader(c.first), ImportOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				g0, m0, c0 := snapshotOf(t, s, b)
				plan, err := Import(t.Context(), s, b, key, bytes.NewReader(full), ImportOptions{ValidateOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				g1, m1, c1 := snapshotOf(t, s, b)
				diff(t, "groups after a dry run", g1, g0)
				diff(t, "messages after a dry run", m1, m0)
				diff(t, "consent after a dry run", c1, c0)
				done, err := Import(t.Context(), s, b, key, bytes.NewReader(full), ImportOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(plan) != fmt.Sprint(done) {
					t.Errorf("the dry run said %+v; the import did %+v", plan, done)
				}
				if c.name == "part of it stored" && (plan.Messages.Unchanged == 0 || plan.Messages.Inserted == 0) {
					t.Errorf("a partly stored archive: %+v, want some messages new and some known", plan.Messages)
				}
			})
		}
	})
}

func ptr64(v int64) *int64 { return &v }
