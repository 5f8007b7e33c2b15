package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/ops"
)

// kubeFlags are the flags kubectl takes to reach a cluster, under kubectl's
// names, loaded by client-go's clientcmd as kubectl loads them: --kubeconfig,
// else $KUBECONFIG (a list of files, merged), else ~/.kube/config, else the
// in-cluster config; --context picks a context; -n/--namespace overrides
// the context's namespace. They are standard library flags, like the rest
// of tenurectl's (k8s.io/cli-runtime's ConfigFlags would bring pflag and
// cobra into every command's parsing).
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&k.context, "context", "", "the kubeconfig context to use")
	fs.StringVar(&k.namespace, "namespace", "", "the namespace (default: the context's)")
	fs.StringVar(&k.namespace, "n", "", "short for --namespace")
}

func (k *kubeFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
	overrides.Context.Namespace = k.namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// restConfig is the client configuration, with kubectl's client-side rate
// limits (check reads a few objects one by one after its lists).
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	cfg, err := k.clientConfig().ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 300
	cfg.UserAgent = "tenurectl"
	return cfg, nil
}

// namespaceOrDefault is -n, else the context's namespace, else "default".
func (k *kubeFlags) namespaceOrDefault() (string, error) {
	ns, _, err := k.clientConfig().Namespace()
	return ns, err
}

func (k *kubeFlags) client() (*ops.Client, error) {
	c, err := k.kubeClient()
	if err != nil {
		return nil, err
	}
	return ops.New(c), nil
}

// kubeClient is a controller-runtime client that knows tenure's types.
func (k *kubeFlags) kubeClient() (client.Client, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	return kube.NewClient(cfg)
}

// Output formats, as kubectl's -o names them; "" is the table.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

var outputs = []string{outputJSON, outputYAML, outputWide}

func registerOutput(fs *flag.FlagSet, output *string) {
	usage := "output format: " + strings.Join(outputs, ", ") + " (default: a table)"
	fs.StringVar(output, "output", "", usage)
	fs.StringVar(output, "o", "", "short for --output")
}

// report is what an operator command prints.
type report interface {
	WriteTable(w io.Writer, wide bool) error
}

// printReport writes rep as a table, or as JSON or YAML of its fields.
func printReport(w io.Writer, rep report, output string) error {
	switch output {
	case outputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "    ")
		return enc.Encode(rep)
	case outputYAML:
		b, err := yaml.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return rep.WriteTable(w, output == outputWide)
}

// parseInterspersed parses flags anywhere among the positional arguments,
// as kubectl does (`tenurectl get san -o json`), and returns the
// positional ones; "--" ends the flags. A short flag glued to its value
// (`-ojson`, `-nkube-system`) is split, as pflag reads it.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	args = splitGlued(fs, args)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first positional argument or after "--".
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// splitGlued rewrites "-oVALUE" as "-o", "VALUE" for one-letter flags that
// take a value, when "-oVALUE" is not itself a flag.
func splitGlued(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !hasValue && fs.Lookup(name) == nil {
			if f := fs.Lookup(a[1:2]); f != nil && !isBoolFlag(f) {
				out = append(out, a[:2], a[2:])
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// checkOutput refuses an -o value the command does not print.
func checkOutput(fs *flag.FlagSet, output string) error {
	if output == outputTable || slices.Contains(outputs, output) {
		return nil
	}
	fmt.Fprintf(fs.Output(), "%s: -o must be one of %s, got %q\n", fs.Name(), strings.Join(outputs, ", "), output)
	fs.Usage()
	return errUsage
}
