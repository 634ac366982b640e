package main

import (
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const contextName = "wasmgpu"

// kubeconfigFor is a kubeconfig for the admin identity, with all key
// material inline so the file stands alone.
func kubeconfigFor(server string, p *pki) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: p.caCertPEM,
	}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{
		ClientCertificateData: p.adminCertPEM,
		ClientKeyData:         p.adminKeyPEM,
	}
	cfg.Contexts[contextName] = &clientcmdapi.Context{
		Cluster:   contextName,
		AuthInfo:  adminUser,
		Namespace: "default",
	}
	cfg.CurrentContext = contextName
	return clientcmd.Write(*cfg)
}

// writeFileAtomic writes data to path through a rename, so a reader never
// sees half a file.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
