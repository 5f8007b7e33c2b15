package tenurectl

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
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
// the context's namespace.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&k.context, "context", "", "the kubeconfig context to use")
	fs.StringVarP(&k.namespace, "namespace", "n", "", "the namespace (default: the context's)")
}

func (k *kubeFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
	overrides.Context.Namespace = k.namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// contexts lists the contexts of the kubeconfig, for completion.
func (k *kubeFlags) contexts() []string {
	raw, err := k.clientConfig().RawConfig()
	if err != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(raw.Contexts))
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
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := kube.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	oc := ops.New(c)
	oc.OpenAPI = openapi.ToClientWithContext(dc.OpenAPIV3())
	return oc, nil
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

func registerOutput(fs *pflag.FlagSet, output *string) {
	fs.StringVarP(output, "output", "o", "", "output format: "+strings.Join(outputs, ", ")+" (default: a table)")
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

// checkOutput refuses an -o value the command does not print.
func checkOutput(e *env, cmd *cobra.Command, output string) error {
	if output == outputTable || slices.Contains(outputs, output) {
		return nil
	}
	fmt.Fprintf(e.stderr, "%s: -o must be one of %s, got %q\n", cmd.CommandPath(), strings.Join(outputs, ", "), output)
	return refuse(e, cmd)
}
