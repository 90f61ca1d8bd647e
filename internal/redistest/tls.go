package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// StartTLS starts a server that also takes TLS connections, on a port of
// their own, with a certificate for 127.0.0.1 from a CA made for the test.
// It returns the server, the TLS address, and a client configuration that
// trusts that CA.
func StartTLS(t testing.TB, extra ...string) (*Server, string, *tls.Config) {
	t.Helper()
	ts := StartTLSFiles(t, false, extra...)
	return ts.Server, ts.Addr, ts.Config
}

// TLSServer is a server started by StartTLSFiles: its TLS address, a client
// configuration that trusts its CA (with the client certificate, if the
// server asks for one), and the PEM files of the CA's certificate and of a
// client certificate the CA signed, with its key.
type TLSServer struct {
	*Server
	Addr                      string
	Config                    *tls.Config
	CAFile, CertFile, KeyFile string
}

// StartTLSFiles is StartTLS, with the certificates also in files; if
// clientAuth is set, the server takes only clients with a certificate its
// CA signed (tls-auth-clients yes).
func StartTLSFiles(t testing.TB, clientAuth bool, extra ...string) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	caCert, caKey := newCert(t, nil, nil, certCA)
	srvCert, srvKey := newCert(t, caCert, caKey, certServer)
	cliCert, cliKey := newCert(t, caCert, caKey, certClient)
	write := func(name string, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := func(name string, key *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "EC PRIVATE KEY", der)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	auth := "no"
	if clientAuth {
		auth = "yes"
	}
	ts := &TLSServer{
		CAFile:   write("ca.crt", "CERTIFICATE", caCert.Raw),
		CertFile: write("client.crt", "CERTIFICATE", cliCert.Raw),
		KeyFile:  keyFile("client.key", cliKey),
		Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
	}
	args := append([]string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", write("server.crt", "CERTIFICATE", srvCert.Raw),
		"--tls-key-file", keyFile("server.key", srvKey),
		"--tls-ca-cert-file", ts.CAFile,
		"--tls-auth-clients", auth,
	}, extra...)
	ts.Server = Start(t, args...)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	ts.Config = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientAuth {
		ts.Config.Certificates = []tls.Certificate{{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey, Leaf: cliCert}}
	}
	return ts
}

// The certificates newCert makes.
const (
	certCA     = iota // a CA's
	certServer        // a server's, for 127.0.0.1
	certClient        // a client's
)

// newCert makes a certificate of kind (certCA, certServer, certClient),
// signed by parent unless it is a CA's, with a key of its own.
func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, kind int) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: [...]string{certCA: "dlock test CA", certServer: "127.0.0.1", certClient: "dlock test client"}[kind]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	switch kind {
	case certCA:
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	case certServer:
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	default:
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
