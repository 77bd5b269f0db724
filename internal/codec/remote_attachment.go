package codec

import (
	"encoding/hex"
	"net"
	"net/url"
	"strconv"
	"strings"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeRemoteAttachment is this type's identifier, spelled as the reference client spells it.
var TypeRemoteAttachment = TypeID{"xmtp.org", "remoteStaticAttachment", 1, 0}

// RemoteAttachmentCodec is xmtp.org/remoteStaticAttachment:1.0: the URL as
// UTF-8 content, with the Remote attachment parameters table of section 7.1.
type RemoteAttachmentCodec struct{}

func (RemoteAttachmentCodec) ContentType() TypeID { return TypeRemoteAttachment }
func (RemoteAttachmentCodec) ShouldPush() bool    { return true }

const (
	paramContentDigest = "contentDigest"
	paramSecret        = "secret"
	paramSalt          = "salt"
	paramNonce         = "nonce"
	paramScheme        = "scheme"
	paramContentLength = "contentLength"

	schemeHTTPS = "https://"
	schemeHTTP  = "http://"

	secretSize = 32
	saltSize   = 32
	nonceSize  = 12
	digestSize = 32
)

func (RemoteAttachmentCodec) Encode(v any) (*mc.EncodedContent, error) {
	ra, ok := v.(*RemoteAttachment)
	if !ok || ra == nil {
		return nil, wrongValue("a *RemoteAttachment", v)
	}
	if err := checkRemoteParams("remote_attachment", remoteFields{
		url: ra.URL, digest: ra.ContentDigest, secret: ra.Secret, salt: ra.Salt,
		nonce: ra.Nonce, scheme: ra.Scheme,
	}, encodeError); err != nil {
		return nil, err
	}
	params := map[string]string{
		paramContentDigest: ra.ContentDigest,
		paramSecret:        hex.EncodeToString(ra.Secret),
		paramSalt:          hex.EncodeToString(ra.Salt),
		paramNonce:         hex.EncodeToString(ra.Nonce),
		paramScheme:        ra.Scheme,
	}
	if ra.ContentLength != nil {
		params[paramContentLength] = strconv.FormatUint(uint64(*ra.ContentLength), 10)
	}
	if ra.Filename != nil {
		params[paramFilename] = *ra.Filename
	}
	fallback := "Can't display " + displayName(ra.Filename) + ". This app doesn't support remote attachments."
	return envelope(TypeRemoteAttachment, []byte(ra.URL), params, &fallback), nil
}

func (RemoteAttachmentCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	p := ec.GetParameters()
	ra := &RemoteAttachment{URL: string(ec.GetContent())}
	for _, name := range []string{paramContentDigest, paramSecret, paramSalt, paramNonce, paramScheme} {
		if _, ok := p[name]; !ok {
			return nil, decodeError("parameters."+name, "required")
		}
	}
	var err error
	if ra.Secret, err = decodeHexParam(p, paramSecret, secretSize); err != nil {
		return nil, err
	}
	if ra.Salt, err = decodeHexParam(p, paramSalt, saltSize); err != nil {
		return nil, err
	}
	if ra.Nonce, err = decodeHexParam(p, paramNonce, nonceSize); err != nil {
		return nil, err
	}
	ra.ContentDigest = p[paramContentDigest]
	ra.Scheme = normalizeScheme(p[paramScheme])
	if s, ok := p[paramContentLength]; ok {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, decodeError("parameters.contentLength", "not a decimal from 0 through 4294967295: %q", Abbrev(s))
		}
		ra.ContentLength = ptr(uint32(n))
	}
	if name, ok := p[paramFilename]; ok {
		ra.Filename = &name
	}
	if err := checkRemoteParams("parameters", remoteFields{
		url: ra.URL, digest: ra.ContentDigest, secret: ra.Secret, salt: ra.Salt, nonce: ra.Nonce, scheme: ra.Scheme,
	}, decodeError); err != nil {
		return nil, err
	}
	return ra, nil
}

func decodeHexParam(p map[string]string, name string, size int) ([]byte, error) {
	b, err := hex.DecodeString(p[name])
	if err != nil {
		return nil, decodeError("parameters."+name, "not hexadecimal")
	}
	if len(b) != size {
		return nil, decodeError("parameters."+name, "%d bytes, want %d", len(b), size)
	}
	return b, nil
}

