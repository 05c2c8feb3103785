// verify-note: checks a C2SP signed note with golang.org/x/mod/sumdb/note, the reference
// implementation, independently of fleetd's own code. Usage: verify-note VKEY < note
// A VKEY of algorithm 0x01 is a plain Ed25519 note key (note.NewVerifier). One of algorithm
// 0x04 is a C2SP tlog-cosignature `cosignature/v1` cosigner, verified here from the spec with
// Go's standard library (x/mod parses the note and matches the key ID).
// Prints the note's text on success; exits 1 with the error otherwise.
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

type cosignatureV1 struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func (v cosignatureV1) Name() string    { return v.name }
func (v cosignatureV1) KeyHash() uint32 { return v.hash }

// Verify checks timestamp(8, big-endian) || ed25519 signature over
// "cosignature/v1\ntime T\n" || the note body.
func (v cosignatureV1) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	if t > math.MaxInt64 {
		return false
	}
	m := "cosignature/v1\ntime " + strconv.FormatUint(t, 10) + "\n" + string(msg)
	return ed25519.Verify(v.key, []byte(m), sig[8:])
}

func verifier(vkey string) (note.Verifier, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("malformed verifier key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) == 0 || raw[0] != 0x04 {
		return note.NewVerifier(vkey)
	}
	if len(raw) != 1+ed25519.PublicKeySize {
		return nil, fmt.Errorf("a cosignature/v1 key is 32 bytes")
	}
	h := sha256.Sum256(append([]byte(parts[0]+"\n"), raw...))
	hash := binary.BigEndian.Uint32(h[:4])
	if want, err := strconv.ParseUint(parts[1], 16, 32); err != nil || uint32(want) != hash {
		return nil, fmt.Errorf("the key hash %s does not match the key (%08x)", parts[1], hash)
	}
	return cosignatureV1{name: parts[0], hash: hash, key: ed25519.PublicKey(raw[1:])}, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: verify-note VKEY < note")
		os.Exit(2)
	}
	v, err := verifier(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad verifier key:", err)
		os.Exit(1)
	}
	msg, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		fmt.Fprintln(os.Stderr, "note does not verify:", err)
		os.Exit(1)
	}
	fmt.Print(n.Text)
}
