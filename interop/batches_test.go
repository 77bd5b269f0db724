package interop

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/archive"
)

// The generator's batches (issue 34): many records per archive, as a
// device's backup holds them (groups and DMs with their messages, consent
// for inboxes and conversations, duplicates), with the single-record
// generator's field and envelope edges mixed in, in both directions:
//
//   - ours to the reference: each batch is written through the API, one
//     record at a time, and the records taken are written again through
//     Import into a second owner that has the batch's conversations live
//     (ARCH-014; a conversation Import creates is Restored and never
//     exported, ARCH-026); both owners' exports must hold the same
//     records, and the reference's import of each must list every group
//     and message of them, field by field (envelope, conversation, time,
//     kind, and the type it files the message under), and read every
//     consent state; a record we refuse goes alone to the reference, and
//     must be one it refuses too or one overRefusals names.
//   - the reference to ours: the reference writes an archive of many
//     messages with generated envelopes; we import it, export it again,
//     and the reference must read our export exactly as it read its own.
var (
	genBatches      = flag.Int("gen.batches", 3, "batches the generator writes in each direction")
	genBatchRecords = flag.Int("gen.batch-records", 80, "records in each of the generator's batches")
)

// batchRecord is one record of a batch and what became of it.
type batchRecord struct {
	shape
	taken  bool
	refuse string // our refusal
}

// standardEnvelopes are our encoding of every catalogue value the
// reference encodes too, by name.
func standardEnvelopes(t *testing.T) map[string][]byte {
	t.Helper()
	c := contentClient(t)
	out := map[string][]byte{}
	for name, v := range interopValues() {
		r, err := c.Encode(t.Context(), &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: v}})
		if err != nil {
			t.Fatalf("encode %s: %v", name, err)
		}
		out[name] = r.GetEncodedContent()
	}
	return out
}

// makeBatch draws a batch of about n records from rng: groups and DMs,
// each with messages of standard or edge content, consent on inboxes and
// on the batch's conversations, and duplicates of records already drawn.
func makeBatch(rng *rand.Rand, b, n int, std map[string][]byte) []batchRecord {
	ge, me, ce := groupEdges(), messageEdges(), consentEdges()
	stdNames := make([]string, 0, len(std))
	for name := range std {
		stdNames = append(stdNames, name)
	}
	sort.Strings(stdNames)
	var out []batchRecord
	var groups []*gb.GroupSave
	add := func(s shape) { out = append(out, batchRecord{shape: s}) }
	edgeNames := func(names []string) string {
		if len(names) == 0 {
			return "plain"
		}
		return strings.Join(names, " + ")
	}
	for len(out) < n {
		// A conversation: a group or a DM, now and then at an edge.
		g := baseGroup(b*100000 + len(out))
		var names []string
		if rng.IntN(3) == 0 {
			g.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM
			g.DmId = proto.String("dm:" + inboxID(fmt.Sprint("peer ", b, len(out))) + ":" + inboxID("batch owner"))
			names = append(names, "DM")
		}
		if rng.IntN(4) == 0 {
			e := ge[rng.IntN(len(ge))]
			e.apply(g)
			names = append(names, e.name)
		}
		add(shape{name: "group: " + edgeNames(names), group: g})
		groups = append(groups, g)
		// Its messages.
		for range 2 + rng.IntN(12) {
			m := baseMessage(b*100000 + len(out))
			names = nil
			if rng.IntN(2) == 0 {
				name := stdNames[rng.IntN(len(stdNames))]
				m.DecryptedMessageBytes = std[name]
				names = append(names, name)
			}
			for range rng.IntN(3) {
				e := me[rng.IntN(len(me))]
				e.apply(m)
				names = append(names, e.name)
			}
			if !strings.Contains(strings.Join(names, " "), "group_id") {
				m.GroupId = g.GetId()
			}
			m.SentAtNs = 1_700_000_000_000_000_000 + int64(len(out))*1_000_000_000
			add(shape{name: "message: " + edgeNames(names), message: m})
		}
		// Consent, on an inbox or on one of the batch's conversations.
		for range rng.IntN(3) {
			c := baseConsent()
			c.Entity = inboxID(fmt.Sprint("consent ", b, len(out)))
			names = nil
			if rng.IntN(2) == 0 {
				c.EntityType = cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID
				c.Entity = hex.EncodeToString(groups[rng.IntN(len(groups))].GetId())
				names = append(names, "a conversation of the batch")
			}
			c.State = []cs.ConsentStateSave{cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED}[rng.IntN(2)]
			if rng.IntN(4) == 0 {
				e := ce[rng.IntN(len(ce))]
				e.apply(c)
				names = append(names, e.name)
			}
			add(shape{name: "consent: " + edgeNames(names), consent: c})
		}
		// A duplicate of a record drawn before, the same bytes again.
		if rng.IntN(2) == 0 {
			d := out[rng.IntN(len(out))].shape
			d.name = "duplicate of " + d.name
			add(d)
		}
	}
	return out
}

