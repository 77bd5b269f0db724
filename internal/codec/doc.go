// Package codec implements the XMTP content types specification (CTYPE):
// the content type identifier, the EncodedContent envelope, compression,
// the catalogue of standard codecs, and a Registry that selects a codec for
// received content and keeps what it cannot decode.
//
// The package is pure: bytes and values in, values and typed errors out. It
// holds no global state; build a Registry with NewRegistry and register
// application codecs on it (CTYPE-017).
//
// Catalogue codecs take and return these values:
//
//	text, markdown                 string
//	reaction, legacy reaction      *contenttypes.ReactionV2
//	reply                          *Reply
//	read receipt                   *contentbackupv1.ReadReceipt
//	attachment                     *contentbackupv1.Attachment
//	remote attachment              *contentbackupv1.RemoteAttachment
//	multiple remote attachments    *contenttypes.MultiRemoteAttachment
//	transaction reference          *contentbackupv1.TransactionReference
//	wallet send calls              *contentbackupv1.WalletSendCalls
//	actions                        *contentbackupv1.Actions
//	intent                         *contentbackupv1.Intent
//	group updated                  *messagecontents.GroupUpdated
//	group membership change        *messagecontents.GroupMembershipChanges
//	leave request                  *contenttypes.LeaveRequest
//	delete message                 *contenttypes.DeleteMessage
//	edit message                   *contenttypes.EditMessage
package codec
