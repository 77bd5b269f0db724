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
// its catalogue entry, its codec, whether its content is JSON, and how its
// value maps to the API's Content message, whose member type is the value
// a codec takes and returns (a string for text and markdown, *Reply for
// replies, the API or wire message otherwise). A type's identifier and
// codec live in its own file. Adding a type touches its file, its member of
// Content in content.proto, and that table.
package codec
