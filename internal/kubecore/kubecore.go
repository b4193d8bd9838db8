// Package kubecore is what cnibox-agent's two Kubernetes clients (the kube
// lease backend, which reads Nodes, and the pod API, which reads Pods) share:
// a REST client for the core/v1 API that knows only the few hand-written
// types a client decodes (so the agent does not link k8s.io/api, whose
// generated code and scheme would double its resident memory), and the
// node's name. Only cnibox-agent imports it; cnibox never links client-go.
package kubecore

import (
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// CoreV1 is the group/version of the core API (Node, Pod).
var CoreV1 = schema.GroupVersion{Group: "", Version: "v1"}

// Client returns a REST client for the core/v1 API of rc that decodes the
// given object types (JSON only, no conversion).
func Client(rc *rest.Config, types ...runtime.Object) (*rest.RESTClient, error) {
	return GroupClient(rc, CoreV1, "/api", types...)
}

// GroupClient is Client for any group/version gv, served under apiPath
// ("/api" for the core group, "/apis" for the others).
func GroupClient(rc *rest.Config, gv schema.GroupVersion, apiPath string, types ...runtime.Object) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(gv, types...)
	metav1.AddToGroupVersion(scheme, gv)
	return RESTClient(rc, gv, apiPath, scheme)
}

// RESTClient returns a REST client of rc for the group/version gv, served
// under apiPath ("/api" for the core group, "/apis" for the others), that
// decodes the types of scheme, no conversion: JSON, or protobuf where rc's
// AcceptContentTypes asks for it (types generated with it: k8s.io/api's).
// It sends JSON. An empty user agent is client-go's default.
func RESTClient(rc *rest.Config, gv schema.GroupVersion, apiPath string, scheme *runtime.Scheme) (*rest.RESTClient, error) {
	c := *rc
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(&c)
}

// Connect builds the client configuration from --kube-api-url and
// --kubeconfig-file (both empty: in-cluster) and returns Client for it with
// cnibox-agent's user agent. what prefixes the errors.
func Connect(apiURL, kubeconfig, what string, types ...runtime.Object) (*rest.RESTClient, error) {
	rc, err := Config(apiURL, kubeconfig, what)
	if err != nil {
		return nil, err
	}
	c, err := Client(rc, types...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return c, nil
}

// Config is the client configuration of --kube-api-url and
// --kubeconfig-file (both empty: in-cluster) with cnibox-agent's user agent.
func Config(apiURL, kubeconfig, what string) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags(apiURL, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%s: client config (--kubeconfig-file %q, --kube-api-url %q): %w", what, kubeconfig, apiURL, err)
	}
	rc.UserAgent = "cnibox-agent"
	return rc, nil
}

// NodeName returns the node's name: flag (--node-name) if set, else
// $NODE_NAME, else the host name. what prefixes the error.
func NodeName(flag, what string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n, nil
	}
	n, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("%s: no node name: set --node-name or $NODE_NAME (%w)", what, err)
	}
	return n, nil
}
