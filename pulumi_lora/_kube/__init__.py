"""Kubernetes: the kubeconfig and its credentials, the calls on objects, the manifests we write."""
