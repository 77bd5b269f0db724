package archive

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// referenceReport is what the reference said it wrote into
// testdata/reference-libxmtp-1.11.0.xmtpbak (its "source" field says how
// the file was made).
type referenceReport struct {
	Source   string   `json:"source"`
	Key      string   `json:"key"`
	Groups   []string `json:"groups"`
	Messages []struct {
		Name     string `json:"name"`
		ID       string `json:"id"`
		Group    string `json:"group"`
		Envelope struct {
			Type struct {
				AuthorityID  string `json:"authorityId"`
				TypeID       string `json:"typeId"`
				VersionMajor uint32 `json:"versionMajor"`
				VersionMinor uint32 `json:"versionMinor"`
			} `json:"type"`
			Content string `json:"content"`
		} `json:"envelope"`
	} `json:"messages"`
	Consent []struct {
		EntityType int    `json:"entityType"`
		State      int    `json:"state"`
		Entity     string `json:"entity"`
	} `json:"consent"`
}

// TestARCH001_ReadsTheReferencesArchive: a golden vector from the
// reference client itself, not from our writer: an archive libxmtp 1.11.0
// wrote (a counter archive, one zstd frame the reference compressed) reads
// to exactly the groups, messages and consent it reported writing. The
// interoperability tests (interop/) do the same live on every run; this
// file holds the reader to it without Node.
func TestARCH001_ReadsTheReferencesArchive(t *testing.T) {
	var report referenceReport
	raw, err := os.ReadFile("testdata/reference-libxmtp-1.11.0.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &report); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(report.Key)
	data, err := os.ReadFile("testdata/reference-libxmtp-1.11.0.xmtpbak")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(data), key, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Metadata(); err != nil {
		t.Fatalf("metadata: %v", err)
	}
	var groups, messages, consent []string
	bodies := map[string][]byte{}
	for {
		el, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case el.GetGroup() != nil:
			groups = append(groups, hex.EncodeToString(el.GetGroup().GetId()))
		case el.GetGroupMessage() != nil:
			m := el.GetGroupMessage()
			id := hex.EncodeToString(m.GetId())
			messages = append(messages, id+" in "+hex.EncodeToString(m.GetGroupId()))
			bodies[id] = m.GetDecryptedMessageBytes()
		case el.GetConsent() != nil:
			c := el.GetConsent()
			consent = append(consent, c.GetEntityType().String()+" "+c.GetState().String()+" "+c.GetEntity())
		}
	}
	if st := r.Stats(); st.Legacy != 0 || st.Skipped != 0 {
		t.Errorf("stats %+v; the reference writes a counter archive", st)
	}
	var wantMessages []string
	for _, m := range report.Messages {
		wantMessages = append(wantMessages, m.ID+" in "+m.Group)
		var ec mc.EncodedContent
		if err := proto.Unmarshal(bodies[m.ID], &ec); err != nil {
			t.Errorf("%s: content is not an envelope: %v", m.Name, err)
			continue
		}
		want, _ := hex.DecodeString(m.Envelope.Content)
		typ := m.Envelope.Type
		if got := ec.GetType(); got.GetAuthorityId() != typ.AuthorityID || got.GetTypeId() != typ.TypeID || got.GetVersionMajor() != typ.VersionMajor || got.GetVersionMinor() != typ.VersionMinor || !bytes.Equal(ec.GetContent(), want) {
			t.Errorf("%s: read %v with content %x; the reference wrote %+v with %x", m.Name, got, ec.GetContent(), typ, want)
		}
	}
	// The reference's enums as its bindings number them: entity type
	// 0 group id, 1 inbox id; state 1 allowed, 2 denied.
	jsType := map[int]cs.ConsentTypeSave{0: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID, 1: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID}
	jsState := map[int]cs.ConsentStateSave{1: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 2: cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED}
	var wantConsent []string
	for _, c := range report.Consent {
		wantConsent = append(wantConsent, jsType[c.EntityType].String()+" "+jsState[c.State].String()+" "+c.Entity)
	}
	for _, l := range [][]string{groups, report.Groups, messages, wantMessages, consent, wantConsent} {
		slices.Sort(l)
	}
	if !slices.Equal(groups, report.Groups) {
		t.Errorf("groups %v; the reference wrote %v", groups, report.Groups)
	}
	if !slices.Equal(messages, wantMessages) {
		t.Errorf("messages %v; the reference wrote %v", messages, wantMessages)
	}
	// The reference reports the consent it was told to set; creating a
	// group also records its own consent, ALLOWED, which it does not
	// report. So: every reported record, and beside them only that.
	for _, g := range report.Groups {
		if own := "CONSENT_TYPE_SAVE_CONVERSATION_ID CONSENT_STATE_SAVE_ALLOWED " + g; !slices.Contains(wantConsent, own) && slices.Contains(consent, own) {
			wantConsent = append(wantConsent, own)
		}
	}
	slices.Sort(wantConsent)
	if !slices.Equal(consent, wantConsent) {
		t.Errorf("consent %v; the reference wrote %v", consent, wantConsent)
	}
}
