package codec

// Descriptor is everything the package knows about one content type, in
// one row: its catalogue entry (CTYPE section 7), its codec, and whether
// its content is JSON (section 7.2). Adding a type is its own file (the codec and its
// TypeID), its member of Content in content.proto, a row here and a row of
// internal/contentapi's members, which maps it to and from the API.
type Descriptor struct {
	Entry
	// Catalogued: a row of the catalogue table. The legacy reaction 1.0
	// decodes but is outside it (CTYPE-022).
	Catalogued bool
	Codec      Codec
	// JSON: the content is JSON, which decoding expands more than bytes.
	JSON bool
}

// descriptors is the one table of content types.
var descriptors = []Descriptor{
	{Entry: Entry{Type: TypeText, Push: true, Deletable: true}, Catalogued: true, Codec: TextCodec{}},
	{Entry: Entry{Type: TypeMarkdown, Push: true, Deletable: true}, Catalogued: true, Codec: MarkdownCodec{}},
	{Entry: Entry{Type: TypeReaction}, Catalogued: true, Codec: ReactionCodec{}},
	{Entry: Entry{Type: TypeLegacyReaction}, Codec: LegacyReactionCodec{}, JSON: true},
	{Entry: Entry{Type: TypeReply, Push: true, Deletable: true}, Catalogued: true, Codec: ReplyCodec{}},
	{Entry: Entry{Type: TypeReadReceipt}, Catalogued: true, Codec: ReadReceiptCodec{}},
	{Entry: Entry{Type: TypeAttachment, Push: true, Deletable: true}, Catalogued: true, Codec: AttachmentCodec{}},
	{Entry: Entry{Type: TypeRemoteAttachment, Push: true, Deletable: true}, Catalogued: true, Codec: RemoteAttachmentCodec{}},
	{Entry: Entry{Type: TypeMultiRemoteAttachment, Push: true, Deletable: true}, Catalogued: true, Codec: MultiRemoteAttachmentCodec{}},
	{Entry: Entry{Type: TypeTransactionReference, Push: true, Deletable: true}, Catalogued: true, Codec: TransactionReferenceCodec{}, JSON: true},
	{Entry: Entry{Type: TypeWalletSendCalls, Push: true, Deletable: true}, Catalogued: true, Codec: WalletSendCallsCodec{}, JSON: true},
	{Entry: Entry{Type: TypeActions, Push: true}, Catalogued: true, Codec: ActionsCodec{}, JSON: true},
	{Entry: Entry{Type: TypeIntent, Push: true}, Catalogued: true, Codec: IntentCodec{}, JSON: true},
	{Entry: Entry{Type: TypeGroupUpdated, Transcript: true}, Catalogued: true, Codec: GroupUpdatedCodec{}},
	{Entry: Entry{Type: TypeGroupMembershipChange, Transcript: true}, Catalogued: true, Codec: GroupMembershipChangeCodec{}},
	{Entry: Entry{Type: TypeLeaveRequest}, Catalogued: true, Codec: LeaveRequestCodec{}},
	{Entry: Entry{Type: TypeDeleteMessage}, Catalogued: true, Codec: DeleteMessageCodec{}},
	{Entry: Entry{Type: TypeEditMessage, Reserved: true}, Catalogued: true, Codec: EditMessageCodec{}},
}

// descriptorByKey finds a type's row for the per-message lookups of decode.
var descriptorByKey = func() map[Key]*Descriptor {
	m := make(map[Key]*Descriptor, len(descriptors))
	for i := range descriptors {
		m[descriptors[i].Type.Key()] = &descriptors[i]
	}
	return m
}()
