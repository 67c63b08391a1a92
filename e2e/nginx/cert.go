package nginx

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Cert is a self-signed certificate for 127.0.0.1, ::1 and localhost, written
// as PEM files for nginx's ssl_certificate and ssl_certificate_key.
type Cert struct {
	CertFile, KeyFile string
	// SPKIHash is the base64 SHA-256 of the certificate's
	// SubjectPublicKeyInfo: the value Chromium's
	// --ignore-certificate-errors-spki-list takes to trust this certificate
	// (and no other) despite its unknown issuer.
	SPKIHash string
	// Pool holds the certificate, for Go clients (tls.Config.RootCAs).
	Pool *x509.CertPool
}

// TLSConfig returns a client configuration that trusts only c and offers
// HTTP/2 and HTTP/1.1 by ALPN.
func (c *Cert) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: c.Pool, NextProtos: []string{"h2", "http/1.1"}}
}

// SelfSigned creates a new ECDSA P-256 key and a self-signed certificate,
// valid for a day, and writes them to dir as cert.pem and key.pem (the key
// readable only by its owner).
func SelfSigned(dir string) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "itlmon e2e"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own issuer: Go's verifier takes it as a root in Pool
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	c := &Cert{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), Pool: x509.NewCertPool()}
	if err := os.WriteFile(c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	c.SPKIHash = base64.StdEncoding.EncodeToString(spki[:])
	c.Pool.AddCert(leaf)
	return c, nil
}
