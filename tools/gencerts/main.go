// Command gencerts writes a development CA, a server certificate and a
// client certificate under a directory, for the docker-compose setup and
// for trying TLS and mutual TLS locally:
//
//	go run ./tools/gencerts -out deploy/compose/tls -host localhost -host server
//
// Production certificates come from the operator's own CA.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/contentbackup/contentbackup/internal/devpki"
)

type hosts []string

func (h *hosts) String() string     { return strings.Join(*h, ",") }
func (h *hosts) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	out := flag.String("out", "tls", "directory to write ca.crt, server.crt/key and client.crt/key into")
	client := flag.String("client", "archivectl", "common name of the client certificate")
	var names hosts
	flag.Var(&names, "host", "DNS name or IP address of the server (repeatable; default localhost and 127.0.0.1)")
	flag.Parse()
	if len(names) == 0 {
		names = hosts{"localhost", "127.0.0.1"}
	}
	if err := run(*out, *client, names); err != nil {
		fmt.Fprintln(os.Stderr, "gencerts:", err)
		os.Exit(1)
	}
}

func run(out, client string, names []string) error {
	ca, err := devpki.NewCA("contentbackup development CA")
	if err != nil {
		return err
	}
	leaf := devpki.Leaf{CommonName: names[0]}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			leaf.IPs = append(leaf.IPs, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, n)
		}
	}
	serverCert, serverKey, err := ca.Issue(leaf)
	if err != nil {
		return err
	}
	clientCert, clientKey, err := ca.Issue(devpki.Leaf{CommonName: client, Client: true})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"ca.crt", ca.CertPEM, 0o644},
		{"server.crt", serverCert, 0o644},
		// Readable by the container's user (65532), which is not the
		// user generating them: keep the directory private instead.
		{"server.key", serverKey, 0o644},
		{"client.crt", clientCert, 0o644},
		{"client.key", clientKey, 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(out, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %s/{ca.crt,server.crt,server.key,client.crt,client.key}; client subject CN=%s\n", out, client)
	return nil
}
