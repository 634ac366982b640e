package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The admin identity: anything in system:masters passes every authorization
// check, RBAC included.
const (
	adminUser  = "wasmgpu-admin"
	adminGroup = "system:masters"
)

// pki is the key material of one run, all generated fresh in the data dir.
type pki struct {
	caCertPEM       []byte
	adminCertPEM    []byte
	adminKeyPEM     []byte
	caCertFile      string // CA for serving and client certificates
	servingCertFile string // 127.0.0.1, localhost
	servingKeyFile  string
	saKeyFile       string // signs service account tokens
	saPubFile       string // verifies them
}

func newPKI(dir string) (*pki, error) {
	p := &pki{
		caCertFile:      filepath.Join(dir, "ca.crt"),
		servingCertFile: filepath.Join(dir, "apiserver.crt"),
		servingKeyFile:  filepath.Join(dir, "apiserver.key"),
		saKeyFile:       filepath.Join(dir, "sa.key"),
		saPubFile:       filepath.Join(dir, "sa.pub"),
	}
	now := time.Now()
	notBefore, notAfter := now.Add(-time.Hour), now.Add(365*24*time.Hour)

	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "wasmgpu-control-plane-ca"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caCertPEM = pemBlock("CERTIFICATE", caDER)

	issue := func(template *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := newKey()
		if err != nil {
			return nil, nil, err
		}
		template.SerialNumber = serial()
		template.NotBefore, template.NotAfter = notBefore, notAfter
		template.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, template, caCert, key.Public(), caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate %q: %w", template.Subject.CommonName, err)
		}
		keyPEM, err = pkcs8PEM(key)
		return pemBlock("CERTIFICATE", der), keyPEM, err
	}

	servingCert, servingKey, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
	if err != nil {
		return nil, err
	}
	p.adminCertPEM, p.adminKeyPEM, err = issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{adminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := pkcs8PEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}

	for path, data := range map[string][]byte{
		p.caCertFile:      p.caCertPEM,
		p.servingCertFile: servingCert,
		p.servingKeyFile:  servingKey,
		p.saKeyFile:       saKeyPEM,
		p.saPubFile:       pemBlock("PUBLIC KEY", saPubDER),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func pkcs8PEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}
