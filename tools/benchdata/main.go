// Command benchdata writes the serialized requests that bench/load.sh sends
// with ghz: Decode of a 200-byte text, DecodeBatch of 1,000 such texts, and
// Decode of a 1 MiB attachment.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
)

func main() {
	out := flag.String("o", "bin/benchdata", "directory to write the request files to")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "benchdata:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	reg := codec.NewRegistry()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200]
	textEC, err := reg.Encode(codec.TypeText, text)
	if err != nil {
		return err
	}
	textBytes, _ := proto.Marshal(textEC)
	att := &codec.Attachment{MimeType: "application/octet-stream", Filename: proto.String("blob.bin"), Data: bytes.Repeat([]byte{7}, 1<<20)}
	attEC, err := reg.Encode(codec.TypeAttachment, att)
	if err != nil {
		return err
	}
	attBytes, _ := proto.Marshal(attEC)
	batch := &cb.DecodeBatchRequest{}
	for i := 0; i < 1000; i++ {
		batch.EncodedContents = append(batch.EncodedContents, textBytes)
	}
	files := map[string]proto.Message{
		"decode_text.bin":       &cb.DecodeRequest{EncodedContent: textBytes},
		"decode_batch.bin":      batch,
		"decode_attachment.bin": &cb.DecodeRequest{EncodedContent: attBytes},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, m := range files {
		b, err := proto.Marshal(m)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
