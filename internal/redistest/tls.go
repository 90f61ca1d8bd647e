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
	dir := t.TempDir()
	caCert, caKey := newCert(t, nil, nil, true)
	srvCert, srvKey := newCert(t, caCert, caKey, false)
	write := func(name string, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", write("server.crt", "CERTIFICATE", srvCert.Raw),
		"--tls-key-file", write("server.key", "EC PRIVATE KEY", keyDER),
		"--tls-ca-cert-file", write("ca.crt", "CERTIFICATE", caCert.Raw),
		"--tls-auth-clients", "no",
	}, extra...)
	s := Start(t, args...)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// newCert makes a CA certificate (ca set) or one for 127.0.0.1 signed by
// parent, each with a key of its own.
func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "dlock test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
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
