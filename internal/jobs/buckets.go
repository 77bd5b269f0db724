package jobs

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode"

	"gocloud.dev/blob"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// keyName is what a bucket or schedule name may be.
var keyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ErrUnknownBucket: no bucket of that name is configured.
var ErrUnknownBucket = fault.New(fault.Invalid, "no such bucket")

// SidecarSuffix ends the name of an export's sidecar: <key>.summary.json.
const SidecarSuffix = ".summary.json"

// maxObjectKey bounds an object key (S3's own limit is 1024 bytes).
const maxObjectKey = 1024

// Buckets are the object stores jobs may read and write, by the names the
// operator gave them. A caller names a bucket, never a URL: the URL (its
// endpoint, region, credentials) is the server's configuration, so a
// request cannot point the server at storage of its choosing.
type Buckets struct {
	urls map[string]string
	mu   sync.Mutex
	open map[string]*blob.Bucket
}

// ParseBuckets reads name=URL pairs.
func ParseBuckets(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		name, url, ok := strings.Cut(p, "=")
		if !ok || name == "" || url == "" {
			return nil, fmt.Errorf("bucket %.64q: want name=URL", p)
		}
		if !keyName.MatchString(name) {
			return nil, fmt.Errorf("bucket name %.64q: 1-64 letters, digits, '.', '_' or '-'", name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("bucket %q named twice", name)
		}
		out[name] = url
	}
	return out, nil
}

// NewBuckets serves the buckets urls names; each is opened when first used.
func NewBuckets(urls map[string]string) *Buckets {
	return &Buckets{urls: urls, open: map[string]*blob.Bucket{}}
}

// Default is the bucket a request that names none uses: "local" when
// configured, else the first name in order.
func (b *Buckets) Default() string {
	if _, ok := b.urls["local"]; ok {
		return "local"
	}
	if names := b.Names(); len(names) > 0 {
		return names[0]
	}
	return ""
}

// Names lists the configured buckets.
func (b *Buckets) Names() []string {
	names := make([]string, 0, len(b.urls))
	for n := range b.urls {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open returns the bucket named name.
func (b *Buckets) Open(ctx context.Context, name string) (*blob.Bucket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bk, ok := b.open[name]; ok {
		return bk, nil
	}
	url, ok := b.urls[name]
	if !ok {
		// The configured names are not listed: a caller learns only that
		// this one is not among them.
		return nil, fmt.Errorf("bucket %.64q: %w", name, ErrUnknownBucket)
	}
	bk, err := blob.OpenBucket(ctx, url)
	if err != nil {
		// Only the name: the URL may carry credentials.
		return nil, fmt.Errorf("open bucket %q: %w", name, err)
	}
	b.open[name] = bk
	return bk, nil
}

// Close closes every bucket opened.
func (b *Buckets) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, bk := range b.open {
		errs = append(errs, bk.Close())
	}
	b.open = map[string]*blob.Bucket{}
	return errors.Join(errs...)
}

// CheckObjectKey checks an object key a caller names: slash-separated
// segments, none empty, "." or "..", printable, at most 1024 bytes, and not
// a sidecar's name.
func CheckObjectKey(key string) error {
	if key == "" || len(key) > maxObjectKey {
		return fmt.Errorf("key: %d bytes; an object key is 1-%d bytes", len(key), maxObjectKey)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("key %.64q: empty, '.' and '..' segments are not allowed", key)
		}
	}
	for _, r := range key {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("key %.64q: only printable characters without spaces", key)
		}
	}
	if strings.HasSuffix(key, SidecarSuffix) {
		return fmt.Errorf("key %.64q: names ending %s are the sidecars exports write", key, SidecarSuffix)
	}
	return nil
}
