package codec

import (
	"errors"
	"fmt"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// DefaultMaxNestingDepth bounds how deep content may nest inside content
// (replies of replies): deeper nesting is a decode failure, so hostile input
// cannot make decoding recurse without end.
const DefaultMaxNestingDepth = 16

// Registry selects codecs for content. Its zero value is not usable; build
// one with NewRegistry. After construction and registration it is safe for
// concurrent use; Register must not race with decoding.
type Registry struct {
	codecs          map[Key]registered
	maxDepth        int
	maxDecompressed int64
}

// Option configures a Registry.
type Option func(*Registry)

// WithMaxNestingDepth sets how many levels of nested content are decoded.
func WithMaxNestingDepth(n int) Option {
	return func(r *Registry) {
		if n > 0 {
			r.maxDepth = n
		}
	}
}

// WithMaxDecompressedSize lowers the CTYPE-025 limit (it cannot be raised past it).
func WithMaxDecompressedSize(n int64) Option {
	return func(r *Registry) {
		if n > 0 && n < MaxDecompressedSize {
			r.maxDecompressed = n
		}
	}
}

// MaxNestingDepth is how many levels of nested content the registry
// decodes and encodes.
func (r *Registry) MaxNestingDepth() int { return r.maxDepth }

// Push returns the push value for t (CTYPE-010): the catalogue's, or an
// application codec's; ok is false for a type with neither.
func (r *Registry) Push(t TypeID) (push, ok bool) {
	if e, found := catalogueByKey[t.Key()]; found {
		return e.Push, true
	}
	if c, found := r.codecs[t.Key()]; found {
		return c.codec.ShouldPush(), true
	}
	return false, false
}

// Description is what a decode outcome reports of its type.
type Description struct {
	// Name is t.String().
	Name string
	// Push is the catalogue's push value, or an application codec's;
	// PushKnown is false for a type with neither (CTYPE-010).
	Push, PushKnown bool
	// Deletable is Deletable(t) (CTYPE-018).
	Deletable bool
}

// Describe returns t's name, push and deletable values with one catalogue
// lookup: String, Push and Deletable each look the type up, once a
// message of every page listed.
func (r *Registry) Describe(t TypeID) Description {
	if e, ok := catalogueByKey[t.Key()]; ok {
		d := Description{Name: e.name, Push: e.Push, PushKnown: true, Deletable: e.Deletable}
		if t.Minor != 0 || e.Type != t {
			d.Name = t.format()
		}
		return d
	}
	d := Description{Name: t.String()}
	d.Push, d.PushKnown = r.Push(t)
	return d
}

// NewRegistry returns a registry holding every catalogue codec and the
// legacy reaction 1.0 decoder.
func NewRegistry(opts ...Option) *Registry {
	r := &Registry{
		codecs:          make(map[Key]registered),
		maxDepth:        DefaultMaxNestingDepth,
		maxDecompressed: MaxDecompressedSize,
	}
	for _, o := range opts {
		o(r)
	}
	for _, c := range StandardCodecs() {
		r.codecs[c.ContentType().Key()] = registered{codec: c, json: isJSONType(c.ContentType()), standard: true}
	}
	return r
}

// registered is a codec, whether its content is JSON (what its decode is
// charged) and whether it is a standard codec, found with one lookup a
// message.
type registered struct {
	codec    Codec
	json     bool
	standard bool
}

// StandardCodecs returns one of each catalogue codec, plus the legacy
// reaction decoder.
func StandardCodecs() []Codec {
	out := make([]Codec, 0, len(descriptors))
	for _, d := range descriptors {
		out = append(out, d.Codec)
	}
	return out
}

// Register adds an application codec for a custom type (CTYPE-017). It
// refuses a codec whose identifier is incomplete or already registered.
func (r *Registry) Register(c Codec) error {
	t := c.ContentType()
	if t.Authority == "" || t.Type == "" {
		return fmt.Errorf("register codec %s: authority and type must be non-empty", t)
	}
	if _, ok := r.codecs[t.Key()]; ok {
		return fmt.Errorf("register codec %s: a codec for %s/%s major %d is already registered", t, t.Authority, t.Type, t.Major)
	}
	r.codecs[t.Key()] = registered{codec: c, json: isJSONType(t)}
	return nil
}

// Lookup returns the codec matching t on authority, type and major version.
func (r *Registry) Lookup(t TypeID) (Codec, bool) {
	c, ok := r.codecs[t.Key()]
	return c.codec, ok
}

// Encode encodes value with the codec registered for t. The envelope is
// uncompressed; see Compress.
func (r *Registry) Encode(t TypeID, value any) (*mc.EncodedContent, error) {
	c, ok := r.Lookup(t)
	if !ok {
		return nil, &Error{Kind: KindNoMatchingCodec, Type: t, Reason: "no codec registered"}
	}
	ec, err := c.Encode(value)
	if err != nil {
		return nil, withType(err, c.ContentType())
	}
	return ec, nil
}

// Decode parses serialized EncodedContent bytes and decodes them. The error
// is an *Error whose Kind is KindMalformedEnvelope, KindNoMatchingCodec or
// KindDecodeFailed; whatever it is, the caller still holds the bytes it
// passed in, which CTYPE-008 requires it to keep. Byte slices in the result
// may alias b: do not modify b while the result is in use.
func (r *Registry) Decode(b []byte, o DecodeOptions) (Decoded, *mc.EncodedContent, error) {
	if o.Scratch == nil {
		return r.decodeIn(new(decodeState), b, o.Meter)
	}
	return r.decodeIn(o.Scratch.take(), b, o.Meter)
}

// DecodeOptions are a decode's budget and memory; the zero value charges
// nothing and reuses nothing.
type DecodeOptions struct {
	// Meter, when set, is charged for what decoding allocates, failed
	// decodes included. The decompressed content of every nesting level
	// together is held to the one CTYPE-025 limit, so nested compressed
	// replies cannot multiply it.
	Meter Meter
	// Scratch, when set, lends the decode the memory of the last one that
	// Recycle released (a page of messages decoded in turn).
	Scratch *Scratch
}

// A Meter is charged with the bytes decoding is about to allocate
// (decompressed output as it comes, decoded values), before they are
// allocated. A charge it refuses stops decoding: Decode then
// returns a *BudgetError carrying the meter's error.
type Meter interface {
	Charge(n int64) error
}

// BudgetError is a decode stopped because its Meter refused a charge: the
// request's or the server's budget is spent, not the content's fault.
type BudgetError struct{ Err error }

func (e *BudgetError) Error() string { return "decode stopped: " + e.Err.Error() }
func (e *BudgetError) Unwrap() error { return e.Err }

// jsonExpansion is what a JSON type's decode is charged per content byte:
// the parsed members and the strings built from them.
const jsonExpansion = 3

// decodeState is one top-level decode's memory in one allocation: the
// envelope, its type and the decode's state. This runs once a message of
// every page listed.
type decodeState struct {
	parsed parsedEnvelope
	d      decoding
	// reusable: the decode succeeded by a standard codec, whose values
	// never refer to the envelope (see Scratch).
	reusable bool
}

func (r *Registry) decodeIn(all *decodeState, b []byte, m Meter) (Decoded, *mc.EncodedContent, error) {
	ec, err := all.parsed.parse(b)
	if err != nil {
		return Decoded{}, nil, err
	}
	d := &all.d
	d.r, d.meter = r, m
	out, err := d.decode(ec)
	if d.exhausted != nil {
		return Decoded{}, ec, d.exhausted
	}
	all.reusable = err == nil && d.standard
	return out, ec, err
}

// Scratch is the memory of one decode that a caller decoding many
// envelopes in turn lets the next decode reuse: the envelope, its type,
// its parameters map and the decode's state, a third of a listed
// message's allocations. Like bufio.Scanner's buffer, what
// a decode in it returns lives in it until Recycle.
type Scratch struct {
	last *decodeState
	free *decodeState
}

// take is the memory for the next decode: the last one's, when Recycle
// released it.
func (s *Scratch) take() *decodeState {
	all := s.free
	s.free = nil
	if all == nil {
		all = new(decodeState)
	} else {
		params := all.parsed.ec.Parameters
		if params == nil {
			params = all.parsed.spareParams
		}
		clear(params)
		*all = decodeState{}
		all.parsed.spareParams = params
	}
	s.last = all
	return all
}

// Recycle says that the caller keeps nothing of the last decode's
// envelope (the envelope returned, Decoded.Envelope, its parameters) and
// lets the next decode reuse its memory, when that decode succeeded by a
// standard codec: their values copy what they take from the envelope. An
// envelope the caller keeps (an Undecoded outcome's) is never recycled,
// nor one an application codec saw.
func (s *Scratch) Recycle() {
	if s.last != nil && s.last.reusable {
		s.free = s.last
	}
	s.last = nil
}

// ParseEnvelope parses EncodedContent bytes and checks that the type is
// present with a non-empty authority and type id (CTYPE-003).
func ParseEnvelope(b []byte) (*mc.EncodedContent, error) {
	return new(parsedEnvelope).parse(b)
}

// parsedEnvelope is an envelope and its type in one allocation, and a
// recycled parameters map (empty) for it to fill.
type parsedEnvelope struct {
	ec          mc.EncodedContent
	t           mc.ContentTypeId
	spareParams map[string]string
}

func (e *parsedEnvelope) parse(b []byte) (*mc.EncodedContent, error) {
	if err := unmarshalEnvelope(b, &e.ec, &e.t, e.spareParams); err != nil {
		return nil, &Error{Kind: KindMalformedEnvelope, Reason: "not an EncodedContent: " + err.Error()}
	}
	if err := CheckTyped(&e.ec); err != nil {
		return &e.ec, err
	}
	return &e.ec, nil
}

// CheckTyped fails with a KindMalformedEnvelope error unless ec carries a
// complete type: an authority and a type id.
func CheckTyped(ec *mc.EncodedContent) error {
	switch {
	case ec.GetType() == nil:
		return &Error{Kind: KindMalformedEnvelope, Field: "type", Reason: "absent"}
	case ec.GetType().GetAuthorityId() == "":
		return &Error{Kind: KindMalformedEnvelope, Type: TypeIDOf(ec.GetType()), Field: "type.authority_id", Reason: "empty"}
	case ec.GetType().GetTypeId() == "":
		return &Error{Kind: KindMalformedEnvelope, Type: TypeIDOf(ec.GetType()), Field: "type.type_id", Reason: "empty"}
	}
	return nil
}

// decoding is the state of one top-level decode, shared by its nesting
// levels: the depth reached, the decompressed bytes produced so far, and
// the meter.
type decoding struct {
	r        *Registry
	meter    Meter
	depth    int
	expanded int64 // decompressed bytes at every level together (CTYPE-025)
	// exhausted is the meter's refusal; once set, decoding only unwinds.
	exhausted error
	// standard: the top level's codec is a standard one (see Scratch).
	standard bool
}

func (d *decoding) charge(n int64) error {
	if d.exhausted != nil {
		return d.exhausted
	}
	if d.meter == nil {
		return nil
	}
	if err := d.meter.Charge(n); err != nil {
		d.exhausted = &BudgetError{Err: err}
		return d.exhausted
	}
	return nil
}

// decode decodes a typed envelope (parse checked the top level's type,
// DecodeNested a nested one's).
func (d *decoding) decode(ec *mc.EncodedContent) (Decoded, error) {
	t := TypeIDOf(ec.GetType())
	plain, err := d.decompressed(ec)
	if err != nil {
		return Decoded{}, withType(err, t)
	}
	c, ok := d.r.codecs[t.Key()]
	if !ok {
		return Decoded{Type: t, Envelope: plain}, &Error{Kind: KindNoMatchingCodec, Type: t, Reason: "no codec for this authority, type and major version"}
	}
	if d.depth == 0 {
		d.standard = c.standard
	}
	cost := int64(len(plain.GetContent()))
	if c.json {
		cost *= jsonExpansion
	}
	if err := d.charge(cost); err != nil {
		return Decoded{Type: t, Envelope: plain}, err
	}
	v, err := c.codec.Decode(plain, d)
	if d.exhausted != nil {
		return Decoded{Type: t, Envelope: plain}, d.exhausted
	}
	if err != nil {
		var ce *Error
		if !errors.As(err, &ce) {
			err = &Error{Kind: KindDecodeFailed, Reason: err.Error()}
		}
		return Decoded{Type: t, Envelope: plain}, withType(err, t)
	}
	return Decoded{Type: t, Value: v, Envelope: plain}, nil
}

// decompressed returns ec with its content decompressed and compression
// cleared, or ec itself when it is not compressed. What it may produce is
// what the CTYPE-025 limit leaves after the levels above it.
func (d *decoding) decompressed(ec *mc.EncodedContent) (*mc.EncodedContent, error) {
	if ec.Compression == nil {
		return ec, nil
	}
	remaining := d.r.maxDecompressed - d.expanded
	var produced int64
	out, err := decompress(ec.GetContent(), ec.GetCompression(), remaining, func(n int64) error {
		produced += n
		return d.charge(n)
	})
	if err != nil {
		if d.exhausted != nil {
			return nil, d.exhausted
		}
		if d.depth > 0 && d.expanded > 0 && produced >= remaining {
			return nil, decodeError("compression", "decompressed content of every nesting level together exceeds %d bytes (CTYPE-025)", d.r.maxDecompressed)
		}
		return nil, err
	}
	d.expanded += int64(len(out))
	plain := &mc.EncodedContent{Type: ec.GetType(), Parameters: ec.GetParameters(), Fallback: ec.Fallback, Content: out}
	return plain, nil
}

// DecodeNested decodes content carried in content, one level deeper.
func (d *decoding) DecodeNested(ec *mc.EncodedContent) (Decoded, error) {
	if d.depth+1 > d.r.maxDepth {
		return Decoded{}, decodeError("content", "content nested deeper than %d levels", d.r.maxDepth)
	}
	if err := CheckTyped(ec); err != nil {
		return Decoded{}, err
	}
	d.depth++
	defer func() { d.depth-- }()
	return d.decode(ec)
}

// isJSONType reports the section 7.2 types whose content is JSON.
func isJSONType(t TypeID) bool {
	d, ok := descriptorByKey[t.Key()]
	return ok && d.JSON
}

// CheckPublishable accepts a caller-built envelope for publishing when it
// names its type (CTYPE-003), is not a type that is never published
// (transcripts and the reserved edit, CTYPE-026; the legacy reaction,
// CTYPE-022) and, for an identifier a codec knows, when that codec decodes
// it: a catalogue envelope a recipient would reject is not publishable.
// m, when not nil, is charged for the decode it runs; a refused charge is
// a *BudgetError.
func (r *Registry) CheckPublishable(ec *mc.EncodedContent, m Meter) error {
	if err := CheckTyped(ec); err != nil {
		var ce *Error
		errors.As(err, &ce)
		return encodeError(ce.Field, "%s: an envelope needs a type with non-empty authority_id and type_id (CTYPE-003)", ce.Reason)
	}
	t := TypeIDOf(ec.GetType())
	if e, ok := Catalogue(t); ok && (e.Transcript || e.Reserved) {
		return encodeError("type", "%s is never published as an application message (CTYPE-026)", t)
	}
	if t.Key() == TypeLegacyReaction.Key() {
		return encodeError("type", "%s is deprecated; publish xmtp.org/reaction:2.0 (CTYPE-022)", t)
	}
	if _, known := r.Lookup(t); known {
		d := &decoding{r: r, meter: m}
		if _, err := d.decode(ec); err != nil {
			if d.exhausted != nil {
				return d.exhausted
			}
			return encodeError("", "not valid %s content: %v", t, err)
		}
	}
	return nil
}
