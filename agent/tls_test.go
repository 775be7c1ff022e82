package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

// testCA writes a CA and a certificate it signed for 127.0.0.1 into dir:
// ca.pem, server.pem, server-key.pem.
func testCA(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rubyperf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestAgentTLSAndHeaders: to a collector that takes TLS only, the agent
// sends over TLS, trusting the CA it is given, with the headers it is given
// (an API key); a CA it is not given is refused, and the log says why.
func TestAgentTLSAndHeaders(t *testing.T) {
	r := testruby.Get(t, testRuby)
	ca, cert, key := testCA(t, t.TempDir())
	testruby.Start(t, r, script("shares.rb"))
	for _, protocol := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			col := otelcoltest.StartWith(t, otelcoltest.Options{TLSCertFile: cert, TLSKeyFile: key})
			addr := col.GRPCAddr
			if protocol == ProtocolHTTP {
				addr = col.HTTPAddr
			}
			stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: addr, Protocol: protocol, CAFile: ca,
				Headers: map[string]string{"X-Api-Key": "s3cret"}}, Interval: time.Second})
			time.Sleep(2500 * time.Millisecond)
			st := stop()
			got := received(t, col)
			if len(got) == 0 || uint64(len(got)) != st.Requests {
				t.Fatalf("%d requests received over TLS; agent %+v\n%s", len(got), *st, log)
			}
			md, err := col.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range md {
				if v := m["x-api-key"]; len(v) != 1 || v[0] != "s3cret" {
					t.Errorf("request %d: x-api-key %q, want the header given", i, v)
				}
			}
		})
	}
	t.Run("unknown CA", func(t *testing.T) {
		col := otelcoltest.StartWith(t, otelcoltest.Options{TLSCertFile: cert, TLSKeyFile: key})
		stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: col.GRPCAddr}, Interval: time.Second, FlushTimeout: time.Second})
		time.Sleep(2500 * time.Millisecond)
		st := stop()
		if got := received(t, col); len(got) != 0 || st.Sent != 0 || st.Unsent == 0 {
			t.Errorf("%d requests received from an agent that does not trust the collector's CA; agent %+v", len(got), *st)
		}
		if !strings.Contains(log.String(), "certificate") {
			t.Errorf("the log does not say the certificate was refused:\n%s", log)
		}
	})
}