// batchTally counts records by outcome, as the single-record generator's.
type batchTally struct {
	Records     int `json:"records"`
	Agreed      int `json:"agreed"`
	AllowListed int `json:"allowListed"`
	Disagreed   int `json:"disagreed"`
}

// refListing is the ContentType name the reference files a message of a
// catalogue type under, by the envelope's type id.
var refListing = map[string]string{
	"text": "Text", "markdown": "Markdown", "reply": "Reply", "reaction": "Reaction", "readReceipt": "ReadReceipt",
	"attachment": "Attachment", "remoteStaticAttachment": "RemoteAttachment", "multiRemoteStaticAttachment": "MultiRemoteAttachment",
	"transactionReference": "TransactionReference", "walletSendCalls": "WalletSendCalls", "actions": "Actions", "intent": "Intent",
	"group_updated": "GroupUpdated", "group_membership_change": "GroupMembershipChange", "leave_request": "LeaveRequest",
}

// TestGeneratorBatches_OursToReference: see the comment on genBatches.
func TestGeneratorBatches_OursToReference(t *testing.T) {
	svc := startServices(t)
	ctx := t.Context()
	std := standardEnvelopes(t)
	rng := rand.New(rand.NewPCG(*genSeed, 0xba7c4e5))
	var total batchTally
	var refusedImports []*refImport
	var refusedRecords []*batchRecord
	var problems []string
	for b := range *genBatches {
		batch := makeBatch(rng, b, *genBatchRecords, std)
		viaAPI, viaImport := inboxID(fmt.Sprint("batch api ", *genSeed, b)), inboxID(fmt.Sprint("batch import ", *genSeed, b))
		var takenEls []*ds.BackupElement
		for i := range batch {
			r := &batch[i]
			var err error
			switch {
			case r.group != nil:
				_, err = svc.conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: viaAPI, Group: r.group})
			case r.message != nil:
				_, err = svc.conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: viaAPI, Messages: []*mb.GroupMessageSave{r.message}})
			default:
				_, err = svc.conv.SetConsent(ctx, &cb.SetConsentRequest{Owner: viaAPI, Records: []*cs.ConsentSave{r.consent}})
			}
			switch status.Code(err) {
			case codes.OK:
				r.taken = true
				takenEls = append(takenEls, r.element())
			case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound:
				r.refuse = status.Convert(err).Message()
				refusedRecords = append(refusedRecords, r)
				refusedImports = append(refusedImports, &refImport{archive: sealForReference(t, r.element()), consent: consentQuery(r.element())})
			default:
				t.Fatalf("batch %d, %s: our write path gave %v; bad input must get a clear refusal", b, r.name, err)
			}
		}
		// The same records through Import, duplicates and all, into a
		// store that has the batch's conversations live: Import would
		// make a conversation it creates Restored, and Restored history
		// is never exported (ARCH-026); into live ones it adds the
		// messages and consent (ARCH-014).
		for _, el := range takenEls {
			if g := el.GetGroup(); g != nil {
				if _, err := svc.conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: viaImport, Group: g}); err != nil {
					t.Fatalf("batch %d: a group the API took once: %v", b, err)
				}
			}
		}
		if _, err := importOver(t, svc.arch, viaImport, sealElements(t, takenEls)); err != nil {
			t.Fatalf("batch %d: Import of the %d records the API took: %v", b, len(takenEls), err)
		}
		apiArchive, err := exportBytes(svc.arch, viaAPI)
		if err != nil {
			t.Fatalf("batch %d: export of what the API took: %v", b, err)
		}
		importArchive, err := exportBytes(svc.arch, viaImport)
		if err != nil {
			t.Fatalf("batch %d: export of what Import took: %v", b, err)
		}
		apiEls, err := archiveElements(apiArchive)
		if err != nil {
			t.Fatal(err)
		}
		importEls, err := archiveElements(importArchive)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameRecords(apiEls, importEls); d != "" {
			problems = append(problems, fmt.Sprintf("batch %d: the API's owner and Import's differ: %s", b, d))
		}
		imports := []*refImport{
			{archive: apiArchive, consent: consentQuery(apiEls...)},
			{archive: importArchive, consent: consentQuery(importEls...)},
		}
		importEach(t, imports)
		for i, imp := range imports {
			how := []string{"through the API", "through Import"}[i]
			if imp.failed() {
				problems = append(problems, fmt.Sprintf("batch %d written %s: the reference's import failed: %s%s", b, how, imp.err, lastLine(imp.crashed)))
				continue
			}
			diffs, allowed := compareView(&imp.view, apiEls)
			for _, d := range diffs {
				problems = append(problems, fmt.Sprintf("batch %d written %s: %s", b, how, d))
			}
			if i == 0 {
				total.AllowListed += len(allowed)
				total.Agreed -= len(allowed) // counted below among the records taken
				for _, a := range allowed {
					t.Logf("allow-listed: batch %d: %s", b, a)
				}
			}
		}
		// A record taken is agreed unless a problem names it.
		joined := strings.Join(problems, "\n")
		for _, r := range batch {
			total.Records++
			switch {
			case !r.taken:
			case joined != "" && recordName(r.shape) != "" && strings.Contains(joined, recordName(r.shape)):
				total.Disagreed++
			default:
				total.Agreed++
			}
		}
	}
	// Each record we refused, alone, as the reference's import reads it.
	importEach(t, refusedImports)
	for i, imp := range refusedImports {
		r := refusedRecords[i]
		refTook := !imp.failed() && lostRecords(&imp.view, r.shape, nil, false) == "" && imp.view.hasMessage(id32("sentinel message"))
		why, allowed := overRefusal(r.kind(), r.refuse)
		switch {
		case !refTook:
			total.Agreed++
		case allowed:
			total.AllowListed++
			t.Logf("allow-listed: %s: %s", r.name, why)
		default:
			total.Disagreed++
			problems = append(problems, fmt.Sprintf("%s: we refuse it (%s), the reference takes it, and no over-refusal names it", r.name, short80(r.refuse)))
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if total.Records < *genBatches**genBatchRecords {
		t.Fatalf("tried %d records, fewer than the batches' %d", total.Records, *genBatches**genBatchRecords)
	}
	t.Logf("seed %d, ours to the reference: %d batches, %d records, %d agreed, %d allow-listed, %d disagreed",
		*genSeed, *genBatches, total.Records, total.Agreed, total.AllowListed, total.Disagreed)
	writeBatchReport(t, "oursToReference", total)
}

// consentQuery is what the reference is asked of consent after importing
// an archive of els: the state of every entity they name.
func consentQuery(els ...*ds.BackupElement) []map[string]any {
	var q []map[string]any
	for _, el := range els {
		if c := el.GetConsent(); c != nil {
			q = append(q, map[string]any{"entityType": jsConsentType(c.GetEntityType()), "entity": c.GetEntity()})
		}
	}
	return q
}

// sealElements seals els after a metadata record, as an export would.
func sealElements(t *testing.T, els []*ds.BackupElement) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, interopKey)
	if err != nil {
		t.Fatal(err)
	}
	meta := &ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{
		Elements:     []ds.BackupElementSelection{ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES, ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_CONSENT},
		ExportedAtNs: 1_700_000_000_000_000_000}}}
	for _, el := range append([]*ds.BackupElement{meta}, els...) {
		if err := w.WriteElement(el); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// recordName is the id a problem report names a record by.
func recordName(s shape) string {
	switch {
	case s.group != nil:
		return hex.EncodeToString(s.group.GetId())
	case s.message != nil:
		return hex.EncodeToString(s.message.GetId())
	}
	return short(s.consent.GetEntity())
}

// recordKey names a record for comparing two stores' exports: its kind
// and id, and for a message its bytes as exported.
func recordKey(el *ds.BackupElement) (string, []byte) {
	switch {
	case el.GetGroup() != nil:
		return "group " + hex.EncodeToString(el.GetGroup().GetId()), nil
	case el.GetGroupMessage() != nil:
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(el.GetGroupMessage())
		return "message " + hex.EncodeToString(el.GetGroupMessage().GetId()), b
	case el.GetConsent() != nil:
		c := el.GetConsent()
		return fmt.Sprintf("consent %d %s", c.GetEntityType(), c.GetEntity()), []byte(c.GetState().String())
	}
	return "", nil
}

// sameRecords compares two exports record by record: the same groups,
// the same messages byte for byte, the same consent states. Groups are
// compared by id only: Import restores them (ARCH-015).
func sameRecords(a, b []*ds.BackupElement) string {
	index := func(els []*ds.BackupElement) map[string][]byte {
		m := map[string][]byte{}
		for _, el := range els {
			if k, v := recordKey(el); k != "" {
				m[k] = v
			}
		}
		return m
	}
	ia, ib := index(a), index(b)
	var diffs []string
	for k, v := range ia {
		w, ok := ib[k]
		switch {
		case !ok:
			diffs = append(diffs, "only the API's: "+k)
		case !bytes.Equal(v, w):
			diffs = append(diffs, "differs: "+k)
		}
	}
	for k := range ib {
		if _, ok := ia[k]; !ok {
			diffs = append(diffs, "only Import's: "+k)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
	}
	return strings.Join(diffs, "; ")
}

// compareView lists how the reference's reading of an export of els
// differs from els, field by field.
func compareView(v *refArchiveView, els []*ds.BackupElement) (out, allowed []string) {
	listed := map[string]bool{}
	for _, el := range els {
		if g := el.GetGroup(); g != nil && listedType(g) {
			listed[string(g.GetId())] = true
			if !v.hasGroup(g.GetId()) {
				out = append(out, fmt.Sprintf("group %x is not listed (type %v, state %v, dm_id %.80q)", g.GetId(), g.GetConversationType(), g.GetMembershipState(), g.GetDmId()))
			}
		}
	}
	byID := map[string]int{}
	for i, m := range v.Messages {
		byID[m.ID] = i
	}
	// DMs: the reference stitches conversations that share a DM id (a
	// contentTypes filter on one finds the messages under another), and
	// on importing a live DM it records its own consent for it, Allowed,
	// dated at the import, over an archived record dated before.
	dms, dmIDs := map[string]bool{}, map[string]int{}
	for _, el := range els {
		if g := el.GetGroup(); g != nil && g.GetConversationType() == gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM {
			dms[hex.EncodeToString(g.GetId())] = true
			dmIDs[g.GetDmId()]++
		}
	}
	stitched := map[string]bool{}
	for _, el := range els {
		if g := el.GetGroup(); g != nil && g.DmId != nil && dmIDs[g.GetDmId()] > 1 {
			stitched[string(g.GetId())] = true
		}
	}
	for _, el := range els {
		m := el.GetGroupMessage()
		if m == nil || !listed[string(m.GetGroupId())] {
			continue
		}
		id := hex.EncodeToString(m.GetId())
		i, ok := byID[id]
		if !ok {
			out = append(out, "message "+id+" is not listed")
			continue
		}
		got := v.Messages[i]
		if got.ConvoID != hex.EncodeToString(m.GetGroupId()) {
			out = append(out, fmt.Sprintf("message %s is in conversation %s, not %x", id, got.ConvoID, m.GetGroupId()))
		}
		if sent := strings.Trim(string(got.SentAtNs), `"`); sent != fmt.Sprint(m.GetSentAtNs()) {
			out = append(out, fmt.Sprintf("message %s was sent at %s, not %d", id, sent, m.GetSentAtNs()))
		}
		ec := &mc.EncodedContent{}
		if proto.Unmarshal(m.GetDecryptedMessageBytes(), ec) != nil || ec.GetType() == nil {
			continue // not a typed envelope: the reference shows no content
		}
		refEC := got.Envelope.protoOrNil() // nil for content that is not hex: reported below
		if refEC == nil || !proto.Equal(normalize(refEC), normalize(ec)) {
			out = append(out, fmt.Sprintf("message %s: the reference reads its envelope as %v, we exported %v", id, refEC, ec))
		}
		if want, ok := refListing[ec.GetType().GetTypeId()]; ok && ec.GetType().GetAuthorityId() == "xmtp.org" && !stitched[string(m.GetGroupId())] {
			if len(got.ListedAs) != 1 || got.ListedAs[0] != want {
				out = append(out, fmt.Sprintf("message %s of type %s is filed under %v, want [%s]", id, ec.GetType().GetTypeId(), got.ListedAs, want))
			}
		}
	}
	for _, el := range els {
		c := el.GetConsent()
		if c == nil {
			continue
		}
		want, ok := jsConsentState(c.GetState())
		for _, got := range v.Consent {
			dmConsent := c.GetEntityType() == cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID && dms[c.GetEntity()] && got.State == jsConsentAllowed
			if !ok || got.Entity != c.GetEntity() || got.EntityType != jsConsentType(c.GetEntityType()) || got.State == want {
				continue
			}
			if dmConsent {
				allowed = append(allowed, fmt.Sprintf("consent %q of a DM reads Allowed: the reference consents to a live DM it imports, dated at the import", short(c.GetEntity())))
				continue
			}
			out = append(out, fmt.Sprintf("consent %q reads %d, want %d", short(c.GetEntity()), got.State, want))
		}
	}
	return out, allowed
}

// writeBatchReport adds direction's tally to the -gen.report file, when
// one is asked for (make interop-soak sums them).
func writeBatchReport(t *testing.T, direction string, tally batchTally) {
	t.Helper()
	if *genReport == "" {
		return
	}
	path := strings.TrimSuffix(*genReport, ".json") + "-" + direction + ".json"
	b, _ := json.MarshalIndent(map[string]any{"seed": *genSeed, "batches": *genBatches, "tally": tally}, "", "  ")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// genEnvelope draws an envelope for the reference to write: a catalogue
// value as we encode it, or a type and fields at their edges (NUL aside:
// a text column holds none, an over-refusal the single-record generator
// covers).
func genEnvelope(rng *rand.Rand, std map[string][]byte, stdNames []string) map[string]any {
	if rng.IntN(3) == 0 {
		ec := &mc.EncodedContent{}
		_ = proto.Unmarshal(std[stdNames[rng.IntN(len(stdNames))]], ec)
		return envelopeJSON(ec)
	}
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	typeIDs := []string{"poll", "", "\u00e9t\u00e9", ascii(200, 't')}
	for id := range refListing {
		typeIDs = append(typeIDs, id)
	}
	sort.Strings(typeIDs)
	ec := &mc.EncodedContent{Type: &mc.ContentTypeId{
		AuthorityId:  pick("xmtp.org", "example.com", "coinbase.com", "", "\u00e9.example", ascii(300, 'a')),
		TypeId:       typeIDs[rng.IntN(len(typeIDs))],
		VersionMajor: []uint32{0, 1, 2, 1 << 31}[rng.IntN(4)], VersionMinor: []uint32{0, 1, 7}[rng.IntN(3)],
	}}
	if n := rng.IntN(4); n > 0 {
		ec.Parameters = map[string]string{}
		for i := range n {
			ec.Parameters[pick("encoding", "k", "\u00e9", fmt.Sprint("p", i))] = pick("UTF-8", "", "v\u00e9", ascii(1000, 'v'))
		}
	}
	switch rng.IntN(3) {
	case 0:
		ec.Fallback = proto.String(pick("", "A poll", "\u00e9 fallback", ascii(2000, 'f')))
	}
	switch rng.IntN(4) {
	case 0:
		ec.Compression = mc.Compression_COMPRESSION_GZIP.Enum()
	case 1:
		ec.Compression = mc.Compression_COMPRESSION_DEFLATE.Enum()
	}
	content := make([]byte, []int{0, 1, 64, 4000}[rng.IntN(4)])
	for i := range content {
		content[i] = byte(rng.IntN(256))
	}
	ec.Content = content
	return envelopeJSON(ec)
}

// envelopeJSON is ec as archive.mjs takes it.
func envelopeJSON(ec *mc.EncodedContent) map[string]any {
	t := ec.GetType()
	e := map[string]any{
		"type":       map[string]any{"authorityId": t.GetAuthorityId(), "typeId": t.GetTypeId(), "versionMajor": t.GetVersionMajor(), "versionMinor": t.GetVersionMinor()},
		"parameters": nonNil(ec.GetParameters()), "content": hex.EncodeToString(ec.GetContent()),
	}
	if ec.Fallback != nil {
		e["fallback"] = ec.GetFallback()
	}
	if ec.Compression != nil {
		e["compression"] = int32(ec.GetCompression())
	}
	return e
}

// TestGeneratorBatches_ReferenceToOurs: see the comment on genBatches.
func TestGeneratorBatches_ReferenceToOurs(t *testing.T) {
	svc := startServices(t)
	ctx := t.Context()
	std := standardEnvelopes(t)
	stdNames := make([]string, 0, len(std))
	for name := range std {
		stdNames = append(stdNames, name)
	}
	sort.Strings(stdNames)
	rng := rand.New(rand.NewPCG(*genSeed, 0x4ef0ba7c))
	var total batchTally
	for b := range *genBatches {
		var custom []map[string]any
		for range *genBatchRecords {
			custom = append(custom, genEnvelope(rng, std, stdNames))
		}
		var created refCreated
		runScript(t, "archive.mjs", "create", map[string]any{"key": hex.EncodeToString(interopKey), "custom": custom}, &created)
		theirs, err := hex.DecodeString(created.Archive)
		if err != nil {
			t.Fatal(err)
		}
		els, err := archiveElements(theirs)
		if err != nil {
			t.Fatalf("batch %d: the reference's archive does not read here: %v", b, err)
		}
		// The conversations live first, so that what Import adds to them
		// is exported again (ARCH-014, ARCH-026).
		owner := inboxID(fmt.Sprint("reference batch ", *genSeed, b))
		for _, el := range els {
			if g := el.GetGroup(); g != nil {
				if _, err := svc.conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
					t.Fatalf("batch %d: the reference's group %x: %v", b, g.GetId(), err)
				}
			}
		}
		if _, err := importOver(t, svc.arch, owner, theirs); err != nil {
			t.Fatalf("batch %d: Import of the reference's archive of %d records: %v", b, len(els), err)
		}
		ours, err := exportBytes(svc.arch, owner)
		if err != nil {
			t.Fatalf("batch %d: export after importing the reference's archive: %v", b, err)
		}
		q := consentQuery(els...)
		views := []*refImport{{archive: theirs, consent: q}, {archive: ours, consent: q}}
		importEach(t, views)
		if views[0].failed() || views[1].failed() {
			t.Fatalf("batch %d: the reference's import: of its own archive %q%s, of ours %q%s", b,
				views[0].err, lastLine(views[0].crashed), views[1].err, lastLine(views[1].crashed))
		}
		diffs := sameView(&views[0].view, &views[1].view)
		for _, d := range diffs {
			t.Errorf("batch %d: %s", b, d)
		}
		joined := strings.Join(diffs, "\n")
		for _, el := range els {
			if el.GetMetadata() != nil {
				continue
			}
			total.Records++
			if m := el.GetGroupMessage(); m != nil && strings.Contains(joined, hex.EncodeToString(m.GetId())) {
				total.Disagreed++
			} else {
				total.Agreed++
			}
		}
	}
	if total.Records < *genBatches**genBatchRecords {
		t.Fatalf("tried %d records, fewer than the batches' %d", total.Records, *genBatches**genBatchRecords)
	}
	t.Logf("seed %d, the reference to ours: %d batches, %d records, %d agreed, %d disagreed", *genSeed, *genBatches, total.Records, total.Agreed, total.Disagreed)
	writeBatchReport(t, "referenceToOurs", total)
}

// sameView lists how the reference's reading of our export (b) differs
// from its reading of its own archive (a): every conversation and
// message, field by field, and every consent state.
func sameView(a, b *refArchiveView) []string {
	var out []string
	for _, c := range a.Conversations {
		if !b.hasGroup(mustUnhex(c.ID)) {
			out = append(out, "conversation "+c.ID+" is not in our export")
		}
	}
	ours := map[string]int{}
	for i, m := range b.Messages {
		ours[m.ID] = i
	}
	for _, m := range a.Messages {
		i, ok := ours[m.ID]
		if !ok {
			out = append(out, "message "+m.ID+" is not in our export")
			continue
		}
		o := b.Messages[i]
		ea, eb := m.Envelope.protoOrNil(), o.Envelope.protoOrNil()
		switch {
		case o.ConvoID != m.ConvoID:
			out = append(out, fmt.Sprintf("message %s: conversation %s, the reference's own %s", m.ID, o.ConvoID, m.ConvoID))
		case ea == nil || eb == nil || !proto.Equal(normalize(ea), normalize(eb)):
			out = append(out, fmt.Sprintf("message %s: envelope %v, the reference's own %v", m.ID, eb, ea))
		case strings.Join(o.ListedAs, ",") != strings.Join(m.ListedAs, ","):
			out = append(out, fmt.Sprintf("message %s: filed under %v, the reference's own under %v", m.ID, o.ListedAs, m.ListedAs))
		case !bytes.Equal(o.SentAtNs, m.SentAtNs) || !bytes.Equal(o.Kind, m.Kind):
			out = append(out, fmt.Sprintf("message %s: sent at %s, kind %s; the reference's own %s, %s", m.ID, o.SentAtNs, o.Kind, m.SentAtNs, m.Kind))
		case !bytes.Equal(o.ContentType, m.ContentType):
			out = append(out, fmt.Sprintf("message %s: content type %s, the reference's own %s", m.ID, o.ContentType, m.ContentType))
		}
	}
	for _, c := range a.Consent {
		for _, d := range b.Consent {
			if c.Entity == d.Entity && c.EntityType == d.EntityType && c.State != d.State {
				out = append(out, fmt.Sprintf("consent %q: %d, the reference's own %d", short(c.Entity), d.State, c.State))
			}
		}
	}
	return out
}

func mustUnhex(s string) []byte { b, _ := hex.DecodeString(s); return b }
