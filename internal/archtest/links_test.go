package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink is a link in Markdown text: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// outsideCode returns text's lines outside fenced code blocks, and
// inline code spans blanked.
func outsideCode(text string) []string {
	var lines []string
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
			continue
		}
		if !fence {
			lines = append(lines, l)
		}
	}
	return lines
}

// anchor is the fragment GitHub gives a heading: lower case, spaces as
// hyphens, and nothing else but letters, digits, hyphens and underscores.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the fragments of path's headings.
func anchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a := map[string]bool{}
	for _, l := range outsideCode(string(b)) {
		if strings.HasPrefix(l, "#") {
			a[anchor(strings.TrimLeft(l, "#"))] = true
		}
	}
	return a
}

// TestDocumentationLinks: every relative link in the README and docs/
// leads to a file of the repository, and its #fragment to a heading
// there; the README links every page of docs/.
func TestDocumentationLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	readme := filepath.Join(root, "README.md")
	linked := map[string]bool{}
	for _, page := range append([]string{readme}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range outsideCode(string(b)) {
			for _, m := range markdownLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: no such file", page, target)
					continue
				}
				if page == readme {
					linked[filepath.Clean(dest)] = true
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[frag] {
					t.Errorf("%s: link %s: no heading there makes #%s", page, target, frag)
				}
			}
		}
	}
	for _, page := range pages {
		if !linked[filepath.Clean(page)] {
			t.Errorf("the README links no %s", page)
		}
	}
}

// TestAnchor: the fragments GitHub makes of headings with code and
// punctuation.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		" Thread states and `record --wall`: why a thread is slow, not just where": "thread-states-and-record---wall-why-a-thread-is-slow-not-just-where",
		" `rubyperf top`": "rubyperf-top",
		" Install":        "install",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
