//go:build kube

package node

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// specResult is one spec of e2e's JUnit report: its full text and its
// state (passed, failed or skipped; ginkgo's panicked, timedout,
// interrupted and aborted count as failed).
type specResult struct {
	name, state, failure string
}

// readJUnit reads the JUnit report(s) e2e wrote into dir (--report-dir)
// and returns the specs focus picks (those the run's skip left out, or a
// spec skipped itself, as skipped), and a suite node that failed: the
// report also lists every spec the focus left out, which the run does not
// count.
func readJUnit(dir, focus string) ([]specResult, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "junit*.xml"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no JUnit report in %s (%v): e2e did not run its specs", dir, err)
	}
	f := regexp.MustCompile(focus)
	var out []specResult
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var suites struct {
			Suites []struct {
				Cases []struct {
					Name    string `xml:"name,attr"`
					Status  string `xml:"status,attr"`
					Failure *struct {
						Message string `xml:"message,attr"`
						Text    string `xml:",chardata"`
					} `xml:"failure"`
				} `xml:"testcase"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(data, &suites); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, su := range suites.Suites {
			for _, c := range su.Cases {
				name := strings.TrimPrefix(strings.TrimSpace(c.Name), "[It] ")
				suite := strings.HasPrefix(name, "[SynchronizedBeforeSuite]") || strings.HasPrefix(name, "[BeforeSuite]") ||
					strings.HasPrefix(name, "[ReportAfterSuite]") || strings.HasPrefix(name, "[SynchronizedAfterSuite]")
				if !suite && !f.MatchString(name) {
					continue
				}
				r := specResult{name: name, state: c.Status}
				switch c.Status {
				case "passed", "skipped":
				case "pending":
					r.state = "skipped"
				default:
					r.state = "failed"
				}
				if suite && r.state != "failed" {
					continue
				}
				if c.Failure != nil {
					r.failure = strings.TrimSpace(c.Failure.Message + "\n" + c.Failure.Text)
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// known is testdata/conformance-known.txt for one configuration: the
// failures whose cause is known (the harness or upstream), each with it.
type known []struct {
	re    *regexp.Regexp
	cause string
}

// knownFailures reads testdata/conformance-known.txt: lines of
// CONFIG<TAB>REGEXP<TAB>CAUSE (CONFIG * for every configuration), # comments.
func knownFailures(t *testing.T, config string) known {
	t.Helper()
	f, err := os.Open("testdata/conformance-known.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var k known
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.SplitN(line, "\t", 3)
		if len(fields) != 3 {
			t.Fatalf("testdata/conformance-known.txt: %q: want CONFIG<TAB>REGEXP<TAB>CAUSE", line)
		}
		if fields[0] != "*" && fields[0] != config {
			continue
		}
		k = append(k, struct {
			re    *regexp.Regexp
			cause string
		}{regexp.MustCompile(fields[1]), fields[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return k
}

// match is the cause of the known failure name is, if it is one.
func (k known) match(name string) (string, bool) {
	for _, e := range k {
		if e.re.MatchString(name) {
			return e.cause, true
		}
	}
	return "", false
}
