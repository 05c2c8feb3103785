// verify-note: checks a C2SP signed note with golang.org/x/mod/sumdb/note, the reference
// implementation, independently of fleetd's own code. Usage: verify-note VKEY < note
// Prints the note's text on success; exits 1 with the error otherwise.
package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/mod/sumdb/note"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: verify-note VKEY < note")
		os.Exit(2)
	}
	v, err := note.NewVerifier(os.Args[1])
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
