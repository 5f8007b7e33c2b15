// Package monitoring_test checks tenure's alerts: the PrometheusRule of
// deploy/components/monitoring and the plain Prometheus rules file beside
// it are the same rules, each alert says what it means and which tenurectl
// command to run, and promtool's unit tests (tenure.rules.test.yml) cover
// every alert. With the integration tag it also runs them through
// promtool, and a real Prometheus against a local control plane.
package monitoring_test

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "write tenure.rules.yml from prometheusrule.yaml")

// monitoringDir is deploy/components/monitoring of this checkout.
func monitoringDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "components", "monitoring")
}

type ruleGroups struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func readYAML(t testing.TB, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// prometheusRuleGroups is the spec.groups of the PrometheusRule.
func prometheusRuleGroups(t testing.TB) ruleGroups {
	t.Helper()
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       ruleGroups     `json:"spec"`
	}
	readYAML(t, filepath.Join(monitoringDir(t), "prometheusrule.yaml"), &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s", pr.APIVersion, pr.Kind)
	}
	return pr.Spec
}

const plainHeader = `# tenure's alerts as a plain Prometheus rules file (rule_files:), generated
# from prometheusrule.yaml by
#   go test ./test/monitoring -run TestPlainRulesAreThePrometheusRule -update
# Do not edit: edit prometheusrule.yaml and regenerate.
`

// TestPlainRulesAreThePrometheusRule: tenure.rules.yml holds exactly the
// PrometheusRule's groups, compared as objects.
func TestPlainRulesAreThePrometheusRule(t *testing.T) {
	want := prometheusRuleGroups(t)
	path := filepath.Join(monitoringDir(t), "tenure.rules.yml")
	if *update {
		b, err := yaml.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append([]byte(plainHeader), b...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got ruleGroups
	readYAML(t, path, &got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tenure.rules.yml differs from prometheusrule.yaml's spec.groups; regenerate it:\n" +
			"  go test ./test/monitoring -run TestPlainRulesAreThePrometheusRule -update")
	}
}

// TestEveryAlertSaysWhatAndWhichCommand: each alert has a severity, a
// summary, and a runbook line naming a tenurectl command.
func TestEveryAlertSaysWhatAndWhichCommand(t *testing.T) {
	n := 0
	for _, g := range prometheusRuleGroups(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
			if !strings.Contains(r.Annotations["runbook"], "`kubectl tenure ") {
				t.Errorf("%s: runbook %q names no `kubectl tenure ...` command", r.Alert, r.Annotations["runbook"])
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts")
	}
}

// alertTests are the alert names the promtool tests evaluate, with whether
// some test expects the alert to fire.
func alertTests(t testing.TB) map[string]bool {
	t.Helper()
	var tests struct {
		RuleFiles          []string `json:"rule_files"`
		EvaluationInterval string   `json:"evaluation_interval"`
		Tests              []struct {
			Interval    string           `json:"interval"`
			InputSeries []map[string]any `json:"input_series"`
			AlertTests  []struct {
				EvalTime  string           `json:"eval_time"`
				AlertName string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, filepath.Join(monitoringDir(t), "tenure.rules.test.yml"), &tests)
	out := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertTests {
			out[at.AlertName] = out[at.AlertName] || len(at.ExpAlerts) > 0
		}
	}
	return out
}

// TestEveryAlertHasAPromtoolTest: every alert is evaluated by
// tenure.rules.test.yml and expected to fire in at least one case, and
// no test names an alert that does not exist.
func TestEveryAlertHasAPromtoolTest(t *testing.T) {
	tested := alertTests(t)
	alerts := map[string]bool{}
	for _, g := range prometheusRuleGroups(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if fires, ok := tested[r.Alert]; !ok {
				t.Errorf("alert %s has no test in tenure.rules.test.yml", r.Alert)
			} else if !fires {
				t.Errorf("alert %s is never expected to fire in tenure.rules.test.yml", r.Alert)
			}
		}
	}
	for name := range tested {
		if !alerts[name] {
			t.Errorf("tenure.rules.test.yml tests %s, which is no alert", name)
		}
	}
}
