package nft

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// TestChainMarkKeepsEarlierMarks: a chain's mark is made of its name and
// its fingerprint, and the fingerprint is a hash of the chain's rules as
// text; cnibox before the fingerprints were hashes (they were the text)
// made the mark of SHA-256(name)[:8] and SHA-256(text)[:8]. The marks of
// a table it wrote must read the same now, or the first full sync after
// an upgrade would take every marked chain for changed and rewrite it.
func TestChainMarkKeepsEarlierMarks(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"np-in4", "chain\ncmp:0,1,\x01;\n"},
		{"n-abcdef-eg6", "src\neg6|log all|r1 allow (peer ports);"},
		{"", ""},
	} {
		n, f := sha256.Sum256([]byte(c.name)), sha256.Sum256([]byte(c.text))
		earlier := append(n[:8:8], f[:8]...)
		fp, _ := fpOf(nil, c.text)
		if got := chainMark(c.name, fp); !bytes.Equal(got, earlier) {
			t.Errorf("chainMark(%q) of %q = %x, an earlier cnibox's mark %x", c.name, c.text, got, earlier)
		}
		// The text in parts hashes as the text.
		if len(c.text) > 3 {
			if parts, _ := fpOf([]byte("left over"), c.text[:3], c.text[3:]); parts != fp {
				t.Errorf("fpOf of %q in two parts = %x, in one %x", c.text, parts, fp)
			}
		}
	}
}
