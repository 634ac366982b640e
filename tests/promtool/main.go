// `promtool check rules` with only what it needs: the same checks as
// github.com/prometheus/prometheus/cmd/promtool's (its checkRules, at the
// version go.mod pins), from the same packages, without the rest of promtool
// (its service discovery, TSDB and HTTP clients: a cold build of the whole
// command took 13 minutes on 2 cores, this one about a minute).
//
//	promtool check rules [--lint=duplicate-rules|all|none] [--lint-fatal]
//	                     [--ignore-unknown-fields] [FILE...]
//
// rulefmt.ParseFile decodes each file strictly, validates its groups and
// rules and parses every expression with Prometheus's PromQL parser and every
// annotation and label template with its template engine. As promtool does,
// it prints "Checking FILE" and "  SUCCESS: N rules found" on stdout, the
// errors after "  FAILED:" on stderr, reads standard input when given no
// file, and exits 1 on any error (3 on lint findings alone with --lint-fatal;
// the duplicate-rules lint, on by default, is reported but not fatal).
package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	successExitCode = 0
	failureExitCode = 1
	lintErrExitCode = 3
)

var (
	errLint = errors.New("lint error")
	logger  = promslog.New(&promslog.Config{})
)

func init() {
	// As promtool's: metric and label names may be any UTF-8.
	//nolint:staticcheck
	model.NameValidationScheme = model.UTF8Validation
}

type rulesLintConfig struct {
	all, duplicateRules, fatal bool
	ignoreUnknownFields        bool
	nameValidationScheme       model.ValidationScheme
}

func (ls rulesLintConfig) lintDuplicateRules() bool { return ls.all || ls.duplicateRules }

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "promtool: error: %s, try --help\n", msg)
	os.Exit(failureExitCode)
}

func main() {
	args := os.Args[1:]
	if len(args) >= 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
		fmt.Println("usage: promtool check rules [--lint=duplicate-rules|all|none] [--lint-fatal] [--ignore-unknown-fields] [FILE...]")
		os.Exit(successExitCode)
	}
	if len(args) < 2 || args[0] != "check" || args[1] != "rules" {
		usage("only `check rules` is built in (tests/promtool)")
	}
	lint := "duplicate-rules"
	ls := rulesLintConfig{nameValidationScheme: model.UTF8Validation}
	var files []string
	rest := args[2:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			files = append(files, rest[i+1:]...)
			i = len(rest)
		case a == "--lint-fatal":
			ls.fatal = true
		case a == "--ignore-unknown-fields":
			ls.ignoreUnknownFields = true
		case strings.HasPrefix(a, "--lint="):
			lint = strings.TrimPrefix(a, "--lint=")
		case a == "--lint":
			if i+1 == len(rest) {
				usage("expected argument for flag '--lint'")
			}
			i++
			lint = rest[i]
		case strings.HasPrefix(a, "-") && a != "-":
			usage(fmt.Sprintf("unknown long flag '%s'", a))
		default:
			files = append(files, a)
		}
	}
	for setting := range strings.SplitSeq(lint, ",") {
		switch setting {
		case "all":
			ls.all = true
		case "duplicate-rules":
			ls.duplicateRules = true
		case "none", "":
		default:
			fmt.Printf("WARNING: unknown lint option: %q\n", setting)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			usage(fmt.Sprintf("path '%s' does not exist", f))
		}
	}

	p := parser.NewParser(parser.Options{})
	var failed, hasErrors bool
	if len(files) == 0 {
		fmt.Println("Checking standard input")
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "  FAILED:", err)
			os.Exit(failureExitCode)
		}
		failed, hasErrors = report(func() (*rulefmt.RuleGroups, []error) {
			return rulefmt.Parse(data, ls.ignoreUnknownFields, ls.nameValidationScheme, p, logger)
		}, ls)
	} else {
		for _, f := range files {
			fmt.Println("Checking", f)
			fl, he := report(func() (*rulefmt.RuleGroups, []error) {
				return rulefmt.ParseFile(f, ls.ignoreUnknownFields, ls.nameValidationScheme, p, logger)
			}, ls)
			failed, hasErrors = failed || fl, hasErrors || he
		}
	}
	switch {
	case failed && hasErrors:
		os.Exit(failureExitCode)
	case failed && ls.fatal:
		os.Exit(lintErrExitCode)
	}
	os.Exit(successExitCode)
}

// report checks one input as promtool's checkRules does for each file.
func report(parse func() (*rulefmt.RuleGroups, []error), ls rulesLintConfig) (failed, hasErrors bool) {
	rgs, errs := parse()
	if errs != nil {
		failed = true
		fmt.Fprintln(os.Stderr, "  FAILED:")
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e.Error())
			hasErrors = hasErrors || !errors.Is(e, errLint)
		}
		if hasErrors {
			return failed, hasErrors
		}
	}
	if n, errs := checkRuleGroups(rgs, ls); errs != nil {
		fmt.Fprintln(os.Stderr, "  FAILED:")
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e.Error())
			hasErrors = hasErrors || !errors.Is(e, errLint)
		}
		failed = true
	} else {
		fmt.Printf("  SUCCESS: %d rules found\n", n)
	}
	fmt.Println()
	return failed, hasErrors
}

func checkRuleGroups(rgs *rulefmt.RuleGroups, ls rulesLintConfig) (int, []error) {
	numRules := 0
	for _, rg := range rgs.Groups {
		numRules += len(rg.Rules)
	}
	if ls.lintDuplicateRules() {
		if dRules := checkDuplicates(rgs.Groups); len(dRules) != 0 {
			var msg strings.Builder
			fmt.Fprintf(&msg, "%d duplicate rule(s) found.\n", len(dRules))
			for _, n := range dRules {
				fmt.Fprintf(&msg, "Metric: %s\nLabel(s):\n", n.metric)
				n.label.Range(func(l labels.Label) {
					fmt.Fprintf(&msg, "\t%s: %s\n", l.Name, l.Value)
				})
			}
			msg.WriteString("Might cause inconsistency while recording expressions")
			return 0, []error{fmt.Errorf("%w %s", errLint, msg.String())}
		}
	}
	return numRules, nil
}

type compareRuleType struct {
	metric string
	label  labels.Labels
}

func compare(a, b compareRuleType) int {
	if res := strings.Compare(a.metric, b.metric); res != 0 {
		return res
	}
	return labels.Compare(a.label, b.label)
}

// checkDuplicates finds rules with the same name and labels (their group's
// merged with their own), as promtool's does.
func checkDuplicates(groups []rulefmt.RuleGroup) []compareRuleType {
	var duplicates, cRules []compareRuleType
	for _, group := range groups {
		for _, rule := range group.Rules {
			metric := rule.Alert
			if metric == "" {
				metric = rule.Record
			}
			// rules.FromMaps, without importing the rule manager.
			merged := maps.Clone(group.Labels)
			if merged == nil {
				merged = map[string]string{}
			}
			maps.Copy(merged, rule.Labels)
			cRules = append(cRules, compareRuleType{metric: metric, label: labels.FromMap(merged)})
		}
	}
	if len(cRules) < 2 {
		return duplicates
	}
	sort.Slice(cRules, func(i, j int) bool { return compare(cRules[i], cRules[j]) < 0 })
	last := cRules[0]
	for i := 1; i < len(cRules); i++ {
		if compare(last, cRules[i]) == 0 {
			if len(duplicates) == 0 || compare(last, duplicates[len(duplicates)-1]) != 0 {
				duplicates = append(duplicates, cRules[i])
			}
		}
		last = cRules[i]
	}
	return duplicates
}