// normalizeScheme maps the legacy scheme values to the current ones; the
// stored envelope keeps what it had.
func normalizeScheme(s string) string {
	switch s {
	case "https":
		return schemeHTTPS
	case "http":
		return schemeHTTP
	}
	return s
}

type remoteFields struct {
	url, digest, scheme string
	secret, salt, nonce []byte
}

// checkRemoteParams applies the Remote attachment parameters table, shared
// by the single and multiple remote attachment codecs on both encode and
// decode; fail builds the error of the caller's direction.
func checkRemoteParams(path string, f remoteFields, fail func(string, string, ...any) *Error) error {
	names := remoteParamNames(path)
	if err := checkRemoteCrypto(names, f, fail); err != nil {
		return err
	}
	return checkSchemeURL(names, f.scheme, f.url, fail)
}

func checkRemoteCrypto(names paramNames, f remoteFields, fail func(string, string, ...any) *Error) error {
	if !isLowerHex(f.digest, digestSize) {
		return fail(names.digest, "must be %d lowercase hexadecimal characters", 2*digestSize)
	}
	if len(f.secret) != secretSize {
		return fail(names.secret, "%d bytes, want %d", len(f.secret), secretSize)
	}
	if len(f.salt) != saltSize {
		return fail(names.salt, "%d bytes, want %d", len(f.salt), saltSize)
	}
	if len(f.nonce) != nonceSize {
		return fail(names.nonce, "%d bytes, want %d", len(f.nonce), nonceSize)
	}
	return nil
}

type paramNames struct{ digest, secret, salt, nonce, scheme, url string }

func remoteParamNames(path string) paramNames {
	if path == "parameters" {
		return paramNames{"parameters.contentDigest", "parameters.secret", "parameters.salt", "parameters.nonce", "parameters.scheme", "content"}
	}
	return paramNames{path + ".content_digest", path + ".secret", path + ".salt", path + ".nonce", path + ".scheme", path + ".url"}
}

// checkSchemeURL: https:// always; http:// only for a localhost or loopback
// host; and the URL itself must use the scheme the parameter names.
func checkSchemeURL(names paramNames, scheme, rawURL string, fail func(string, string, ...any) *Error) error {
	if scheme != schemeHTTPS && scheme != schemeHTTP {
		return fail(names.scheme, "must be %q, or %q for a loopback host; got %q", schemeHTTPS, schemeHTTP, Abbrev(scheme))
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fail(names.url, "not an absolute URL: %q", Abbrev(rawURL))
	}
	if u.Scheme+"://" != scheme {
		return fail(names.url, "URL scheme %q does not match scheme parameter %q", Abbrev(u.Scheme), Abbrev(scheme))
	}
	if scheme == schemeHTTP && !isLoopbackHost(u.Hostname()) {
		return fail(names.scheme, "%q is allowed only for localhost or a loopback address, not %q", schemeHTTP, Abbrev(u.Hostname()))
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isLowerHex(s string, size int) bool {
	if len(s) != 2*size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// SchemeFor returns the scheme parameter an encoder writes for rawURL:
// https://, or http:// for a localhost or loopback host; any other URL
// cannot be a remote attachment location.
func SchemeFor(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", encodeError("url", "not an absolute URL: %q", Abbrev(rawURL))
	}
	switch scheme := u.Scheme + "://"; {
	case scheme == schemeHTTPS:
		return scheme, nil
	case scheme == schemeHTTP && isLoopbackHost(u.Hostname()):
		return scheme, nil
	}
	return "", encodeError("url", "must use https://, or http:// for localhost or a loopback address: %q", Abbrev(rawURL))
}

// CheckRemoteAttachment applies the decode column of the Remote attachment
// parameters table to a remote attachment given as a value, for example
// before decrypting its payload. The URL is checked when it is set; the
// legacy scheme forms are accepted.
func CheckRemoteAttachment(ra *RemoteAttachment) error {
	f := remoteFields{digest: ra.ContentDigest, secret: ra.Secret, salt: ra.Salt, nonce: ra.Nonce, scheme: normalizeScheme(ra.Scheme), url: ra.URL}
	if f.url == "" {
		// No location to check: only the cryptographic parameters matter.
		return checkRemoteCrypto(remoteParamNames("remote_attachment"), f, decodeError)
	}
	return checkRemoteParams("remote_attachment", f, decodeError)
}
