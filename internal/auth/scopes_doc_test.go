package auth

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestPolicyDocListsEveryScope (issue 51): docs/policy.md's scope table
// names exactly the scopes a policy may grant (KnownScopes), so a scope
// added to the code without a row, or a row for a scope that does not
// exist, fails here.
func TestPolicyDocListsEveryScope(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	var known []string
	for _, s := range KnownScopes {
		known = append(known, string(s))
	}
	slices.Sort(documented)
	slices.Sort(known)
	if !slices.Equal(documented, known) {
		t.Errorf("docs/policy.md's scope table lists %v; the code's scopes are %v", documented, known)
	}
}
