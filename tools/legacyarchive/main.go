// Command legacyarchive rewrites an archive in the legacy form that
// libxmtp wrote up to 1.6.1, every record sealed under the one base nonce,
// so that archivectl rewrap and the import retry of ARCH-002 can be tried
// on a file of one's own. The legacy form reuses nonces under one key and
// so loses confidentiality: never use it for a real backup.
//
//	go run ./tools/legacyarchive --key-file backup.key -o legacy.xmtp alice.xmtp
package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/archive/archivetest"
)

func main() {
	keyFile := flag.String("key-file", "", "file holding the archive's 32-byte key, raw or as 64 hex characters; the legacy copy uses the same key")
	out := flag.String("o", "", "legacy archive to write")
	flag.Parse()
	if *keyFile == "" || *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: legacyarchive --key-file KEY -o LEGACY ARCHIVE")
		os.Exit(2)
	}
	if err := run(*keyFile, *out, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "legacyarchive:", err)
		os.Exit(1)
	}
}

func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) == archive.KeySize {
		return b, nil
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != archive.KeySize {
		return nil, fmt.Errorf("%s: not a 32-byte key, raw or hex", path)
	}
	return k, nil
}

func run(keyFile, outPath, inPath string) error {
	key, err := readKey(keyFile)
	if err != nil {
		return err
	}
	in, err := os.Open(inPath)
	if err != nil {
		return err
	}
	defer in.Close()
	r, err := archive.NewReader(in, key, archive.ReaderOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	meta, err := r.Metadata()
	if err != nil {
		return err
	}
	// The production Writer writes only counter archives; the legacy form
	// comes from the tests' own archive builder, which seals a whole
	// archive at once: this tool is for trying rewrap on small archives.
	els := []*ds.BackupElement{{Element: &ds.BackupElement_Metadata{Metadata: meta}}}
	for {
		el, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		els = append(els, el)
	}
	var base [12]byte
	if _, err := rand.Read(base[:]); err != nil {
		return err
	}
	data, err := archivetest.Legacy(key, base, els...)
	if err != nil {
		return err
	}
	if err := os.WriteFile(outPath, data, 0o600); err != nil {
		os.Remove(outPath)
		return err
	}
	fmt.Printf("wrote %s: %d records under one nonce (legacy form)\n", outPath, len(els))
	return nil
}
