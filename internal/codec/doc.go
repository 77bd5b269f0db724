// Package codec implements the XMTP content types specification (CTYPE):
// the content type identifier, the EncodedContent envelope, compression,
// the catalogue of standard codecs, and a Registry that selects a codec for
// received content and keeps what it cannot decode.
//
// The package is pure: bytes and values in, values and typed errors out. It
// holds no global state; build a Registry with NewRegistry and register
// application codecs on it (CTYPE-017).
//
// Each content type is one row of the descriptors table (descriptors.go):
// its catalogue entry, its codec, and whether its content is JSON. A type's
// identifier and codec live in its own file. A codec's value is a string
// for text and markdown, *Reply for replies, the wire message of the
// content format where it has one (reactions, group updates...), and
// otherwise a value of this package (values.go) for the JSON types and the
// attachments. The mapping of values to and from
// the API's Content and DecodeResponse lives in internal/contentapi, so
// that the package knows nothing of the service's responses. Adding a type
// touches its file, its member of Content in content.proto, a row of that
// table and a row of contentapi's members.
package codec
